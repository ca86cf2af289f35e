import type * as admin from './admin.js';
import type * as audit from './audit.js';
import type * as callbacks from './callbacks.js';
import type * as cancel from './cancel.js';
import type * as claim from './claim.js';
import type * as cleanup from './cleanup.js';
import type * as copy from './copy-enqueue.js';
import type * as cron from './cron.js';
import type { Queryable } from './database.js';
import type * as dlq from './dlq.js';
import type * as enqueue from './enqueue.js';
import type * as flows from './flows.js';
import type * as settle from './settle.js';
import type * as instances from './instances.js';
import type * as jobProgress from './job-progress.js';
import type * as lanes from './lanes.js';
import type * as leader from './leader-lock.js';
import type * as listen from './listen.js';
import type * as progress from './progress.js';
import type * as promote from './promote.js';
import type * as queues from './queues.js';
import type * as limits from './limits.js';
import type * as rescue from './rescue.js';
import type * as resultWaits from './result-waits.js';
import type * as ring from './ring.js';
import type * as steps from './steps.js';
import type { Schema } from './schema.js';

// The storage contract: what each role may ask of storage, one interface per role, built once for a schema
// (ringStorage()). Every operation takes the connection it runs on first (the pool, the caller's transaction,
// or a role's own session), then its arguments. An operation is named as its SQL function is (camelCase);
// docs/storage-contract.md states what each guarantees and which tests hold it to that. A storage variant is
// any object that implements Storage and passes test/conformance.

/** An implementation `(db, schema, ...args)` as a role sees it: `(db, ...args)`, the schema bound. */
export type Op<F> = F extends (db: infer D, schema: Schema, ...args: infer A) => infer R
  ? (db: D, ...args: A) => R
  : never;

/** Producers: lanes, single and batched enqueue, COPY. */
export interface ProducerStore {
  ensureLanes: Op<typeof lanes.ensureLanes>;
  enqueue: Op<typeof enqueue.enqueueRows>;
  copyEnqueue: Op<typeof copy.copyEnqueueChunk>;
  /** A flow's jobs and their dependencies, in one statement. */
  enqueueFlow: Op<typeof flows.enqueueFlow>;
}

/** The worker host's claims: take a batch, hear wake-ups. */
export interface ClaimerStore {
  claim: Op<typeof claim.claimJobs>;
  listen: Op<typeof listen.listenForJobs>;
}

/** The end of an attempt and what it writes while it runs. Every write is fenced by (job id, run lease). */
export interface SettlerStore {
  settleAttempts: Op<typeof settle.settleAttempts>;
  setProgress: Op<typeof progress.writeProgress>;
  registerCallback: Op<typeof callbacks.registerCallback>;
  callbackResult: Op<typeof callbacks.callbackResult>;
  /** Durable steps: the job's recorded steps, and a step recorded through the attempt's fence. */
  recordedSteps: Op<typeof steps.recordedSteps>;
  recordStep: Op<typeof steps.recordStep>;
  recordSteps: Op<typeof steps.recordSteps>;
  /** The jobs this job depends on, how each ended and its result (ctx.dependencies()). */
  dependenciesOf: Op<typeof flows.dependenciesOf>;
  /** A running job's children, enqueued once per job under a step of its own, fenced by its attempt. */
  spawnChildren: Op<typeof flows.spawnChildren>;
}

/** A host's presence: registration, heartbeat, descriptors, stop, the cron schedules it declares, and the
 * hand-back of its receipts it no longer knows (a claim whose answer was lost). */
export interface InstanceStore {
  releaseUnknownReceipts: Op<typeof rescue.releaseUnknownReceipts>;
  registerInstance: Op<typeof instances.registerInstance>;
  heartbeat: Op<typeof instances.heartbeat>;
  reportDescriptors: Op<typeof instances.reportDescriptors>;
  markStopped: Op<typeof instances.markStopped>;
  cronSync: Op<typeof cron.syncCron>;
}

/** The elected leader's work, on its own session. */
export interface MaintenanceStore {
  standForLeader: Op<typeof leader.standForLeader>;
  releaseLeadership: Op<typeof leader.releaseLeadership>;
  promoteDue: Op<typeof promote.promoteDue>;
  resolveExternalDependencies: Op<typeof flows.resolveExternalDependencies>;
  rotate: Op<typeof ring.rotateRing>;
  prune: Op<typeof ring.pruneRing>;
  tallySlots: Op<typeof ring.tallySlots>;
  rescue: Op<typeof rescue.rescueAbandoned>;
  expireCallbacks: Op<typeof callbacks.expireCallbacks>;
  nextCallbackTimeoutMs: Op<typeof callbacks.nextCallbackTimeoutMs>;
  cleanup: Op<typeof cleanup.cleanupHistory>;
  pruneSteps: Op<typeof steps.pruneSteps>;
  pruneFlows: Op<typeof flows.pruneFlows>;
  auditPrune: Op<typeof audit.pruneAudit>;
  cronPending: Op<typeof cron.pendingCron>;
  cronFire: Op<typeof cron.fireCron>;
}

/** What operators read. None of these writes. */
export interface OperatorReads {
  queueCounts: Op<typeof admin.queueCounts>;
  queueHealth: Op<typeof admin.queueHealth>;
  listJobs: Op<typeof admin.listJobs>;
  jobState: Op<typeof admin.findJob>;
  jobProgress: Op<typeof jobProgress.jobProgress>;
  jobSteps: Op<typeof steps.recordedSteps>;
  compactHistorySpan: Op<typeof admin.compactHistorySpan>;
  ringStatus: Op<typeof ring.ringStatus>;
  storageStatus: Op<typeof admin.storageStatus>;
  runtimeList: Op<typeof admin.runtimeList>;
  descriptors: Op<typeof admin.listDescriptors>;
  dlqList: Op<typeof dlq.listDlq>;
  dlqPage: Op<typeof dlq.dlqPage>;
  dlqCount: Op<typeof dlq.countDlq>;
  auditPage: Op<typeof audit.auditPage>;
  cronList: Op<typeof cron.listCron>;
  flowState: Op<typeof flows.flowState>;
  flowList: Op<typeof flows.listFlows>;
  queueLimits: Op<typeof limits.queueLimits>;
}

/** What operators (and external callbacks) change. Each writes its audit record in the same transaction. */
export interface OperatorActions {
  cancelJob: Op<typeof cancel.cancelJob>;
  retryJob: Op<typeof admin.retryJob>;
  dlqRetry: Op<typeof dlq.retryDlq>;
  dlqPurge: Op<typeof dlq.purgeDlq>;
  setQueuePaused: Op<typeof queues.setQueuePaused>;
  setEnqueueShards: Op<typeof queues.setEnqueueShards>;
  removeQueue: Op<typeof queues.removeQueue>;
  resolveCallback: Op<typeof callbacks.resolveCallback>;
  cronTrigger: Op<typeof cron.triggerCron>;
  cronSetPaused: Op<typeof cron.setCronPaused>;
  cronRemove: Op<typeof cron.removeCron>;
  auditInsert: Op<typeof audit.insertAudit>;
  cancelFlow: Op<typeof flows.cancelFlow>;
  setLimitsOverride: Op<typeof limits.setLimitsOverride>;
}

/** A producer's waits for jobs to end (AwaClient.result()): LISTEN on the waiting client's own session, its
 * waiter rows, and the job's outcome read after each notification. */
export interface ResultWaitStore {
  listen: Op<typeof listen.listenForResults>;
  resultWaitBegin: Op<typeof resultWaits.resultWaitBegin>;
  resultWaitEnd: Op<typeof resultWaits.resultWaitEnd>;
  jobOutcome: Op<typeof resultWaits.jobOutcome>;
}

/** Every role's interface, for one schema. */
export interface Storage {
  readonly schema: Schema;
  readonly producer: ProducerStore;
  readonly claimer: ClaimerStore;
  readonly settler: SettlerStore;
  readonly instances: InstanceStore;
  readonly maintenance: MaintenanceStore;
  readonly reads: OperatorReads;
  readonly actions: OperatorActions;
  readonly results: ResultWaitStore;
}

export type { Queryable };
