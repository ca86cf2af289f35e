import type { Attributes } from '@opentelemetry/api';

// Attribute sets for per-job records, built once per combination (queue, kind, outcome…) and reused: a job
// costs three map look-ups instead of a fresh object, and the combinations are few by design (no ids).

export class AttributeCache {
  private readonly root = new Map<string, Map<string, Map<string, Attributes>>>();

  constructor(private readonly build: (a: string, b: string, c: string) => Attributes) {}

  get(a: string, b = '', c = ''): Attributes {
    let level1 = this.root.get(a);
    if (!level1) this.root.set(a, (level1 = new Map()));
    let level2 = level1.get(b);
    if (!level2) level1.set(b, (level2 = new Map()));
    let attrs = level2.get(c);
    if (!attrs) level2.set(c, (attrs = Object.freeze(this.build(a, b, c))));
    return attrs;
  }
}
