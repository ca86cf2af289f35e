import { listen, type ListenOptions, type RunningServer } from '../server.js';
import { DashboardConfigError } from '../../model/errors.js';
import { createDashboard } from './app.js';
import type { DashboardOptions } from './config.js';

export interface StartDashboardOptions extends Omit<DashboardOptions, 'host'>, ListenOptions {}

/** The dashboard on its own server at <url><basePath> (default /dashboard). The bound host is the one the
 * open-mode check judges, so the two cannot disagree. */
export function startDashboard(options: StartDashboardOptions): Promise<RunningServer> {
  if (typeof options !== 'object' || options === null) {
    throw new DashboardConfigError('options', 'must be an object');
  }
  const { port, host, ...dashboard } = options;
  return listen(createDashboard({ ...dashboard, host }), { port, host });
}
