// The storage layer's surface: the only code that speaks queue SQL. One module per operation.
export * from './schema.js';
export * from './database.js';
export * from './migrations.js';
export * from './enqueue.js';
export * from './copy-enqueue.js';
export * from './claim.js';
export * from './finish.js';
export * from './promote.js';
export * from './ring.js';
export * from './leader-lock.js';
export * from './listen.js';
export * from './admin.js';
