// The Awa dashboard page: a hash-routed single page over the JSON API. Every value from the server reaches
// the DOM as a text node or a checked attribute (see el()); nothing is parsed as HTML. Actions send the
// session's CSRF token in a header that a cross-site form cannot set.

const base = meta('awa-base');
const csrf = meta('awa-csrf');
const main = document.getElementById('main');
const notice = document.getElementById('notice');
const POLL_MS = 2000;
const HISTORY = 60;

/** Per queue: the last samples of depth (available) and completions per minute, kept across pages. */
const history = new Map();
/** Bumped on every navigation, so a poll or fetch of a page left behind drops its result. */
let generation = 0;

function meta(name) {
  const node = document.querySelector(`meta[name="${name}"]`);
  return node ? node.getAttribute('content') || '' : '';
}

/** Builds an element: attrs are set as attributes (href only to this page's routes), children as nodes or
 * text. The one way this script creates DOM. */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'href' && !String(value).startsWith('#/')) throw new Error(`refusing link ${value}`);
    if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

function replace(node, ...children) {
  node.replaceChildren();
  append(node, children);
}

function say(message, isError = false) {
  notice.textContent = message;
  notice.className = isError ? 'error' : '';
}

async function request(path, init = {}) {
  const response = await fetch(`${base}/api${path}`, { credentials: 'same-origin', ...init });
  if (response.status === 401) {
    window.location.assign(`${base}/login`);
    throw new Error('logged out');
  }
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const err = new Error(body.message || body.error || `HTTP ${response.status}`);
    // The parameter or option a 400 names, so a form can mark its input.
    err.field = body.field;
    throw err;
  }
  return body;
}

const get = (path) => request(path);
const post = (path, body = {}) =>
  request(path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-awa-csrf': csrf },
    body: JSON.stringify(body),
  });

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : '';
}

function fmtTime(value) {
  if (!value) return '—';
  const d = new Date(value);
  return Number.isNaN(d.getTime()) ? String(value) : d.toLocaleString();
}

function fmtAge(value) {
  if (!value) return '—';
  const s = Math.max(0, (Date.now() - new Date(value).getTime()) / 1000);
  if (s < 90) return `${s.toFixed(0)} s`;
  if (s < 5400) return `${(s / 60).toFixed(0)} min`;
  if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} d`;
}

function fmtBytes(n) {
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(0)} KiB`;
  if (n < 1024 ** 3) return `${(n / 1024 / 1024).toFixed(1)} MiB`;
  return `${(n / 1024 ** 3).toFixed(2)} GiB`;
}

/** A name (queue, kind, host) cut with an ellipsis past a width; the full name shows on hover. */
function clip(text) {
  return el('span', { class: 'clip', title: text }, text);
}

function badge(text, kind = text) {
  return el('span', { class: `badge ${kind}` }, text);
}

/** A table inside its own scroll box: one too wide for the window scrolls there, never the page. */
function table(headers, rows, attrs = {}) {
  const wrap = el('div', { class: 'table-wrap' });
  wrap.append(bareTable(headers, rows, attrs));
  return wrap;
}

function bareTable(headers, rows, attrs) {
  return el(
    'table',
    attrs,
    el(
      'thead',
      {},
      el(
        'tr',
        {},
        headers.map((h) => el('th', { class: h.num ? 'num' : undefined }, h.label ?? h)),
      ),
    ),
    el('tbody', {}, rows),
  );
}

function num(value) {
  return el('td', { class: 'num' }, Number(value).toLocaleString());
}

/** An inline SVG sparkline of the samples (built with DOM calls: no markup is parsed). */
function sparkline(values, kind) {
  const ns = 'http://www.w3.org/2000/svg';
  const w = 90;
  const h = 26;
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('class', `spark ${kind}`);
  svg.setAttribute('width', String(w));
  svg.setAttribute('height', String(h));
  svg.setAttribute('viewBox', `0 0 ${w} ${h}`);
  const max = Math.max(1, ...values);
  // Samples are spread over the full width, so the chart reads from the first poll on.
  const step = values.length > 1 ? w / (values.length - 1) : 0;
  const points = values.map((v, i) => `${(i * step).toFixed(1)},${(h - 2 - (v / max) * (h - 4)).toFixed(1)}`);
  const line = document.createElementNS(ns, 'polyline');
  line.setAttribute('points', points.join(' '));
  svg.append(line);
  const title = document.createElementNS(ns, 'title');
  title.textContent = `last ${values.length} samples, max ${max}`;
  svg.append(title);
  return svg;
}

// ---- polling ----

/** The current page's next poll: its generation and the page function to run again. */
let pending = null;
let pollTimer = null;

/** Runs page function `fn` again in POLL_MS, for as long as the page is shown. A hidden tab asks the server
 * nothing: the poll waits and runs as soon as the tab is visible again. */
function poll(gen, fn) {
  pending = { gen, fn };
  window.clearTimeout(pollTimer);
  pollTimer = document.visibilityState === 'hidden' ? null : setTimeout(runPoll, POLL_MS);
}

function runPoll() {
  window.clearTimeout(pollTimer);
  pollTimer = null;
  const due = pending;
  pending = null;
  if (due && due.gen === generation) due.fn(due.gen).catch(showError);
}

document.addEventListener('visibilitychange', () => {
  if (document.visibilityState === 'hidden') {
    window.clearTimeout(pollTimer);
    pollTimer = null;
  } else if (pending) {
    runPoll();
  }
});

// ---- pages ----

async function queuesPage(gen) {
  const data = await get(`/queues${query({ windowMs: 60000, limits: 1 })}`);
  if (gen !== generation) return;
  const limitsOf = new Map(data.limits.map((l) => [l.queue, l]));
  for (const q of data.queues) {
    const h = history.get(q.queue) ?? { depth: [], rate: [] };
    h.depth.push(q.available);
    h.rate.push(q.completedRecent);
    if (h.depth.length > HISTORY) h.depth.shift();
    if (h.rate.length > HISTORY) h.rate.shift();
    history.set(q.queue, h);
  }
  const rows = data.queues.map((q) => {
    const h = history.get(q.queue);
    const toggle = q.paused
      ? el('button', { onclick: () => queueAction(q.queue, 'resume'), 'data-action': 'resume' }, 'Resume')
      : el('button', { onclick: () => queueAction(q.queue, 'pause'), 'data-action': 'pause' }, 'Pause');
    return el(
      'tr',
      { 'data-queue': q.queue },
      el(
        'td',
        {},
        el('a', { href: `#/jobs${query({ state: 'available', queue: q.queue })}` }, clip(q.queue)),
      ),
      el('td', { class: 'state' }, q.paused ? badge('paused') : badge('active', 'live')),
      num(q.available),
      num(q.running),
      num(q.waiting),
      num(q.scheduled),
      num(q.retryable),
      el('td', { class: 'num failed' }, Number(q.failed).toLocaleString()),
      el(
        'td',
        { class: 'num dlq' },
        q.dlq > 0
          ? el('a', { href: `#/dlq${query({ queue: q.queue })}` }, Number(q.dlq).toLocaleString())
          : '0',
      ),
      num(q.completedRecent),
      num(q.failedRecent),
      el('td', {}, fmtAge(q.oldestAvailableAt)),
      el('td', {}, sparkline(h.depth, 'depth')),
      el('td', {}, sparkline(h.rate, 'rate')),
      el('td', {}, q.inOldestSlot ? badge('in oldest slot', 'held') : ''),
      el('td', { class: 'num shards' }, String(q.enqueueShards)),
      el('td', { class: 'limits' }, limitsCell(q.queue, limitsOf.get(q.queue))),
      el('td', {}, toggle),
    );
  });
  replace(
    main,
    el('h2', {}, 'Queues'),
    el(
      'p',
      { class: 'muted' },
      `Refreshed every ${POLL_MS / 1000} s while the tab is shown; rates are per minute; failed and DLQ are ` +
        `totals held. ${fmtTime(data.at)}`,
    ),
    data.queues.length === 0
      ? el('p', {}, 'No queues yet.')
      : table(
          [
            'queue',
            'state',
            { label: 'available', num: true },
            { label: 'running', num: true },
            { label: 'waiting', num: true },
            { label: 'scheduled', num: true },
            { label: 'retryable', num: true },
            { label: 'failed', num: true },
            { label: 'DLQ', num: true },
            { label: 'done/min', num: true },
            { label: 'failed/min', num: true },
            'oldest',
            'depth',
            'throughput',
            'ring',
            { label: 'shards', num: true },
            'limits',
            '',
          ],
          rows,
          { id: 'queues' },
        ),
  );
  poll(gen, queuesPage);
}

async function queueAction(queue, action) {
  try {
    const r = await post(`/queues/${encodeURIComponent(queue)}/${action}`);
    say(
      r.changed
        ? `Queue ${queue} ${action === 'pause' ? 'paused' : 'resumed'}.`
        : `Queue ${queue} was already ${action === 'pause' ? 'paused' : 'running'}.`,
    );
    navigate();
  } catch (err) {
    showError(err);
  }
}

/** The queues list's limits cell: a link to the queue's page, a badge when it is limited (the limits in its
 * title) with the jobs waiting at its gate. */
function limitsCell(queue, state) {
  const href = `#/queue/${encodeURIComponent(queue)}`;
  if (!state || !state.effective) return el('a', { href, class: 'muted' }, 'none');
  return [
    el('a', { href, title: limitsLine(state.effective) }, badge('limited', 'held')),
    state.waiting > 0 ? ` ${Number(state.waiting).toLocaleString()} at gate` : null,
  ];
}

// ---- a queue's page: its health and its flow-control limits ----

/** The fields of the limits, in the order the page lists them; `form` marks those the form overrides. */
const LIMIT_FIELDS = [
  { name: 'key.arg', section: 'key', key: 'arg' },
  { name: 'perKey.concurrency', section: 'perKey', key: 'concurrency', form: 'count' },
  { name: 'perKey.rate', section: 'perKey', key: 'rate', form: 'rate' },
  { name: 'perKey.fifo', section: 'perKey', key: 'fifo' },
  { name: 'queue.concurrency', section: 'queue', key: 'concurrency', form: 'count' },
  { name: 'queue.rate', section: 'queue', key: 'rate', form: 'rate' },
];

/** A field's value in limits or an override: undefined when absent, null when an override removes it. */
function limitValue(limits, field) {
  const section = limits ? limits[field.section] : undefined;
  if (section === null) return null;
  return section ? section[field.key] : undefined;
}

function periodText(ms) {
  if (ms % 3600000 === 0) return `${ms / 3600000}h`;
  if (ms % 60000 === 0) return `${ms / 60000}m`;
  if (ms % 1000 === 0) return `${ms / 1000}s`;
  return `${ms}ms`;
}

/** A rate as `awa queue limits` prints it: `100/1s (burst 100)`. */
function rateText(r) {
  return `${r.limit}/${periodText(r.periodMs ?? 1000)} (burst ${r.burst ?? r.limit})`;
}

function limitText(value) {
  if (value === undefined || value === null) return '—';
  return typeof value === 'object' ? rateText(value) : String(value);
}

/** The limits in effect in a line, as the CLI says them: `per key (args.tenant): 3 running, 100/1s (burst 100);
 * queue: 50 running`. */
function limitsLine(limits) {
  if (!limits) return 'none';
  const parts = [];
  const p = limits.perKey;
  if (p) {
    const what = [
      p.concurrency !== undefined ? `${p.concurrency} running` : null,
      p.rate ? rateText(p.rate) : null,
      p.fifo ? 'strict FIFO' : null,
    ];
    parts.push(`per key${limits.key ? ` (args.${limits.key.arg})` : ''}: ${what.filter(Boolean).join(', ')}`);
  }
  const q = limits.queue;
  if (q) {
    const what = [
      q.concurrency !== undefined ? `${q.concurrency} running` : null,
      q.rate ? rateText(q.rate) : null,
    ];
    parts.push(`queue: ${what.filter(Boolean).join(', ')}`);
  }
  return parts.join('; ');
}

/** An override's value as the form's input shows it: `100/1s,burst=20`, `none` for a removed limit, empty for
 * no override (the declared value applies). */
function limitInput(value) {
  if (value === undefined) return '';
  if (value === null) return 'none';
  if (typeof value === 'object') return `${value.limit}/${periodText(value.periodMs)},burst=${value.burst}`;
  return String(value);
}

const PERIOD_MS = { ms: 1, s: 1000, m: 60000, h: 3600000 };

/** A form input's text as the override's value; undefined: no override. A count that is not digits is sent as
 * written, so the server's check names it; a rate must parse here. */
function parseLimitInput(field, text) {
  const raw = text.trim();
  if (raw === '') return undefined;
  if (raw === 'none') return null;
  if (field.form === 'count') return /^\d+$/.test(raw) ? Number(raw) : raw;
  const m = /^(\d+)\/(\d*)(ms|s|m|h)(?:,\s*burst=(\d+))?$/.exec(raw);
  if (!m) {
    const err = new Error(
      `${field.name}: write the rate as LIMIT/PERIOD (100/1s, 20/500ms, 1000/1m), optionally ,burst=N; or none`,
    );
    err.field = `limits.${field.name}`;
    throw err;
  }
  const limit = Number(m[1]);
  return {
    limit,
    periodMs: Number(m[2] || '1') * PERIOD_MS[m[3]],
    burst: m[4] === undefined ? limit : Number(m[4]),
  };
}

/** The override the form asks for: the current one with the form's fields replaced (key and FIFO kept). */
function overrideFromForm(form, current) {
  const next = JSON.parse(JSON.stringify(current ?? {}));
  for (const field of LIMIT_FIELDS.filter((f) => f.form)) {
    const value = parseLimitInput(field, form.elements[field.name].value);
    if (next[field.section] === null) next[field.section] = {};
    const section = (next[field.section] ??= {});
    if (value === undefined) delete section[field.key];
    else section[field.key] = value;
    if (Object.keys(section).length === 0) delete next[field.section];
  }
  return Object.keys(next).length === 0 ? null : next;
}

async function queuePage(gen, queue) {
  const health = el('p', { id: 'queue-health' });
  const summary = el('p', { id: 'limits-summary' });
  const now = el('p', { id: 'limits-now', class: 'muted' });
  const fields = el('div');
  const keys = el('div');
  const error = el('p', { id: 'limits-error', class: 'error', role: 'alert' });
  // The latest override read, which the form's changes are applied to.
  let override = null;
  const inputs = LIMIT_FIELDS.filter((f) => f.form).map((f) =>
    el(
      'label',
      {},
      f.name,
      el('input', {
        name: f.name,
        size: f.form === 'rate' ? 16 : 6,
        autocomplete: 'off',
        spellcheck: 'false',
      }),
    ),
  );
  const form = el(
    'form',
    { class: 'search limits-form', id: 'limits-form', 'data-action': 'limits', onsubmit: (e) => save(e) },
    inputs,
    el('button', { type: 'submit', class: 'primary' }, 'Save override'),
    el(
      'button',
      { type: 'button', id: 'limits-reset', onclick: () => send(null, 'reset') },
      'Reset to declared',
    ),
    el(
      'p',
      { class: 'muted limits-help' },
      'Override: a number, a rate such as 100/1s or 1000/1m,burst=50, "none" for no limit whatever the code ' +
        'declares, or empty to follow the declared value.',
    ),
  );
  replace(
    main,
    el('h2', {}, `Queue ${queue}`),
    health,
    el('h3', {}, 'Limits'),
    summary,
    now,
    fields,
    form,
    error,
    el('h3', {}, 'Busiest keys'),
    keys,
  );
  const fill = (state) => {
    for (const f of LIMIT_FIELDS.filter((x) => x.form)) {
      const input = form.elements[f.name];
      input.value = limitInput(limitValue(state?.override, f));
      const declared = limitValue(state?.declared, f);
      input.placeholder = declared === undefined ? 'none declared' : `${limitInput(declared)} declared`;
      input.removeAttribute('aria-invalid');
    }
  };
  async function send(next, what) {
    replace(error);
    try {
      const r = await post(`/queues/${encodeURIComponent(queue)}/limits`, { override: next });
      say(
        `Queue ${queue}: ${what === 'reset' ? 'override cleared; ' : ''}limits now: ${limitsLine(r.effective)}.`,
      );
      await load(generation, true);
    } catch (err) {
      refused(err);
    }
  }
  /** Shows why the form's values were refused under the form, marking the input of the field it names. */
  function refused(err) {
    const name = String(err.field ?? '').replace(/^limits\./, '');
    const field = LIMIT_FIELDS.find((f) => f.form && (name === f.name || name.startsWith(`${f.name}.`)));
    if (field) form.elements[field.name].setAttribute('aria-invalid', 'true');
    replace(error, err.message);
    showError(err);
  }
  function save(event) {
    event.preventDefault();
    for (const input of form.querySelectorAll('input')) input.removeAttribute('aria-invalid');
    let next;
    try {
      next = overrideFromForm(form, override);
    } catch (err) {
      return refused(err);
    }
    return send(next, 'save');
  }
  async function load(g, refill) {
    const [all, { limits: state }] = await Promise.all([
      get(`/queues${query({ windowMs: 60000 })}`),
      get(`/queues/${encodeURIComponent(queue)}/limits`),
    ]);
    if (g !== generation) return;
    const q = all.queues.find((x) => x.queue === queue);
    replace(
      health,
      q
        ? [
            q.paused ? badge('paused') : badge('active', 'live'),
            ` ${q.available} available, ${q.running} running, ${q.scheduled} scheduled, ${q.retryable} retryable · `,
            el('a', { href: `#/jobs${query({ state: 'available', queue })}` }, 'jobs'),
          ]
        : 'No queue of this name holds jobs.',
    );
    override = state?.override ?? null;
    replace(
      summary,
      state?.effective ? limitsLine(state.effective) : 'No limits: claims take what the hosts have room for.',
    );
    replace(
      now,
      state ? `${state.running} running under the limits, ${state.waiting} waiting at the gate.` : '',
    );
    const rows = LIMIT_FIELDS.flatMap((f) => {
      const declared = limitValue(state?.declared, f);
      const over = limitValue(state?.override, f);
      if (declared === undefined && over === undefined) return [];
      const source = over === undefined ? 'declared' : over === null ? 'override: none' : 'override';
      return [
        el(
          'tr',
          { 'data-field': f.name },
          el('td', {}, f.name),
          el('td', { class: 'effective' }, limitText(limitValue(state?.effective, f))),
          el('td', { class: 'source' }, badge(source, over === undefined ? 'live' : 'held')),
          el('td', { class: 'declared' }, limitText(declared)),
          el('td', { class: 'override' }, over === null ? 'none' : limitText(over)),
        ),
      ];
    });
    replace(
      fields,
      rows.length === 0
        ? null
        : table(['field', 'in effect', 'source', 'declared', 'override'], rows, { id: 'limits-fields' }),
    );
    replace(
      keys,
      !state || state.keys.length === 0
        ? el('p', { class: 'muted', id: 'limit-keys-none' }, 'No key running or waiting.')
        : table(
            [
              'key',
              { label: 'running', num: true },
              { label: 'waiting', num: true },
              { label: 'recent starts', num: true },
            ],
            state.keys.map((k) =>
              el(
                'tr',
                { 'data-key': k.key },
                el('td', {}, k.key === '' ? el('span', { class: 'muted' }, '(no key)') : clip(k.key)),
                num(k.running),
                num(k.waiting),
                num(k.recentStarts),
              ),
            ),
            { id: 'limit-keys' },
          ),
    );
    if (refill) fill(state);
  }
  await load(gen, true);
  const again = async (g) => {
    await load(g, false);
    poll(g, again);
  };
  poll(gen, again);
}

// Every job state, as src/model/job.ts lists them (the page shell carries the list: one list, not a copy).
const STATES = meta('awa-job-states').split(' ').filter(Boolean);

function localInput(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  const pad = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

async function jobsPage(gen, params) {
  const state = params.get('state') || 'available';
  const form = el(
    'form',
    { class: 'search', id: 'job-search', onsubmit: submitSearch },
    el('label', {}, 'Job id', el('input', { name: 'id', inputmode: 'numeric', size: 12 })),
    el(
      'label',
      {},
      'State',
      el(
        'select',
        { name: 'state' },
        STATES.map((s) => el('option', { value: s, selected: s === state }, s)),
      ),
    ),
    el('label', {}, 'Queue', el('input', { name: 'queue', value: params.get('queue') ?? '' })),
    el('label', {}, 'Kind', el('input', { name: 'kind', value: params.get('kind') ?? '' })),
    el(
      'label',
      {},
      'From',
      el('input', { name: 'from', type: 'datetime-local', value: localInput(params.get('from')) }),
    ),
    el(
      'label',
      {},
      'To',
      el('input', { name: 'to', type: 'datetime-local', value: localInput(params.get('to')) }),
    ),
    el('button', { type: 'submit', class: 'primary' }, 'Search'),
  );
  const list = table(['id', 'state', 'kind', 'queue', 'priority', 'attempt', 'at'], [], { id: 'jobs' });
  const body = list.querySelector('tbody');
  const more = el('div', { class: 'more' });
  replace(main, el('h2', {}, 'Jobs'), form, list, more);
  const seen = new Set();
  const search = {
    state,
    queue: params.get('queue') || undefined,
    kind: params.get('kind') || undefined,
    from: params.get('from') || undefined,
    to: params.get('to') || undefined,
  };
  const load = async (cursor) => {
    const page = await get(`/jobs${query({ ...search, ...cursor, limit: 50 })}`);
    if (gen !== generation) return;
    for (const j of page.jobs) {
      if (seen.has(j.id)) continue;
      seen.add(j.id);
      body.append(
        el(
          'tr',
          { 'data-job': j.id },
          el('td', {}, el('a', { href: `#/job/${j.id}` }, j.id)),
          el('td', {}, badge(j.state)),
          el('td', {}, j.kind ? clip(j.kind) : '—'),
          el('td', {}, clip(j.queue)),
          num(j.priority),
          el('td', {}, j.maxAttempts ? `${j.attempt} / ${j.maxAttempts}` : String(j.attempt)),
          el('td', {}, fmtTime(j.at)),
        ),
      );
    }
    replace(
      more,
      page.note ? el('p', { class: 'muted', 'data-note': '' }, `Note: ${page.note}.`) : null,
      seen.size === 0 ? el('p', { class: 'muted' }, 'No jobs match.') : null,
      page.next ? el('button', { onclick: () => load(page.next).catch(showError) }, 'Older') : null,
    );
  };
  await load({});
}

function submitSearch(event) {
  event.preventDefault();
  const data = new FormData(event.target);
  const id = String(data.get('id') || '').trim();
  if (id) {
    window.location.hash = `#/job/${encodeURIComponent(id)}`;
    return;
  }
  const iso = (v) => (v ? new Date(String(v)).toISOString() : undefined);
  window.location.hash = `#/jobs${query({
    state: data.get('state'),
    queue: String(data.get('queue') || '').trim(),
    kind: String(data.get('kind') || '').trim(),
    from: iso(data.get('from')),
    to: iso(data.get('to')),
  })}`;
}

const CANCELLABLE = new Set([
  'available',
  'scheduled',
  'retryable',
  'blocked',
  'running',
  'waiting_external',
]);
const RETRYABLE = new Set(['failed', 'cancelled', 'dlq', 'scheduled', 'retryable']);

async function jobPage(gen, id) {
  const { job, progress } = await get(`/jobs/${encodeURIComponent(id)}`);
  if (gen !== generation) return;
  const errors = job.meta?.errors ?? [];
  const events = [];
  for (const e of errors) events.push({ at: e.at, text: `attempt ${e.attempt} failed: ${e.error}` });
  if (progress)
    events.push({ at: progress.updatedAt, text: `progress recorded (lease ${progress.runLease})` });
  if (job.runAt)
    events.push({ at: job.runAt, text: new Date(job.runAt) > new Date() ? 'runs at' : 'became runnable' });
  if (job.finishedAt) events.push({ at: job.finishedAt, text: `finished: ${job.state}` });
  if (job.claim) events.push({ at: job.claim.at, text: `claimed by ${claimer(job.claim)}` });
  events.sort((a, b) => new Date(a.at).getTime() - new Date(b.at).getTime());
  const actions = el(
    'div',
    { class: 'actions' },
    CANCELLABLE.has(job.state)
      ? el('button', { class: 'danger', onclick: () => jobAction(job.id, 'cancel') }, 'Cancel')
      : null,
    RETRYABLE.has(job.state)
      ? el('button', { class: 'primary', onclick: () => jobAction(job.id, 'retry') }, 'Retry now')
      : null,
  );
  replace(
    main,
    el('h2', {}, `Job ${job.id}`),
    el(
      'dl',
      { class: 'facts', id: 'job-facts' },
      [
        ['state', badge(job.state)],
        ['kind', job.kind ?? '— (compact history)'],
        ['queue', job.queue],
        ['priority', job.priority],
        ['attempts', job.maxAttempts ? `${job.attempt} of ${job.maxAttempts}` : job.attempt],
        ['run lease', job.runLease],
        job.claim ? ['claimed', `${fmtTime(job.claim.at)} by ${claimer(job.claim)}`] : null,
        ['run at', fmtTime(job.runAt)],
        ['finished', fmtTime(job.finishedAt)],
        ['tags', (job.meta?.tags ?? []).join(', ') || '—'],
      ]
        .filter(Boolean)
        .map(([k, v]) => [el('dt', {}, k), el('dd', { 'data-fact': k }, v)]),
    ),
    actions,
    el('h3', {}, 'Args'),
    el('pre', { id: 'job-args' }, JSON.stringify(job.args, null, 2) ?? 'null'),
    el('h3', {}, 'Progress'),
    progress
      ? el('pre', { id: 'job-progress' }, JSON.stringify(progress.progress, null, 2))
      : el('p', { class: 'muted' }, 'None recorded (or the attempt is closed).'),
    // What the handler returned (docs/flows.md, "Results"): only a completed job has one.
    job.state === 'completed'
      ? [
          el('h3', {}, 'Result'),
          job.result === null || job.result === undefined
            ? el(
                'p',
                { class: 'muted', id: 'job-result' },
                'None stored (nothing returned, or past retention).',
              )
            : el('pre', { id: 'job-result' }, JSON.stringify(job.result, null, 2)),
        ]
      : null,
    el('h3', {}, `Errors (${errors.length})`),
    errors.length === 0
      ? el('p', { class: 'muted' }, 'None.')
      : table(
          ['attempt', 'at', 'error'],
          errors.map((e) =>
            el(
              'tr',
              {},
              el('td', {}, e.attempt),
              el('td', {}, fmtTime(e.at)),
              el(
                'td',
                { class: 'error-text' },
                e.error,
                e.stack ? el('details', {}, el('summary', {}, 'stack'), el('pre', {}, e.stack)) : null,
              ),
            ),
          ),
          { id: 'job-errors' },
        ),
    el('h3', {}, 'Timeline'),
    el(
      'ol',
      { class: 'timeline' },
      events.map((e) => el('li', {}, el('time', {}, fmtTime(e.at)), e.text)),
    ),
    job.meta?.metadata
      ? [el('h3', {}, 'Metadata'), el('pre', {}, JSON.stringify(job.meta.metadata, null, 2))]
      : null,
  );
}

/** Why the server did not retry a job, as the retry answer says. */
function refusal(r) {
  if (r.reason === 'unique_held') return `: its unique key is held by job ${r.heldBy ?? '?'}`;
  if (r.reason === 'not_found') return ': no such job';
  if (r.reason === 'not_retryable') return `: it is ${r.state}`;
  return '';
}

/** The runtime that claimed an attempt, named as the runtimes page names it: host, pid, instance id's start. */
function claimer(claim) {
  const who = claim.hostname ? `${claim.hostname} pid ${claim.pid}` : 'an instance no longer registered';
  return `${who} (${claim.instanceId.slice(0, 8)})`;
}

async function jobAction(id, action) {
  try {
    const r = await post(`/jobs/${encodeURIComponent(id)}/${action}`);
    const from = action === 'cancel' ? r.cancelledFrom : r.from;
    say(
      from
        ? `Job ${id}: ${action === 'cancel' ? 'cancelled' : 'retried'} (was ${from}).`
        : `Job ${id}: not ${action === 'cancel' ? 'cancelled' : 'retried'}${refusal(r)}.`,
      !from,
    );
    navigate();
  } catch (err) {
    showError(err);
  }
}

/** A DLQ total as the API counts it: exact, or "≥ N" when counting stopped at its bound. */
function fmtCount(c) {
  return `${c.capped ? '≥ ' : ''}${Number(c.count).toLocaleString()}`;
}

async function dlqPage(gen, params) {
  const queue = params.get('queue') || undefined;
  const kind = params.get('kind') || undefined;
  const form = el(
    'form',
    { class: 'search', id: 'dlq-filter', onsubmit: submitDlqFilter },
    el('label', {}, 'Queue', el('input', { name: 'queue', value: queue ?? '' })),
    el('label', {}, 'Kind', el('input', { name: 'kind', value: kind ?? '' })),
    el('button', { type: 'submit', class: 'primary' }, 'Filter'),
    queue || kind ? el('a', { href: '#/dlq', class: 'clear' }, 'Show all') : null,
  );
  const all = el('input', { type: 'checkbox', id: 'dlq-all', 'aria-label': 'select every entry shown' });
  const list = table([all, 'id', 'kind', 'queue', 'attempts', 'reason', 'dead-lettered', ''], [], {
    id: 'dlq',
    class: 'dlq',
  });
  const body = list.querySelector('tbody');
  const rowBoxes = () => [...body.querySelectorAll('input[type=checkbox]')];
  const selected = () =>
    rowBoxes()
      .filter((c) => c.checked)
      .map((c) => c.value);
  // The header box selects every row shown, and shows whether all, some or none are.
  const syncAll = () => {
    const boxes = rowBoxes();
    const n = boxes.filter((c) => c.checked).length;
    all.checked = n > 0 && n === boxes.length;
    all.indeterminate = n > 0 && n < boxes.length;
  };
  all.addEventListener('change', () => {
    for (const c of rowBoxes()) c.checked = all.checked;
    syncAll();
  });
  const totals = el('p', { id: 'dlq-totals', class: 'muted' });
  const more = el('div', { class: 'more' });
  replace(
    main,
    el('h2', {}, 'Dead-letter queue'),
    form,
    totals,
    el(
      'div',
      { class: 'actions' },
      el('button', { onclick: () => dlqAction('retry', selected()) }, 'Retry selected'),
      el('button', { class: 'danger', onclick: () => dlqAction('purge', selected()) }, 'Purge selected'),
    ),
    list,
    more,
  );
  const seen = new Set();
  const load = async (cursor) => {
    const page = await get(`/dlq${query({ queue, kind, ...cursor, limit: 50 })}`);
    if (gen !== generation) return;
    replace(
      totals,
      queue || kind
        ? `${fmtCount(page.matching)} of ${fmtCount(page.total)} entries match the filter.`
        : `${fmtCount(page.total)} ${page.total.count === 1 && !page.total.capped ? 'entry' : 'entries'} in the DLQ.`,
    );
    for (const j of page.jobs) {
      if (seen.has(j.id)) continue;
      seen.add(j.id);
      body.append(
        el(
          'tr',
          { 'data-job': j.id },
          el(
            'td',
            {},
            el('input', {
              type: 'checkbox',
              value: j.id,
              'aria-label': `select ${j.id}`,
              onchange: syncAll,
            }),
          ),
          el('td', {}, el('a', { href: `#/job/${j.id}` }, j.id)),
          el('td', {}, clip(j.kind)),
          el('td', {}, clip(j.queue)),
          el('td', {}, `${j.attempt} / ${j.maxAttempts}`),
          el('td', { class: 'reason' }, j.reason ?? '—'),
          el('td', {}, fmtTime(j.dlqAt)),
          el(
            'td',
            { class: 'row-actions' },
            el('button', { 'data-action': 'retry', onclick: () => dlqAction('retry', [j.id]) }, 'Retry'),
            ' ',
            el(
              'button',
              { class: 'danger', 'data-action': 'purge', onclick: () => dlqAction('purge', [j.id]) },
              'Purge',
            ),
          ),
        ),
      );
    }
    syncAll();
    replace(
      more,
      seen.size === 0
        ? el('p', { class: 'muted' }, queue || kind ? 'No entries match.' : 'The DLQ is empty.')
        : null,
      page.next ? el('button', { onclick: () => load(page.next).catch(showError) }, 'Older') : null,
    );
  };
  await load({});
}

function submitDlqFilter(event) {
  event.preventDefault();
  const data = new FormData(event.target);
  window.location.hash = `#/dlq${query({
    queue: String(data.get('queue') || '').trim(),
    kind: String(data.get('kind') || '').trim(),
  })}`;
}

async function dlqAction(action, ids) {
  if (ids.length === 0) return say('Select entries first.', true);
  if (
    action === 'purge' &&
    !window.confirm(`Delete ${ids.length} DLQ entr${ids.length === 1 ? 'y' : 'ies'} for good?`)
  )
    return;
  try {
    const r = await post(`/dlq/${action}`, { ids });
    say(action === 'retry' ? `Retried ${r.retried.length} of ${ids.length}.` : `Purged ${r.purged}.`);
    navigate();
  } catch (err) {
    showError(err);
  }
}

async function runtimesPage(gen) {
  const { runtimes, leader } = await get('/runtimes');
  if (gen !== generation) return;
  const leaderRow = runtimes.find((r) => r.instanceId === leader);
  replace(
    main,
    el('h2', {}, 'Runtimes'),
    el(
      'p',
      { id: 'leader' },
      leaderRow ? `Leader: ${leaderRow.hostname} pid ${leaderRow.pid} (${leader})` : 'No live leader.',
    ),
    table(
      [
        'instance',
        'host',
        'pid',
        'version',
        'queues',
        { label: 'in flight', num: true },
        'started',
        'heartbeat',
        'state',
      ],
      runtimes.map((r) =>
        el(
          'tr',
          {},
          el('td', {}, r.instanceId.slice(0, 8)),
          el('td', {}, clip(r.hostname)),
          el('td', {}, r.pid),
          el('td', {}, r.version ?? '—'),
          el(
            'td',
            {},
            r.queues
              .map((q) => (r.concurrency && r.concurrency[q] ? `${q}×${r.concurrency[q]}` : q))
              .join(', '),
          ),
          num(r.inFlight),
          el('td', {}, fmtTime(r.startedAt)),
          el('td', {}, `${fmtAge(r.heartbeatAt)} ago`),
          el(
            'td',
            {},
            r.live ? badge('live') : badge(r.stoppedAt ? 'stopped' : 'silent', 'failed'),
            r.isLeader && r.live ? [' ', badge('leader')] : null,
          ),
        ),
      ),
      { id: 'runtimes' },
    ),
  );
}

async function cronPage(gen) {
  const { schedules } = await get('/cron');
  if (gen !== generation) return;
  replace(
    main,
    el('h2', {}, 'Cron schedules'),
    schedules.length === 0
      ? el('p', {}, 'No schedules.')
      : table(
          ['name', 'cron', 'kind', 'queue', 'next fire', 'last fire', 'last job', 'state'],
          schedules.map((s) =>
            el(
              'tr',
              {},
              el('td', {}, clip(s.name)),
              el('td', {}, `${s.cron} (${s.timezone})`),
              el('td', {}, clip(s.kind)),
              el('td', {}, clip(s.queue)),
              el('td', {}, fmtTime(s.nextFireAt)),
              el('td', {}, fmtTime(s.lastFireAt)),
              el('td', {}, s.lastJobId ? el('a', { href: `#/job/${s.lastJobId}` }, s.lastJobId) : '—'),
              el(
                'td',
                {},
                s.paused ? badge('paused') : badge('active', 'live'),
                s.undeclared ? [' ', badge('undeclared', 'held')] : null,
              ),
            ),
          ),
          { id: 'cron' },
        ),
  );
}

async function storagePage(gen) {
  const { ring, tables } = await get('/storage');
  if (gen !== generation) return;
  const oldest = ring.find((s) => s.role === 'sealed');
  const held = oldest?.pinnedBy
    ? `Oldest sealed slot ${oldest.slot} is held: ${oldest.pinnedBy} (${oldest.unclaimedMore ? 'more than ' : ''}${oldest.unclaimed ?? 0} unclaimed rows, ${oldest.openReceipts ?? 0} open receipts) of queues ${(oldest.queues ?? []).join(', ') || '—'}.`
    : 'Nothing holds the ring: the oldest slot is pruned as soon as it is spent.';
  replace(
    main,
    el('h2', {}, 'Storage'),
    el('h3', {}, 'Ring slots (oldest first)'),
    table(
      [
        'slot',
        'role',
        { label: 'generation', num: true },
        { label: 'ready rows ≈', num: true },
        { label: 'receipts ≈', num: true },
        'held by',
      ],
      ring.map((s) =>
        el(
          'tr',
          {},
          el('td', {}, s.slot),
          el('td', {}, badge(s.role, s.role === 'current' ? 'running' : '')),
          num(s.generation),
          num(s.readyRows),
          num(s.receipts),
          el('td', {}, s.pinnedBy ? badge(s.pinnedBy, 'held') : ''),
        ),
      ),
      { id: 'ring' },
    ),
    el('p', { id: 'ring-held' }, held),
    el('h3', {}, 'Tables'),
    table(
      [
        'table',
        { label: 'partitions', num: true },
        { label: 'size', num: true },
        { label: 'live', num: true },
        { label: 'dead', num: true },
      ],
      tables.map((t) =>
        el(
          'tr',
          {},
          el('td', {}, t.family),
          num(t.partitions),
          el('td', { class: 'num' }, fmtBytes(t.bytes)),
          num(t.liveTuples),
          num(t.deadTuples),
        ),
      ),
      { id: 'tables' },
    ),
  );
}

// ---- audit trail ----

/** Who did what, when, from where: the newest records first, filtered by action and actor, paged ("Older"). */
async function auditPage(gen, params) {
  const action = params.get('action') || undefined;
  const actor = params.get('actor') || undefined;
  const form = el(
    'form',
    { class: 'search', id: 'audit-filter', onsubmit: submitAuditFilter },
    el(
      'label',
      {},
      'Action',
      el('input', { name: 'action', value: action ?? '', placeholder: 'queue.pause' }),
    ),
    el('label', {}, 'Actor', el('input', { name: 'actor', value: actor ?? '' })),
    el('button', { type: 'submit', class: 'primary' }, 'Filter'),
  );
  const list = table(['at', 'actor', 'origin', 'action', 'target', 'detail'], [], { id: 'audit' });
  const body = list.querySelector('tbody');
  const more = el('div', { class: 'more' });
  replace(main, el('h2', {}, 'Audit trail'), form, list, more);
  let shown = 0;
  const load = async (cursor) => {
    const page = await get(`/audit${query({ action, actor, ...cursor, limit: 50 })}`);
    if (gen !== generation) return;
    for (const r of page.records) {
      shown++;
      body.append(
        el(
          'tr',
          { 'data-audit': r.id },
          el('td', {}, fmtTime(r.at)),
          el('td', {}, clip(r.actor)),
          el('td', {}, clip(r.origin)),
          el('td', {}, badge(r.action, 'audit')),
          el('td', {}, r.target ?? '—'),
          el('td', {}, r.detail ? el('code', {}, JSON.stringify(r.detail)) : '—'),
        ),
      );
    }
    replace(
      more,
      shown === 0 ? el('p', { class: 'muted' }, 'No records match.') : null,
      page.next ? el('button', { onclick: () => load(page.next).catch(showError) }, 'Older') : null,
    );
  };
  await load({});
}

function submitAuditFilter(event) {
  event.preventDefault();
  const data = new FormData(event.target);
  window.location.hash = `#/audit${query({
    action: String(data.get('action') || '').trim(),
    actor: String(data.get('actor') || '').trim(),
  })}`;
}

// ---- flows ----

async function flowsPage(gen, params) {
  const data = await get(`/flows${query({ beforeId: params.get('beforeId') })}`);
  if (gen !== generation) return;
  replace(
    main,
    el('h2', {}, 'Flows'),
    table(
      ['flow', 'name', 'created', { label: 'jobs', num: true }],
      data.flows.map((f) =>
        el(
          'tr',
          { 'data-flow': f.flowId },
          el('td', {}, el('a', { href: `#/flow/${f.flowId}` }, f.flowId)),
          el('td', {}, f.name ? clip(f.name) : '—'),
          el('td', {}, fmtTime(f.createdAt)),
          num(f.jobs),
        ),
      ),
      { id: 'flows' },
    ),
    data.next ? el('p', {}, el('a', { href: `#/flows${query(data.next)}` }, 'Older flows')) : null,
  );
}

/** Graphs of more jobs than this are shown as a table only: one page could not draw them legibly. */
const FLOW_GRAPH_MAX = 300;

async function flowPage(gen, id) {
  const { flow } = await get(`/flows/${encodeURIComponent(id)}`);
  if (gen !== generation) return;
  const open = flow.state === 'running';
  replace(
    main,
    el('h2', {}, `Flow ${flow.flowId}${flow.name ? `: ${flow.name}` : ''}`),
    el(
      'p',
      { id: 'flow-state' },
      badge(flow.state === 'running' ? 'running' : flow.state),
      ' ',
      Object.entries(flow.counts)
        .map(([state, n]) => `${n} ${state}`)
        .join(', '),
    ),
    el(
      'div',
      { class: 'actions' },
      open ? el('button', { class: 'danger', onclick: () => flowAction(flow.flowId) }, 'Cancel flow') : null,
    ),
    flow.jobs.length <= FLOW_GRAPH_MAX
      ? flowGraph(flow.jobs)
      : el('p', { class: 'muted' }, `The graph is drawn for flows of up to ${FLOW_GRAPH_MAX} jobs.`),
    table(
      ['job', 'id', 'state', 'runs after'],
      flow.jobs
        .slice(0, 500)
        .map((j) =>
          el(
            'tr',
            { 'data-job-name': j.name },
            el('td', {}, clip(j.name)),
            el('td', {}, el('a', { href: `#/job/${j.id}` }, j.id)),
            el('td', {}, j.state ? badge(j.state) : badge('past retention', 'held')),
            el(
              'td',
              {},
              j.dependsOn
                .map(
                  (d) =>
                    `${d.name ?? `#${d.id}`}${d.onFailure === 'fail' ? '' : ` [${d.onFailure}]`}${d.outcome ? ` = ${d.outcome}` : ''}`,
                )
                .join(', ') || '—',
            ),
          ),
        ),
      { id: 'flow-jobs' },
    ),
    flow.jobs.length > 500 ? el('p', { class: 'muted' }, `The first 500 of ${flow.jobs.length} jobs.`) : null,
  );
  if (open) poll(gen, (g) => flowPage(g, id));
}

/** The flow as layers, left to right: a job sits one column right of the furthest job it depends on; each edge
 * is a line from a dependency to its dependent; each job's box is coloured by its state. */
function flowGraph(jobs) {
  const ns = 'http://www.w3.org/2000/svg';
  const byId = new Map(jobs.map((j) => [j.id, j]));
  const level = new Map();
  const levelOf = (j) => {
    if (level.has(j.id)) return level.get(j.id);
    level.set(j.id, 0);
    const inFlow = j.dependsOn.filter((d) => byId.has(d.id));
    const l = inFlow.length === 0 ? 0 : 1 + Math.max(...inFlow.map((d) => levelOf(byId.get(d.id))));
    level.set(j.id, l);
    return l;
  };
  const columns = [];
  for (const j of jobs) (columns[levelOf(j)] ??= []).push(j);
  const W = 150;
  const H = 34;
  const GAP_X = 50;
  const GAP_Y = 12;
  const pos = new Map();
  columns.forEach((col, c) =>
    col.forEach((j, r) => pos.set(j.id, { x: 10 + c * (W + GAP_X), y: 10 + r * (H + GAP_Y) })),
  );
  const width = 20 + columns.length * (W + GAP_X) - GAP_X;
  const height = 20 + Math.max(...columns.map((c) => c.length)) * (H + GAP_Y) - GAP_Y;
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('class', 'flow-graph');
  svg.setAttribute('id', 'flow-graph');
  svg.setAttribute('width', String(width));
  svg.setAttribute('height', String(height));
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  const make = (tag, attrs) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    return node;
  };
  for (const j of jobs) {
    const to = pos.get(j.id);
    for (const d of j.dependsOn) {
      const from = pos.get(d.id);
      if (!from) continue;
      svg.append(
        make('line', {
          class: `edge ${d.onFailure}`,
          x1: from.x + W,
          y1: from.y + H / 2,
          x2: to.x,
          y2: to.y + H / 2,
        }),
      );
    }
  }
  for (const j of jobs) {
    const { x, y } = pos.get(j.id);
    const g = make('g', { class: `node ${j.state ?? 'gone'}`, 'data-node': j.name });
    const link = make('a', { href: `#/job/${j.id}` });
    link.append(make('rect', { x, y, width: W, height: H, rx: 5 }));
    const label = make('text', { x: x + 8, y: y + 14 });
    label.textContent = j.name.length > 20 ? `${j.name.slice(0, 19)}…` : j.name;
    const state = make('text', { x: x + 8, y: y + 28, class: 'state' });
    state.textContent = j.state ?? 'past retention';
    const title = make('title', {});
    title.textContent = `${j.name} (${j.id}): ${j.state ?? 'past retention'}`;
    link.append(label, state, title);
    g.append(link);
    svg.append(g);
  }
  const wrap = el('div', { class: 'table-wrap' });
  wrap.append(svg);
  return wrap;
}

async function flowAction(flowId) {
  try {
    const r = await post(`/flows/${encodeURIComponent(flowId)}/cancel`);
    say(`Cancelled ${r.cancelled} job(s) of flow ${flowId}.`);
    navigate();
  } catch (err) {
    showError(err);
  }
}

// ---- where the pages are read ----

/** The header's note of where the pages are read from, when the server reads from a replica (the shell says so):
 * how far behind the primary it is (flagged past READS_BEHIND_MS). Polled on its own, every page, while visible;
 * not at all when the pages are read from the primary. */
const readsNote = document.getElementById('reads');
const READS_POLL_MS = 5000;
const READS_BEHIND_MS = 5000;

async function showReads() {
  if (document.visibilityState !== 'hidden') {
    try {
      const lag = await get('/reads');
      const behind = lag.reads === 'replica' && lag.lagMs !== 0;
      readsNote.hidden = lag.reads === 'primary';
      readsNote.textContent =
        lag.reads === 'other'
          ? 'Reads: another server, lag unknown'
          : `Reads: replica, ${!behind ? 'caught up' : lag.lagMs === null ? 'lag unknown' : `${(lag.lagMs / 1000).toFixed(1)} s behind`}`;
      readsNote.title =
        lag.bytesBehind === null
          ? ''
          : `${Number(lag.bytesBehind).toLocaleString()} bytes of WAL not replayed yet`;
      readsNote.classList.toggle(
        'behind',
        lag.reads !== 'primary' && (lag.lagMs === null || lag.lagMs > READS_BEHIND_MS),
      );
    } catch {
      // The page's own read says what is wrong with the server.
    }
  }
  setTimeout(showReads, READS_POLL_MS);
}

// ---- routing ----

function showError(err) {
  say(err instanceof Error ? err.message : String(err), true);
}

function navigate() {
  const gen = ++generation;
  const hash = window.location.hash || '#/queues';
  const [path, search] = hash.slice(1).split('?');
  const params = new URLSearchParams(search ?? '');
  const parts = path.split('/').filter(Boolean);
  const page = parts[0] ?? 'queues';
  for (const a of document.querySelectorAll('#nav a')) {
    a.classList.toggle(
      'active',
      a.dataset.page ===
        (page === 'job' ? 'jobs' : page === 'flow' ? 'flows' : page === 'queue' ? 'queues' : page),
    );
  }
  const pages = {
    queues: () => queuesPage(gen),
    queue: () => queuePage(gen, decodeURIComponent(parts[1] ?? '')),
    jobs: () => jobsPage(gen, params),
    job: () => jobPage(gen, decodeURIComponent(parts[1] ?? '')),
    flows: () => flowsPage(gen, params),
    flow: () => flowPage(gen, decodeURIComponent(parts[1] ?? '')),
    dlq: () => dlqPage(gen, params),
    runtimes: () => runtimesPage(gen),
    cron: () => cronPage(gen),
    storage: () => storagePage(gen),
    audit: () => auditPage(gen, params),
  };
  const render = pages[page] ?? pages.queues;
  render().catch((err) => {
    if (gen === generation) {
      replace(main, el('p', { class: 'error' }, err instanceof Error ? err.message : String(err)));
    }
  });
}

window.addEventListener('hashchange', () => {
  say('');
  navigate();
});
navigate();
if (meta('awa-reads') === 'replica') showReads();
