export {
  AwaClient,
  type ClientOptions,
  type EnqueueOptions,
  type CopyEnqueueOptions,
  type QueueSettingOptions,
} from './client.js';
export type { JobInput, CopyEnqueueResult } from './copy-load.js';
export { WorkerHost, DeadlineExceeded } from './worker-host.js';
export type { HostEvents } from './host-events.js';
export type { CronSchedule, CronTriggerResult, CronFire } from './cron.js';
export { defineHandler, type HandlerEntry } from './registry.js';
export { httpTarget, HttpTargetError, type HttpTargetOptions } from './http-target.js';
export type { WorkerOptions, QueueOptions, ThreadPoolOptions } from './config.js';
export {
  PoolExecutor,
  PoolThreadError,
  type PoolExecutorOptions,
  type PoolJobContext,
} from './pool-executor.js';
export { migrate, type MigrateOptions } from './migrate.js';
