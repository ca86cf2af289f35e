import { createServer } from 'node:net';

// A TCP port on 127.0.0.1 that was free a moment ago, for a server a test starts (PgBouncer, a PostgreSQL
// cluster). Another process may take it before the server binds: callers that can, retry on a new one.

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}
