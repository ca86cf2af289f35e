import type { CallbackDelivery } from '../../index.js';
import { AwaClient } from '../../roles.js';
import { cliActor } from '../actor.js';
import { parseArgs, UsageError, type OptionSpec } from '../args.js';
import { connectionOptions, DB_OPTIONS, POOLER_OPTIONS } from '../database-url.js';
import type { CliContext } from '../io.js';

// Delivers an external callback by token: awa callback complete|fail|retry|cancel|resume TOKEN. Exits 3 when
// no open attempt holds the token.

export const callbackOptions: Record<string, OptionSpec> = {
  ...DB_OPTIONS,
  payload: { type: 'string', description: 'JSON carried by the callback (complete, fail, resume)' },
  error: { type: 'string', description: 'the reason (fail, retry, cancel)' },
  'delay-ms': { type: 'number', description: 'retry: run again after this long (default: the backoff rule)' },
  json: { type: 'boolean', description: 'print JSON' },
  ...POOLER_OPTIONS,
};

const ACTIONS = ['complete', 'fail', 'retry', 'cancel', 'resume'] as const;

export async function callbackCommand(argv: string[], ctx: CliContext): Promise<number> {
  const { positionals, values } = parseArgs(argv, callbackOptions);
  const [action, token, ...rest] = positionals;
  if (!ACTIONS.includes(action as (typeof ACTIONS)[number]) || !token || rest.length > 0) {
    throw new UsageError(
      `usage: awa callback ${ACTIONS.join('|')} TOKEN [--payload JSON] [--error TEXT] [--delay-ms N]`,
    );
  }
  let payload: unknown;
  if (values.payload !== undefined) {
    try {
      payload = JSON.parse(values.payload as string);
    } catch (err) {
      throw new UsageError(`--payload is not JSON: ${(err as Error).message}`);
    }
  }
  const error = values.error as string | undefined;
  const client = new AwaClient({
    ...connectionOptions(values, ctx.env),
    schema: values.schema as string | undefined,
    poolSize: 1,
    // A callback delivered by hand is an operator action: recorded in the audit trail as this user.
    actor: cliActor(ctx.env),
    onAudit: () => {},
  });
  let result: CallbackDelivery;
  try {
    await client.assertMigrated();
    if (action === 'complete') result = await client.completeExternal(token, payload);
    else if (action === 'resume') result = await client.resumeExternal(token, payload);
    else if (action === 'fail')
      result = await client.failExternal(token, error ?? 'failed by callback', payload);
    else if (action === 'cancel') result = await client.cancelExternal(token, error);
    else
      result = await client.retryExternal(token, {
        delayMs: values['delay-ms'] as number | undefined,
        error,
      });
  } finally {
    await client.close();
  }
  if (values.json) ctx.out(JSON.stringify(result));
  else if (result.outcome === 'rejected')
    ctx.out('rejected: no open attempt holds this token (unknown, used, or its attempt ended)');
  else ctx.out(`${result.outcome}: job ${result.jobId}`);
  return result.outcome === 'rejected' ? 3 : 0;
}
