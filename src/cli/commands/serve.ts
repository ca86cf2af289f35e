import { createCallbackReceiver, createHttpApp, listen } from '../../http/index.js';
import { parseSecretList } from '../../model/signature.js';
import { AwaClient } from '../../runtime/index.js';
import { parseArgs, UsageError, type OptionSpec } from '../args.js';
import { databaseUrl, DB_OPTIONS } from '../database-url.js';
import type { CliContext } from '../io.js';

// awa serve: Awa's HTTP server. Today it carries the signed callback receiver at POST /callbacks; the root
// app is assembled from parts (createHttpApp) so other surfaces can be mounted beside it.

export const serveOptions: Record<string, OptionSpec> = {
  ...DB_OPTIONS,
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
};

/** Serves until SIGINT/SIGTERM, then stops accepting, lets requests finish and closes. */
export async function serveCommand(argv: string[], ctx: CliContext): Promise<void> {
  const { positionals, values } = parseArgs(argv, serveOptions);
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  const given = (values['callback-secret'] as string[] | undefined) ?? [];
  const secrets = given.length > 0 ? given : parseSecretList(ctx.env.AWA_CALLBACK_SECRET ?? '');
  if (secrets.length === 0) {
    throw new UsageError(
      'no callback secret: set AWA_CALLBACK_SECRET (several separated by commas while rotating) or pass --callback-secret',
    );
  }
  const url = databaseUrl(values, ctx.env);
  const client = new AwaClient({
    connectionString: url,
    schema: values.schema as string | undefined,
    poolSize: 4,
  });
  let server;
  try {
    const callbacks = createCallbackReceiver({
      client,
      secrets,
      toleranceSeconds: values['tolerance-seconds'] as number | undefined,
      maxBodyBytes: values['max-body-bytes'] as number | undefined,
    });
    server = await listen(createHttpApp({ callbacks }), {
      port: values.port as number | undefined,
      host: values.host as string | undefined,
    });
  } catch (err) {
    await client.close();
    throw err;
  }
  ctx.err(`[awa] serving on ${server.url}: POST ${server.url}/callbacks; Ctrl-C to stop`);
  await new Promise<void>((done) => {
    const stop = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      ctx.err('[awa] stopping: finishing requests in flight…');
      server
        .close()
        .then(() => client.close())
        .then(done, done);
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
}
