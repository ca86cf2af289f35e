import { existsSync } from 'node:fs';

// Where a Chromium for the end-to-end tests is: $AWA_CHROMIUM, else Debian's package (`apt-get install
// chromium`, which .ci/run does), else the usual other names. Null when none is installed.

const CANDIDATES = [
  '/usr/bin/chromium',
  '/usr/bin/chromium-browser',
  '/usr/bin/google-chrome',
  '/usr/bin/google-chrome-stable',
];

export function findChromium(): string | null {
  const fromEnv = process.env.AWA_CHROMIUM;
  if (fromEnv) return existsSync(fromEnv) ? fromEnv : null;
  return CANDIDATES.find((p) => existsSync(p)) ?? null;
}

/** Flags for a browser in a container: no sandbox (it needs user namespaces), a small /dev/shm is fine. */
export const CHROMIUM_ARGS = ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'];
