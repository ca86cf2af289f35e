// Servers this process started must not outlive it. The hooks are installed only while at least one
// server runs, so importing the launcher changes nothing, and neither an 'exit' nor a signal listener
// keeps the event loop alive.

export interface Stoppable {
  /** Stops the server synchronously: called where no awaiting is possible. */
  stopNow(): void;
}

const live = new Set<Stoppable>();
const SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

function stopAll(): void {
  for (const server of [...live]) {
    try {
      server.stopNow();
    } catch {
      // Best effort: the process is going away whatever happens here.
    }
  }
  live.clear();
}

function onSignal(signal: NodeJS.Signals): void {
  // Someone else handles this signal (the CLI's graceful shutdown, vitest): they decide whether and
  // when to exit, and the 'exit' hook stops whatever is still running then.
  if (process.listenerCount(signal) > 1) return;
  stopAll();
  uninstall();
  // With no listener left the default disposition is back: re-raising ends the process the usual way
  // (killed by the signal, exit status 128+n in a shell), as if we had never listened.
  process.kill(process.pid, signal);
}

let installed = false;

function install(): void {
  if (installed) return;
  installed = true;
  process.on('exit', stopAll);
  for (const s of SIGNALS) process.on(s, onSignal);
}

function uninstall(): void {
  if (!installed) return;
  installed = false;
  process.off('exit', stopAll);
  for (const s of SIGNALS) process.off(s, onSignal);
}

export function track(server: Stoppable): void {
  live.add(server);
  install();
}

export function untrack(server: Stoppable): void {
  live.delete(server);
  if (live.size === 0) uninstall();
}
