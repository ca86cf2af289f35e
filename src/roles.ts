// The roles' public surface: the client (producer and operator), the worker host, migrate. src/index.ts
// re-exports it; src/http and src/cli import the roles through it.
export {
  AwaClient,
  type ClientOptions,
  type QueueSettingOptions,
  type FlowEnqueueResult,
} from './operator/client.js';
export {
  MAX_FLOW_JOBS,
  type FlowInput,
  type FlowJobInput,
  type FlowDependency,
  type OnDependencyFailure,
  type DependencyOutcome,
} from './model/flow.js';
export type { EnqueueOptions, CopyEnqueueOptions } from './producer/producer.js';
export type { JobInput, CopyEnqueueResult } from './producer/copy-load.js';
export { WorkerHost } from './host/worker-host.js';
export { DeadlineExceeded } from './host/attempt-runner.js';
export type { HostEvents } from './host/events.js';
export type { CronSchedule, CronTriggerResult } from './operator/cron.js';
export type { CronFire } from './maintenance/cron.js';
export { defineHandler, type HandlerEntry, type AnyHandlerEntry } from './model/handler.js';
export { httpTarget, HttpTargetError, type HttpTargetOptions } from './host/http-target.js';
export type { WorkerOptions, QueueOptions } from './host/config.js';
export type { ThreadPoolOptions } from './threads/config.js';
export {
  PoolExecutor,
  PoolThreadError,
  type PoolExecutorOptions,
  type PoolJobContext,
} from './threads/pool-executor.js';
export { migrate, type MigrateOptions } from './operator/migrate.js';
