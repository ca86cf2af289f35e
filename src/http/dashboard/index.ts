// The operator dashboard: a JSON admin API and a single page over it (docs/dashboard.md).
export { createDashboard } from './app.js';
export { startDashboard, type StartDashboardOptions } from './start.js';
export { isLoopback, type DashboardAuth, type DashboardClient, type DashboardOptions } from './config.js';
export { CSRF_HEADER, SESSION_COOKIE } from './auth.js';
export type { JobPage } from './api.js';
