import type pg from 'pg';
import { boundStatements, connect, createClient } from '../storage/index.js';

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
  if (source.connectionString) {
    const client = createClient(source.connectionString, name, source.queryTimeoutMs);
    const lost = (err: Error) => {
      if (done) return;
      done = true;
      lostWith = err;
      onLost(err);
    };
    client.on('error', lost);
    client.on('end', () => lost(new Error(`${name} connection ended`)));
    try {
      await client.connect();
      if (source.queryTimeoutMs !== undefined) await boundStatements(client, source.queryTimeoutMs);
    } catch (err) {
      done = true;
      client.end().catch(() => {});
      throw err;
    }
    return {
      client,
      get lost() {
        return lostWith;
      },
      close: async () => {
        done = true;
        await client.end().catch(() => {});
      },
      destroy: () => {
        done = true;
        socketOf(client)?.destroy();
      },
      drop: (err) => {
        lost(err);
        socketOf(client)?.destroy();
      },
    };
  }
  const client = await connect(source.pool!, 'the given pool');
  const giveBack = (err?: Error) => {
    if (done) return false;
    done = true;
    client.release(err ?? true);
    return true;
  };
  const lost = (err: Error) => {
    if (!giveBack(err)) return;
    lostWith = err;
    onLost(err);
  };
  client.on('error', lost);
  client.on('end', () => lost(new Error(`${name} connection ended`)));
  return {
    client,
    get lost() {
      return lostWith;
    },
    close: async () => void giveBack(),
    destroy: () => {
      socketOf(client)?.destroy();
      giveBack(new Error(`${name} connection destroyed`));
    },
    drop: (err) => {
      socketOf(client)?.destroy();
      lost(err);
    },
  };
}

/** The socket under a pg client (not part of pg's typed API, hence the narrow probe). */
function socketOf(client: pg.ClientBase): { destroy(): void } | undefined {
  return (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream;
}
