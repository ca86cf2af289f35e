import type pg from 'pg';
import { connect, createClient } from '../storage/index.js';

// A connection held for one long-lived purpose (LISTEN, leadership lock). It reports its loss once,
// whichever way it is lost (socket error, server terminated it, server restart).

export interface Dedicated {
  client: pg.ClientBase;
  close(): Promise<void>;
}

export async function openDedicated(
  source: { connectionString?: string; pool?: pg.Pool },
  name: string,
  onLost: (err: Error) => void,
): Promise<Dedicated> {
  let closed = false;
  const lost = (err: Error) => {
    if (closed) return;
    closed = true;
    onLost(err);
  };
  if (source.connectionString) {
    const client = createClient(source.connectionString, name);
    client.on('error', lost);
    client.on('end', () => lost(new Error(`${name} connection ended`)));
    try {
      await client.connect();
    } catch (err) {
      closed = true;
      client.end().catch(() => {});
      throw err;
    }
    return {
      client,
      close: async () => {
        closed = true;
        await client.end().catch(() => {});
      },
    };
  }
  const client = await connect(source.pool!, 'the given pool');
  client.on('error', lost);
  client.on('end', () => lost(new Error(`${name} connection ended`)));
  return {
    client,
    close: async () => {
      if (closed) return client.release(true);
      closed = true;
      client.release(true);
    },
  };
}
