import {
  findJob,
  listDescriptors,
  queueCounts,
  queueHealth,
  listJobs,
  compactHistorySpan,
  retryJob,
  runtimeList,
  storageStatus,
} from './admin.js';
import { auditPage, insertAudit, pruneAudit } from './audit.js';
import {
  callbackResult,
  expireCallbacks,
  nextCallbackTimeoutMs,
  registerCallback,
  resolveCallback,
} from './callbacks.js';
import { cancelJob } from './cancel.js';
import { claimJobs } from './claim.js';
import { cleanupHistory } from './cleanup.js';
import type { Op, Storage } from './contract.js';
import { copyEnqueueChunk } from './copy-enqueue.js';
import { fireCron, listCron, pendingCron, removeCron, setCronPaused, syncCron, triggerCron } from './cron.js';
import { countDlq, dlqPage, listDlq, purgeDlq, retryDlq } from './dlq.js';
import { enqueueRows } from './enqueue.js';
import {
  cancelFlow,
  dependenciesOf,
  enqueueFlow,
  flowState,
  listFlows,
  pruneFlows,
  resolveExternalDependencies,
  spawnChildren,
} from './flows.js';
import { settleAttempts } from './settle.js';
import { heartbeat, markStopped, registerInstance, reportDescriptors } from './instances.js';
import { jobProgress } from './job-progress.js';
import { ensureLanes } from './lanes.js';
import { releaseLeadership, standForLeader } from './leader-lock.js';
import { listenForJobs, listenForResults } from './listen.js';
import { writeProgress } from './progress.js';
import { promoteDue } from './promote.js';
import { setEnqueueShards, setQueuePaused, removeQueue } from './queues.js';
import { queueLimits, setLimitsOverride } from './limits.js';
import { releaseUnknownReceipts, rescueAbandoned } from './rescue.js';
import { jobOutcome, resultWaitBegin, resultWaitEnd } from './result-waits.js';
import { pruneRing, ringStatus, rotateRing, tallySlots } from './ring.js';
import { pruneSteps, recordedSteps, recordStep, recordSteps } from './steps.js';
import { namedStatements, type Pooler } from './pooler.js';
import type { Schema } from './schema.js';

// The storage Awa ships: the ring engine of sql/ (ready entries and receipts in a ring of slots, DESIGN.md),
// every contract operation bound to one schema.

export interface StorageOptions {
  /** What the connections its operations get lead through (pooler.ts): 'transaction' sends no named
   * statements (enqueue, claim, settle name theirs otherwise). Default 'none'. */
  pooler?: Pooler;
}

export function ringStorage(schema: Schema, options: StorageOptions = {}): Storage {
  const op = <D, A extends unknown[], R>(fn: (db: D, schema: Schema, ...args: A) => R): Op<typeof fn> =>
    ((db: D, ...args: A) => fn(db, schema, ...args)) as Op<typeof fn>;
  const named = namedStatements(options.pooler ?? 'none');
  return {
    schema,
    producer: {
      ensureLanes: op(ensureLanes),
      enqueue: (db, rows) => enqueueRows(db, schema, rows, named),
      copyEnqueue: (client, rows) => copyEnqueueChunk(client, schema, rows, named),
      enqueueFlow: op(enqueueFlow),
    },
    claimer: {
      claim: (db, req) => claimJobs(db, schema, req, named),
      listen: op(listenForJobs),
    },
    settler: {
      settleAttempts: (db, items) => settleAttempts(db, schema, items, named),
      setProgress: op(writeProgress),
      registerCallback: op(registerCallback),
      callbackResult: op(callbackResult),
      recordedSteps: op(recordedSteps),
      recordStep: op(recordStep),
      recordSteps: op(recordSteps),
      dependenciesOf: op(dependenciesOf),
      spawnChildren: op(spawnChildren),
    },
    instances: {
      releaseUnknownReceipts: op(releaseUnknownReceipts),
      registerInstance: op(registerInstance),
      heartbeat: op(heartbeat),
      reportDescriptors: op(reportDescriptors),
      markStopped: op(markStopped),
      cronSync: op(syncCron),
    },
    maintenance: {
      standForLeader: op(standForLeader),
      releaseLeadership: op(releaseLeadership),
      promoteDue: op(promoteDue),
      resolveExternalDependencies: op(resolveExternalDependencies),
      rotate: op(rotateRing),
      prune: op(pruneRing),
      tallySlots: op(tallySlots),
      rescue: op(rescueAbandoned),
      expireCallbacks: op(expireCallbacks),
      nextCallbackTimeoutMs: op(nextCallbackTimeoutMs),
      cleanup: op(cleanupHistory),
      pruneSteps: op(pruneSteps),
      pruneFlows: op(pruneFlows),
      auditPrune: op(pruneAudit),
      cronPending: op(pendingCron),
      cronFire: op(fireCron),
    },
    reads: {
      queueCounts: op(queueCounts),
      queueHealth: op(queueHealth),
      listJobs: op(listJobs),
      jobState: op(findJob),
      jobProgress: op(jobProgress),
      jobSteps: op(recordedSteps),
      compactHistorySpan: op(compactHistorySpan),
      ringStatus: op(ringStatus),
      storageStatus: op(storageStatus),
      runtimeList: op(runtimeList),
      descriptors: op(listDescriptors),
      dlqList: op(listDlq),
      dlqPage: op(dlqPage),
      dlqCount: op(countDlq),
      auditPage: op(auditPage),
      cronList: op(listCron),
      flowState: op(flowState),
      flowList: op(listFlows),
      queueLimits: op(queueLimits),
    },
    actions: {
      cancelJob: op(cancelJob),
      retryJob: op(retryJob),
      dlqRetry: op(retryDlq),
      dlqPurge: op(purgeDlq),
      setQueuePaused: op(setQueuePaused),
      setEnqueueShards: op(setEnqueueShards),
      removeQueue: op(removeQueue),
      resolveCallback: op(resolveCallback),
      cronTrigger: op(triggerCron),
      cronSetPaused: op(setCronPaused),
      cronRemove: op(removeCron),
      auditInsert: op(insertAudit),
      cancelFlow: op(cancelFlow),
      setLimitsOverride: op(setLimitsOverride),
    },
    results: {
      listen: op(listenForResults),
      resultWaitBegin: op(resultWaitBegin),
      resultWaitEnd: op(resultWaitEnd),
      jobOutcome: op(jobOutcome),
    },
  };
}
