import { expect } from 'vitest';
import { InvalidOptionError } from '../../src/index.js';

/** The InvalidOptionError `fn` throws; fails the test when it throws anything else, or nothing. */
export function optionError(fn: () => unknown): InvalidOptionError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(InvalidOptionError);
    return err as InvalidOptionError;
  }
  throw new Error('expected an InvalidOptionError');
}

/** The field named by the InvalidOptionError `fn` throws. */
export const fieldOf = (fn: () => unknown): string => optionError(fn).field;
