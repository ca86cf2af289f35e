export { AwaClient, type ClientOptions, type EnqueueOptions, type JobInput, type CopyEnqueueOptions } from './client.js';
export { WorkerHost, DeadlineExceeded, type HostEvents } from './worker-host.js';
export { defineHandler, type HandlerEntry } from './registry.js';
export type { WorkerOptions, QueueOptions } from './config.js';
export { migrate, type MigrateOptions } from './migrate.js';
