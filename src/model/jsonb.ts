// What PostgreSQL's jsonb can hold. It refuses U+0000 (text values cannot contain it) and text that is not
// well-formed UTF-16 (a lone surrogate: easy to get by cutting a string inside an emoji). JSON.stringify
// writes both as escapes (\u0000, \ud83d), never raw, so a scan of the serialised text finds them; an
// escape counts only when the backslash before it is not itself escaped.

const UNSTORABLE = /(?<!\\)((?:\\\\)*)\\u(?:0000|[dD][89abcdefABCDEF][0-9a-fA-F]{2})/g;

/** True when jsonb would refuse this JSON text. */
export function hasUnstorable(json: string): boolean {
  if (!json.includes('\\u')) return false;
  UNSTORABLE.lastIndex = 0;
  return UNSTORABLE.test(json);
}

/** The same JSON text with every value jsonb refuses replaced by U+FFFD, for text the runtime writes on
 * its own (errors, stacks, progress): a bad byte in a message must not cost the result it belongs to. */
export function toStorableJson(json: string): string {
  if (!hasUnstorable(json)) return json;
  return json.replace(UNSTORABLE, (_m, slashes: string) => `${slashes}\\ufffd`);
}

/** A string made safe to store as text or inside jsonb: NUL and lone surrogates become U+FFFD. */
export function storableText(text: string): string {
  // eslint-disable-next-line no-control-regex
  return text.toWellFormed().replace(/\u0000/g, '\ufffd');
}

/** Where in `value` the first string or key jsonb would refuse sits, as a path ("args.items[2].name"), or
 * null. Only walked once the fast scan has found one. */
export function unstorablePath(value: unknown, path = 'args'): string | null {
  const bad = (s: string) => s.includes('\u0000') || !s.isWellFormed();
  if (typeof value === 'string') return bad(value) ? path : null;
  if (typeof value !== 'object' || value === null) return null;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = unstorablePath(value[i], `${path}[${i}]`);
      if (found) return found;
    }
    return null;
  }
  const json = (value as { toJSON?: () => unknown }).toJSON;
  if (typeof json === 'function') return unstorablePath(json.call(value), path);
  for (const [key, v] of Object.entries(value)) {
    if (bad(key)) return `${path} (the key ${JSON.stringify(key)})`;
    const found = unstorablePath(v, `${path}.${key}`);
    if (found) return found;
  }
  return null;
}
