import type { IncomingMessage } from 'node:http';
import { isIP } from 'node:net';
import type { Context } from 'hono';

// The client's address, for the audit trail's origin and for login throttling: the socket's peer, never a
// header anyone can write, unless that peer is a proxy the configuration trusts; then the nearest address
// in its X-Forwarded-For that is not itself a trusted proxy.

/** The address of the connection a request came on; 'unknown' when there is none (app.request() in tests). */
function peerOf(c: Context): string {
  const env = c.env as { incoming?: IncomingMessage; server?: { incoming?: IncomingMessage } } | undefined;
  const incoming = env?.incoming ?? env?.server?.incoming;
  return normalise(incoming?.socket?.remoteAddress ?? 'unknown');
}

/** IPv4 seen through an IPv6 socket (::ffff:10.0.0.1) is shown, and throttled, as the IPv4 address. */
function normalise(address: string): string {
  const lower = address.toLowerCase();
  return lower.startsWith('::ffff:') && isIP(lower.slice(7)) === 4 ? lower.slice(7) : lower;
}

export function clientAddress(c: Context, trustedProxies: ReadonlySet<string>): string {
  const peer = peerOf(c);
  if (!trustedProxies.has(peer)) return peer;
  const hops = (c.req.header('x-forwarded-for') ?? '')
    .split(',')
    .map((h) => normalise(h.trim()))
    .filter((h) => isIP(h) !== 0);
  // Each proxy appends the address it heard from: read from the right, past the proxies we trust.
  for (let i = hops.length - 1; i >= 0; i--) if (!trustedProxies.has(hops[i]!)) return hops[i]!;
  return peer;
}

/** A trusted proxy entry, normalised; null when it is not an IP address. */
export function proxyAddress(value: unknown): string | null {
  return typeof value === 'string' && isIP(value) !== 0 ? normalise(value) : null;
}
