// Awa's HTTP surfaces (a layer above the roles: cli → http → roles). Only the CLI and src/index.ts import it.
export {
  createCallbackReceiver,
  DEFAULT_MAX_CALLBACK_BODY_BYTES,
  type CallbackClient,
  type CallbackReceiverOptions,
} from './callback-receiver.js';
export {
  createHttpApp,
  listen,
  serveCallbacks,
  type HttpAppParts,
  type ListenOptions,
  type RunningServer,
  type ServeCallbacksOptions,
} from './server.js';
export {
  createDashboard,
  startDashboard,
  isLoopback,
  CSRF_HEADER,
  SESSION_COOKIE,
  type DashboardAuth,
  type DashboardClient,
  type DashboardOptions,
  type JobPage,
  type StartDashboardOptions,
} from './dashboard/index.js';
