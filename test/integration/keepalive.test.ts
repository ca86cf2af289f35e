import { readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwaClient, WorkerHost, defineJob } from '../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { until } from '../helpers/wait.js';

// Every connection a worker host opens (its pool, LISTEN, the leader's) has TCP keepalive armed to probe
// after 30 s of silence, read from the kernel's own socket table (/proc/net/tcp: timer 2 is the keepalive
// timer, its expiry in clock ticks). With pg's `keepAlive: true` alone the kernel waits two hours, long enough
// for a NAT gateway to drop an idle LISTEN connection without either side knowing.

const CLOCK_TICKS_PER_S = 100; // USER_HZ, the unit of /proc/net/tcp's tm->when
const ESTABLISHED = '01';
const RETRANSMIT_TIMER = 1;
const KEEPALIVE_TIMER = 2;

interface TcpSocket {
  inode: string;
  remotePort: number;
  state: string;
  timer: number;
  whenSeconds: number;
}

function tcpSockets(): TcpSocket[] {
  return ['/proc/net/tcp', '/proc/net/tcp6'].flatMap((file) =>
    readFileSync(file, 'utf8')
      .trim()
      .split('\n')
      .slice(1)
      .map((line) => line.trim().split(/\s+/))
      .map((f) => {
        const [timer, when] = f[5]!.split(':');
        return {
          inode: f[9]!,
          remotePort: parseInt(f[2]!.split(':')[1]!, 16),
          state: f[3]!,
          timer: parseInt(timer!, 16),
          whenSeconds: parseInt(when!, 16) / CLOCK_TICKS_PER_S,
        };
      }),
  );
}

/** Inodes of the sockets this process holds open. */
function ownSocketInodes(): Set<string> {
  const inodes = new Set<string>();
  for (const fd of readdirSync('/proc/self/fd')) {
    let target: string;
    try {
      target = readlinkSync(`/proc/self/fd/${fd}`);
    } catch {
      continue; // closed meanwhile
    }
    const m = /^socket:\[(\d+)\]$/.exec(target);
    if (m) inodes.add(m[1]!);
  }
  return inodes;
}

describe("TCP keepalive on the host's connections", () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase('keepalive');
    const c = new AwaClient({ connectionString: db.url });
    await c.migrate();
    await c.close();
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('every connection a worker host opens (pool, LISTEN, leader) probes its peer after 30 s of silence', async () => {
    const port = Number(new URL(db.url).port || 5432);
    const before = ownSocketInodes();
    const host = new WorkerHost({
      connectionString: db.url,
      queues: { keepalive: 2 },
      leaderElectionIntervalMs: 50,
    });
    host.on('error', () => {});
    host.register(defineJob({ kind: 'keepalive_job', queue: 'keepalive' }), () => {});
    try {
      await host.start();
      await until('the host to lead', async () => host.isLeader);
      const own = ownSocketInodes();
      const opened = tcpSockets().filter(
        (s) => own.has(s.inode) && !before.has(s.inode) && s.remotePort === port && s.state === ESTABLISHED,
      );
      // At least the pool's first connection, LISTEN and the leader's.
      expect(opened.length).toBeGreaterThanOrEqual(3);
      // A socket with a statement in flight (a heartbeat, a poll, the leader's tick) shows the retransmission
      // timer (1) until the server acknowledges it: read again until none does.
      const inodes = new Set(opened.map((s) => s.inode));
      const settled = await until(
        'no statement in flight on them',
        async () => {
          const now = tcpSockets().filter((s) => inodes.has(s.inode));
          return now.every((s) => s.timer !== RETRANSMIT_TIMER) && now;
        },
        5_000,
        5,
      );
      expect(settled).toHaveLength(opened.length);
      for (const s of settled) {
        expect(s.timer, `socket ${s.inode}`).toBe(KEEPALIVE_TIMER);
        expect(s.whenSeconds, `socket ${s.inode}`).toBeLessThanOrEqual(30);
      }
    } finally {
      await host.stop();
    }
  });
});
