// Every storage operation by its implementation's name, beside the surface of index.ts: for the tests, the
// reference model and the micro-benchmarks that exercise the engine directly. The roles in src/ use the
// contract (index.ts) instead; ESLint holds them to it.
export * from './index.js';
export * from './enqueue.js';
export * from './copy-enqueue.js';
export * from './claim.js';
export * from './settle.js';
export * from './promote.js';
export * from './ring.js';
export * from './leader-lock.js';
export * from './listen.js';
export * from './admin.js';
export * from './instances.js';
export * from './rescue.js';
export * from './cancel.js';
export * from './progress.js';
export * from './dlq.js';
export * from './cleanup.js';
export * from './lanes.js';
export * from './queues.js';
export * from './callbacks.js';
export * from './cron.js';
export * from './job-progress.js';
export * from './audit.js';
export * from './flows.js';
export * from './result-waits.js';
export * from './steps.js';
