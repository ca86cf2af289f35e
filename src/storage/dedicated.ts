import type pg from 'pg';
import { boundStatements, connect, createClient } from './database.js';

// A connection held for one long-lived purpose (LISTEN, leadership lock). It reports its loss once,
// whichever way it is lost (socket error, server terminated it, server restart). A client borrowed from
// the caller's pool goes back to it the moment it is lost, marked broken (release(err)), so the pool
// replaces it instead of losing a slot; closing it later is a no-op.
// The loss can come before the owner has adopted the connection: the server's termination of the session can
// arrive in the same read as the answer to the statement that set it up, and is then reported before that
// statement's caller resumes. An owner whose onLost ignores a connection it does not hold yet must therefore
// check `lost` after its setup statement, or it adopts a dead connection and never replaces it.

/** Where a dedicated connection comes from: a client of its own (with the host's query timeout), or the
 * caller's pool. */
export interface ConnectionSource {
  connectionString?: string;
  pool?: pg.Pool;
  queryTimeoutMs?: number;
}

export interface Dedicated {
  client: pg.ClientBase;
  /** Why the connection was lost (what onLost was given), or null while it is open or after close(). */
  readonly lost: Error | null;
  /** Ends the connection; safe to call more than once and after a loss. */
  close(): Promise<void>;
  /** Cuts the connection at once, even while a statement runs on it (the server ends it on its side). */
  destroy(): void;
  /** Gives the connection up as lost because it cannot serve (`err`: pg's query timeout, or a read-only
   * server): cuts it, and reports the loss through onLost as if the server had ended it. No-op once lost or
   * closed. */
  drop(err: Error): void;
}

export async function openDedicated(
  source: ConnectionSource,
  name: string,
  onLost: (err: Error) => void,
): Promise<Dedicated> {
  let done = false;
  let lostWith: Error | null = null;
  let end: Ending | null = null;
  const lost = (err: Error) => {
    if (done) return;
    done = true;
    lostWith = err;
    end?.discard(err);
    onLost(err);
  };
  // Watched from before its setup statements: a loss can arrive in the same read as their answer.
  const watch = (c: pg.ClientBase) => {
    c.on('error', lost);
    c.on('end', () => lost(new Error(`${name} connection ended`)));
  };
  let client: pg.ClientBase;
  try {
    ({ client, end } = source.connectionString
      ? await ownClient(source.connectionString, name, source.queryTimeoutMs, watch)
      : pooledClient(await connect(source.pool!, 'the given pool'), watch));
  } catch (err) {
    done = true;
    throw err;
  }
  if (lostWith) end.discard(lostWith);
  return {
    client,
    get lost() {
      return lostWith;
    },
    close: async () => {
      done = true;
      await end.close();
    },
    destroy: () => {
      done = true;
      socketOf(client)?.destroy();
      end.discard(new Error(`${name} connection destroyed`));
    },
    drop: (err) => {
      socketOf(client)?.destroy();
      lost(err);
    },
  };
}

/** How a dedicated connection ends: closed by its owner, or discarded once lost or destroyed. */
interface Ending {
  close(): Promise<void>;
  discard(err: Error): void;
}

/** A client of its own: ended on close; a lost one is already gone, so there is nothing to discard. */
async function ownClient(
  connectionString: string,
  name: string,
  queryTimeoutMs: number | undefined,
  watch: (client: pg.ClientBase) => void,
): Promise<{ client: pg.ClientBase; end: Ending }> {
  const client = createClient(connectionString, name, queryTimeoutMs);
  watch(client);
  try {
    await client.connect();
    if (queryTimeoutMs !== undefined) await boundStatements(client, queryTimeoutMs);
  } catch (err) {
    client.end().catch(() => {});
    throw err;
  }
  return { client, end: { close: () => client.end().catch(() => {}), discard: () => {} } };
}

/** A client of the caller's pool: released once, marked broken, so the pool replaces it (a LISTEN or a
 * session lock must not pass to the pool's next user). */
function pooledClient(
  client: pg.PoolClient,
  watch: (client: pg.ClientBase) => void,
): { client: pg.ClientBase; end: Ending } {
  watch(client);
  let released = false;
  const release = (err: Error | true) => {
    if (released) return;
    released = true;
    client.release(err);
  };
  return { client, end: { close: async () => release(true), discard: (err) => release(err) } };
}

/** The socket under a pg client (not part of pg's typed API, hence the narrow probe). */
function socketOf(client: pg.ClientBase): { destroy(): void } | undefined {
  return (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream;
}
