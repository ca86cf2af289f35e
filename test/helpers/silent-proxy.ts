import net from 'node:net';

// A TCP relay in front of PostgreSQL that can make the connections through it go silent. silence() stops
// relaying on every connection open at that moment, in both directions, and closes nothing: the client's
// writes are still accepted (the relay's kernel acknowledges them) and no answer ever comes. That is what a
// client sees of a server that froze, or of a failover that left the old address unreachable behind
// something that still holds the flow; TCP itself reports nothing for as long as it lasts. Connections made
// afterwards are relayed as usual (the "new primary"). The server keeps the silenced sessions, idle, until
// close().

export interface SilentProxy {
  /** `url` with its host and port pointed at the relay. */
  url: string;
  /** Silences every connection open now; returns how many. */
  silence(): number;
  close(): Promise<void>;
}

export async function startSilentProxy(url: string): Promise<SilentProxy> {
  const target = new URL(url);
  const live = new Set<[net.Socket, net.Socket]>();
  const silenced: net.Socket[] = [];
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || 5432), target.hostname);
    const pair: [net.Socket, net.Socket] = [client, upstream];
    live.add(pair);
    client.pipe(upstream);
    upstream.pipe(client);
    const end = () => {
      if (!live.delete(pair)) return;
      client.destroy();
      upstream.destroy();
    };
    for (const s of pair) {
      s.on('error', end);
      s.on('close', end);
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const relayed = new URL(url);
  relayed.hostname = '127.0.0.1';
  relayed.port = String((server.address() as net.AddressInfo).port);
  return {
    url: relayed.toString(),
    silence() {
      const pairs = [...live];
      live.clear();
      for (const [client, upstream] of pairs) {
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.pause();
        upstream.pause();
        silenced.push(client, upstream);
      }
      return pairs.length;
    },
    async close() {
      for (const s of silenced) s.destroy();
      for (const pair of live) for (const s of pair) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
