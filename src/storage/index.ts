// The storage layer's surface for the roles: the contract (one interface per role, contract.ts) and the
// engine that implements it (ringStorage), the pools and connections they run on, migrations, and the types of
// every operation. The operations themselves are reached only through the contract; storage/operations.ts
// exports them one by one for the tests that exercise them directly.
export * from './schema.js';
export * from './database.js';
export * from './client-pool.js';
export * from './dedicated.js';
export * from './pooler.js';
export * from './migrations.js';
export * from './migration-plan.js';
export * from './contract.js';
export * from './ring-storage.js';
export { pingSession } from './listen.js';
export { primaryWalPosition, readServerLag, replayedUpTo, type ReadLag } from './replica.js';
export { boundLockWaits } from './leader-lock.js';
export { cancelChannel, parseAttemptPayload } from './cancel.js';
export { callbackChannel } from './callbacks.js';
export { appendsToLane } from './enqueue.js';
export type * from './enqueue.js';
export type * from './copy-enqueue.js';
export type * from './claim.js';
export type * from './settle.js';
export type * from './promote.js';
export type * from './ring.js';
export type * from './leader-lock.js';
export type * from './listen.js';
export type * from './admin.js';
export type * from './instances.js';
export type * from './rescue.js';
export type * from './cancel.js';
export type * from './progress.js';
export type * from './dlq.js';
export type * from './cleanup.js';
export type * from './lanes.js';
export type * from './queues.js';
export type * from './limits.js';
export type * from './callbacks.js';
export type * from './cron.js';
export type * from './job-progress.js';
export type * from './audit.js';
export type * from './flows.js';
export type * from './result-waits.js';
export type * from './steps.js';
