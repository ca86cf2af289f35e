// Awa for Node.js — public API.
export {
  AwaError,
  InvalidArgsError,
  InvalidOptionError,
  PayloadTooLargeError,
  PayloadNotSerialisableError,
  UnknownKindError,
  ConnectionError,
  DatabaseReadOnlyError,
  DatabaseUnresponsiveError,
  EventLoopBlockedError,
  SchemaNotMigratedError,
  SchemaTooNewError,
  DatabaseError,
  TransactionRequiredError,
  ClientClosedError,
  DashboardConfigError,
  InvalidRequestError,
  UnknownQueueError,
  QueueInUseError,
  PollingFallbackWarning,
  JobNotFoundError,
  JobNotCompletedError,
  ResultTimeoutError,
  type JobLastError,
  type AwaErrorCode,
} from './model/errors.js';
export { MAX_RESULT_BYTES } from './model/payload.js';
export {
  DuplicateStepError,
  InvalidStepError,
  MAX_STEPS_PER_JOB,
  StepLimitError,
  StepsNeedInlineError,
} from './model/steps.js';
export type { ResultOptions } from './operator/result-wait.js';
export {
  RetryAfter,
  Snooze,
  CancelJob,
  FailJob,
  WaitForCallback,
  WaitForChildren,
  ExternalFailure,
  CallbackTimeout,
} from './model/outcomes.js';
export {
  defineJob,
  MAX_ENQUEUE_SHARDS,
  type JobKind,
  type JobKindOptions,
  type ArgsOf,
  type ResultOf,
  type Execution,
} from './model/job-kind.js';
export type { Job, JobContext, JobHandler, JobState, AttemptError, ChildJobInput } from './model/job.js';
export type { JobOptions } from './model/enqueue-options.js';
export { defineCron, type CronOptions, type CronJobOptions, type CronDefinition } from './model/cron.js';
export type { MissedFire } from './model/cron-schedule.js';
export type { UniqueOptions } from './model/unique.js';
export type { QueueLimits, RateLimit, LimitsOverride } from './model/limits.js';
export type { Description } from './model/descriptor.js';
export type { Priority } from './model/validation.js';
export type { Actor, ActorOptions, AuditAction, AuditFilter, AuditRecord } from './model/audit.js';
export type {
  QueueCounts,
  QueueRemoval,
  JobRecord,
  RetryOutcome,
  JobProgress,
  RecordedStep,
  MigrateResult,
  MigrationPlan,
  PendingMigration,
  RollingSafety,
  RunningHost,
  PruneResult,
  PruneOutcome,
  RingSlot,
  Settlement,
  RescuedAttempt,
  DlqEntry,
  DlqSummary,
  DlqCount,
  JobClaim,
  CancelledFrom,
  EnqueueResult,
  CallbackAction,
  QueueHealth,
  ReadLag,
  FlowRecord,
  FlowSummary,
  FlowJob,
  FlowJobDependency,
  QueueLimitsState,
  LimitKeyState,
  JobListFilter,
  JobSummary,
  RuntimeInstance,
  Descriptor,
  StorageFamily,
  CallbackDelivery,
  CronFireOutcome,
  Pooler,
} from './storage/index.js';
export {
  SIGNATURE_HEADER,
  signatureHeader,
  verifySignature,
  DEFAULT_TOLERANCE_SECONDS,
} from './model/signature.js';
export * from './roles.js';
export * from './http/index.js';
