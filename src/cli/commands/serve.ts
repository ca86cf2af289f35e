import type { Hono } from 'hono';
import type { AddressInfo } from 'node:net';
import {
  createCallbackReceiver,
  createDashboard,
  createHttpApp,
  isLoopback,
  listen,
} from '../../http/index.js';
import { auditLine } from '../../model/audit.js';
import { parseSecretList } from '../../model/signature.js';
import { AwaClient } from '../../roles.js';
import { parseArgs, UsageError, type OptionSpec } from '../args.js';
import { connectionOptions, DB_OPTIONS, POOLER_OPTIONS, READ_OPTIONS, readOptions } from '../database-url.js';
import type { CliContext } from '../io.js';

// awa serve: Awa's HTTP server, assembled from parts (createHttpApp): the signed callback receiver at
// POST /callbacks when a callback secret is configured, and the operator dashboard at /dashboard when dashboard
// credentials are (or --dashboard-open on loopback). Secrets come from the environment rather than flags for the
// dashboard, so they never show in a process list.

export const serveOptions: Record<string, OptionSpec> = {
  ...DB_OPTIONS,
  ...POOLER_OPTIONS,
  ...READ_OPTIONS,
  port: { type: 'number', description: 'port to listen on (default 8080)' },
  host: { type: 'string', description: 'address to bind (default 127.0.0.1)' },
  'callback-secret': {
    type: 'string',
    multiple: true,
    description: 'secret callbacks are signed with (repeat while rotating; default: $AWA_CALLBACK_SECRET)',
  },
  'tolerance-seconds': {
    type: 'number',
    description: 'accepted clock difference of a signature (default 300)',
  },
  'max-body-bytes': { type: 'number', description: 'largest callback body (default 1 MiB)' },
  dashboard: {
    type: 'boolean',
    description:
      'serve the dashboard at /dashboard (default: when $AWA_DASHBOARD_TOKEN or $AWA_DASHBOARD_USER/$AWA_DASHBOARD_PASSWORD is set)',
  },
  'dashboard-user': {
    type: 'string',
    description: 'dashboard basic-auth user (its password from $AWA_DASHBOARD_PASSWORD)',
  },
  'dashboard-open': {
    type: 'boolean',
    description: 'serve the dashboard without authentication (loopback addresses only, unless --insecure)',
  },
  insecure: {
    type: 'boolean',
    description: 'allow --dashboard-open on a non-loopback address (something in front must authenticate)',
  },
  'allowed-origin': {
    type: 'string',
    multiple: true,
    description: "another origin dashboard actions may come from, e.g. a proxy's https://ops.example.com",
  },
  json: {
    type: 'boolean',
    description:
      'once listening, print one JSON line on stdout: {"url", "host", "port", "callbacks", "dashboard"}',
  },
  'secure-cookie': {
    type: 'boolean',
    description: 'mark the dashboard session cookie Secure (users reach it over HTTPS, through a TLS proxy)',
  },
  'trusted-proxy': {
    type: 'string',
    multiple: true,
    description:
      "a proxy's IP address whose X-Forwarded-For gives the dashboard client's address (repeatable)",
  },
};

/** What `awa serve` warns, once, when dashboard sessions would cross the network in clear. */
export const PLAIN_HTTP_WARNING =
  'sessions travel over plain HTTP; put TLS in front and pass --secure-cookie';

/** Serves until SIGINT/SIGTERM, then stops accepting, lets requests finish and closes. */
export async function serveCommand(argv: string[], ctx: CliContext): Promise<void> {
  const { positionals, values } = parseArgs(argv, serveOptions);
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  const given = (values['callback-secret'] as string[] | undefined) ?? [];
  const secrets = given.length > 0 ? given : parseSecretList(ctx.env.AWA_CALLBACK_SECRET ?? '');
  const env = ctx.env;
  const dashboardWanted =
    values.dashboard === true ||
    (values.dashboard !== false &&
      Boolean(
        values['dashboard-user'] ||
        values['dashboard-open'] ||
        env.AWA_DASHBOARD_TOKEN ||
        env.AWA_DASHBOARD_USER ||
        env.AWA_DASHBOARD_PASSWORD,
      ));
  if (secrets.length === 0 && !dashboardWanted) {
    throw new UsageError(
      'no callback secret: set AWA_CALLBACK_SECRET (several separated by commas while rotating) or pass --callback-secret; ' +
        'or serve the dashboard: set AWA_DASHBOARD_TOKEN (or AWA_DASHBOARD_USER and AWA_DASHBOARD_PASSWORD)',
    );
  }
  if (values.insecure === true && values['dashboard-open'] !== true) {
    throw new UsageError('--insecure only applies with --dashboard-open');
  }
  const client = new AwaClient({
    ...connectionOptions(values, ctx.env),
    ...readOptions(values, ctx.env),
    schema: values.schema as string | undefined,
    poolSize: 4,
    // Each audit record (a dashboard action or login) is also one line of the server's log.
    onAudit: (record) => ctx.err(auditLine(record)),
  });
  let server;
  const host = values.host as string | undefined;
  const parts: { callbacks?: Hono; dashboard?: Hono } = {};
  try {
    if (secrets.length > 0) {
      parts.callbacks = createCallbackReceiver({
        client,
        secrets,
        toleranceSeconds: values['tolerance-seconds'] as number | undefined,
        maxBodyBytes: values['max-body-bytes'] as number | undefined,
      });
    }
    if (dashboardWanted) parts.dashboard = dashboardPart(client, values, host, env);
    // Connect and check the schema first: a server whose every read fails is worse than one that does not start.
    await client.assertMigrated();
    server = await listen(createHttpApp(parts), { port: values.port as number | undefined, host });
  } catch (err) {
    await client.close();
    throw err;
  }
  // The stop handlers go in before the server says where it listens: a supervisor (or a test) that stops it as
  // soon as it has read that line must get a clean stop, not the default death by signal.
  const listening = server;
  const stopped = new Promise<void>((done) => {
    const stop = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      ctx.err('[awa] stopping: finishing requests in flight…');
      listening
        .close()
        .then(() => client.close())
        .then(done, done);
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
  const served = [
    parts.callbacks ? `POST ${server.url}/callbacks` : '',
    parts.dashboard ? `dashboard ${server.url}/dashboard` : '',
  ].filter(Boolean);
  ctx.err(`[awa] serving on ${server.url}: ${served.join(', ')}; Ctrl-C to stop`);
  if (parts.dashboard && values['secure-cookie'] !== true && !isLoopback(host ?? '127.0.0.1')) {
    ctx.err(`[awa] warning: the dashboard is served on ${host}: ${PLAIN_HTTP_WARNING}`);
  }
  // For scripts and tests that listen on port 0: where it ended up, as one line of JSON.
  if (values.json === true) {
    const address = server.server.address() as AddressInfo;
    ctx.out(
      JSON.stringify({
        url: server.url,
        host: address.address,
        port: server.port,
        callbacks: parts.callbacks ? `${server.url}/callbacks` : null,
        dashboard: parts.dashboard ? `${server.url}/dashboard` : null,
      }),
    );
  }
  await stopped;
}

/** The dashboard from the flags, with credentials from the environment unless --dashboard-open. */
function dashboardPart(
  client: AwaClient,
  values: Record<string, unknown>,
  host: string | undefined,
  env: Readonly<Record<string, string | undefined>>,
): Hono {
  const user = values['dashboard-user'] as string | undefined;
  const open = values['dashboard-open'] === true;
  if (open && user !== undefined)
    throw new UsageError('--dashboard-open and --dashboard-user exclude each other');
  const password = env.AWA_DASHBOARD_PASSWORD;
  if (user !== undefined && !password) {
    throw new UsageError(`--dashboard-user ${user} needs its password in AWA_DASHBOARD_PASSWORD`);
  }
  return createDashboard({
    client,
    host,
    auth: open ? false : user !== undefined ? { username: user, password: password! } : undefined,
    insecure: values.insecure === true,
    env,
    allowedOrigins: values['allowed-origin'] as string[] | undefined,
    secureCookie: values['secure-cookie'] === true,
    trustedProxies: values['trusted-proxy'] as string[] | undefined,
  });
}
