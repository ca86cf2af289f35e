import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { createAdaptorServer } from '@hono/node-server';
import { Hono } from 'hono';
import { InvalidOptionError } from '../model/errors.js';
import { rejectUnknownKeys, validateInt, validateName } from '../model/validation.js';
import { createCallbackReceiver, type CallbackReceiverOptions } from './callback-receiver.js';

// Awa's HTTP server: one root app assembled from parts, each under its own path, so later surfaces (an
// operator dashboard, say) mount beside the callback receiver on the same port.

/** The parts of Awa's root HTTP app; each is mounted under its own path when given. */
export interface HttpAppParts {
  /** The callback receiver (createCallbackReceiver), mounted at /callbacks. */
  callbacks?: Hono;
  /** The operator dashboard (createDashboard), which carries its own base path (default /dashboard). */
  dashboard?: Hono;
}

/** Builds the root app from its parts: POST /callbacks is the callback receiver, /dashboard the dashboard. */
export function createHttpApp(parts: HttpAppParts): Hono {
  const app = new Hono();
  if (parts.callbacks) app.route('/callbacks', parts.callbacks);
  if (parts.dashboard) app.route('/', parts.dashboard);
  return app;
}

export interface ListenOptions {
  /** Default 8080; 0 picks a free port. */
  port?: number;
  /** Address to bind. Default 127.0.0.1 (put a TLS-terminating proxy in front for outside callers). */
  host?: string;
}

export interface RunningServer {
  /** Base URL, e.g. http://127.0.0.1:8080 */
  readonly url: string;
  readonly port: number;
  readonly server: Server;
  /** Stops accepting connections, lets requests in flight finish (up to graceMs, default 5 s), then closes. */
  close(graceMs?: number): Promise<void>;
}

/** Serves a fetch-style app (the root app, or any part) over HTTP with @hono/node-server. */
export async function listen(
  app: { fetch: (request: Request) => Response | Promise<Response> },
  options: ListenOptions = {},
): Promise<RunningServer> {
  rejectUnknownKeys('options', options, ['port', 'host']);
  const port = options.port === undefined ? 8080 : validateInt('port', options.port, 0, 65_535);
  const host = options.host === undefined ? '127.0.0.1' : validateName('host', options.host);
  const server = createAdaptorServer({ fetch: app.fetch }) as Server;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    url: `http://${shown}:${address.port}`,
    port: address.port,
    server,
    close: (graceMs = 5_000) =>
      new Promise<void>((resolve) => {
        const force = setTimeout(() => server.closeAllConnections(), graceMs);
        server.close(() => {
          clearTimeout(force);
          resolve();
        });
        server.closeIdleConnections();
      }),
  };
}

export interface ServeCallbacksOptions extends CallbackReceiverOptions, ListenOptions {}

/** The callback receiver on its own server: POST <url>/callbacks. */
export function serveCallbacks(options: ServeCallbacksOptions): Promise<RunningServer> {
  if (typeof options !== 'object' || options === null)
    throw new InvalidOptionError('options', 'must be an object');
  const { port, host, ...receiver } = options;
  return listen(createHttpApp({ callbacks: createCallbackReceiver(receiver) }), { port, host });
}
