import { descriptorHash } from '../model/descriptor.js';
import type { DescriptorReport } from '../storage/index.js';
import type { ResolvedQueue } from './config.js';
import type { HandlerEntry } from '../model/handler.js';

// What a worker host declares about the queues it serves and the kinds it runs: each as its descriptor and
// the descriptor's hash, which the admin reads compare across live hosts (drift).

export function hostDescriptors(
  queues: ReadonlyMap<string, ResolvedQueue>,
  handlers: readonly HandlerEntry[],
): DescriptorReport[] {
  const queueReports = [...queues].map(([queue, q]) => {
    const descriptor = {
      ...q.description,
      concurrency: q.concurrency,
      dlq: q.dlq,
      deadlineMs: q.deadlineMs,
    };
    return { subject: 'queue' as const, name: queue, hash: descriptorHash(descriptor), descriptor };
  });
  const kindReports = handlers.map(({ kind }) => {
    const descriptor = {
      ...kind.description,
      queue: kind.queue,
      priority: kind.priority,
      maxAttempts: kind.maxAttempts,
      execution: kind.execution,
      deadlineMs: kind.deadlineMs,
    };
    return { subject: 'kind' as const, name: kind.kind, hash: descriptorHash(descriptor), descriptor };
  });
  return [...queueReports, ...kindReports];
}
