export * from './errors.js';
export * from './outcomes.js';
export * from './backoff.js';
export * from './job.js';
export * from './job-kind.js';
export * from './enqueue-options.js';
export * from './payload.js';
export * from './validation.js';
