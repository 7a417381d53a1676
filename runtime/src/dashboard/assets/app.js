'use strict';
// cronrun dashboard: a dependency-free, hash-routed single page app.
// Server data only ever enters the DOM as text nodes or attribute values (see el()), never via
// innerHTML, so job names, output lines and errors containing <, & or quotes are always inert.

const app = document.getElementById('app');
const FILTERS = ['all', 'failing', 'paused', 'late'];
const PER = 50;
const LIVE = new Set(['queued', 'running']);
const MAX_OUTPUT_NODES = 40000; // bounds memory for very chatty runs (two nodes per line)
const DASH = '—';
const JSON_POST = { 'Content-Type': 'application/json', 'X-Cronrun': '1' };

let session = { actions: false };
let routeGen = 0;   // bumped on every navigation; async work belonging to an older route is dropped
let timer = null;   // the current route's refresh timer
let source = null;  // the current route's EventSource, if any

/* ---------- DOM helpers ---------- */

function setAttrs(n, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    n.setAttribute(k, v === true ? '' : String(v));
  }
}
function addKids(n, kids) {
  for (const k of kids.flat(Infinity)) {
    if (k != null && k !== false) n.append(k instanceof Node ? k : String(k)); // strings become text nodes
  }
}
function el(tag, attrs, ...kids) {
  const n = document.createElement(tag);
  setAttrs(n, attrs);
  addKids(n, kids);
  return n;
}
function svg(tag, attrs, ...kids) {
  const n = document.createElementNS('http://www.w3.org/2000/svg', tag);
  setAttrs(n, attrs);
  addKids(n, kids);
  return n;
}
function table(id, heads, rows) {
  const body = rows.length
    ? rows.map(r => el('tr', null, r.map(c => el('td', null, blank(c) ? DASH : c))))
    : el('tr', null, el('td', { colspan: heads.length, class: 'muted empty' }, 'None'));
  return el('table', { id }, el('thead', null, el('tr', null, heads.map(h => el('th', null, h)))), el('tbody', null, body));
}

/* ---------- formatting ---------- */

const enc = encodeURIComponent;
const blank = v => v == null || v === false || v === '';
const cls = s => String(s).toLowerCase().replace(/[^a-z0-9_-]/g, '_');
const pad = n => String(n).padStart(2, '0');
const jobHref = name => `#/job/${enc(name)}`;
const runHref = (job, id) => `#/run/${enc(job)}/${enc(id)}`;

function fmtTime(s) {
  if (!s) return DASH;
  const d = new Date(s);
  if (isNaN(d)) return String(s);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}
function fmtDur(ms) {
  if (ms == null || !isFinite(ms)) return DASH;
  if (ms < 0) return '-' + fmtDur(-ms);
  if (ms < 1000) return `${Math.round(ms)} ms`;
  return `${(ms / 1000).toFixed(ms < 100000 ? 1 : 0)} s`;
}
function lateness(r) {
  if (!r.started_at || !r.scheduled_at) return null;
  const ms = Date.parse(r.started_at) - Date.parse(r.scheduled_at);
  return isFinite(ms) ? ms : null;
}
function badge(status, attrs) {
  return el('span', { ...attrs, class: `badge status-${cls(status)}` }, status);
}
// A run key is "JOB.RUN_ID". Job names may contain dots, so split right after the known name.
function runIdOf(job, key) {
  return key.startsWith(job + '.') ? key.slice(job.length + 1) : key.slice(key.lastIndexOf('.') + 1);
}

/* ---------- HTTP ---------- */

async function api(path, opts) {
  const res = await fetch(path, { credentials: 'same-origin', ...opts });
  let body = null;
  try { body = await res.json(); } catch { /* empty or non-JSON body */ }
  if (!res.ok) {
    const err = new Error((body && body.error) || `${res.status} ${res.statusText}`);
    err.status = res.status;
    throw err;
  }
  return body;
}
function post(path, body) {
  return api(path, { method: 'POST', headers: JSON_POST, body: JSON.stringify(body || {}) });
}

/* ---------- errors, login, polling ---------- */

// One .error box at the top of main. "load" errors vanish on the next successful load;
// "action" errors stay until the next action or navigation (a refresh must not hide them).
function showError(msg, kind) {
  let box = app.querySelector(':scope > .error');
  if (!box) {
    box = el('div', { class: 'error', role: 'alert' });
    app.prepend(box);
  }
  box.textContent = msg;
  box.dataset.kind = kind;
}
function clearError(kind) {
  const box = app.querySelector(':scope > .error');
  if (box && (!kind || box.dataset.kind === kind)) box.remove();
}
function fail(e, kind) {
  if (e && e.status === 401) showLogin(e.message);
  else showError((e && e.message) || String(e), kind);
}

function showLogin(msg) {
  stop();
  routeGen++; // abandon whatever the current route was polling
  if (app.querySelector('#login')) return; // several requests may 401 at once: keep typed text
  const token = el('input', { id: 'token', type: 'password', required: true, autocomplete: 'current-password' });
  const form = el('form', { id: 'login', class: 'login' },
    el('h2', null, 'Sign in'),
    msg && el('p', { class: 'muted' }, msg),
    el('label', null, 'Access token', token),
    el('button', { type: 'submit' }, 'Sign in'));
  // POSTed, so the token stays out of the address bar and history; the server sets a cookie.
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    const r = await fetch('/login', {
      method: 'POST', credentials: 'same-origin',
      headers: { 'Content-Type': 'application/json', 'X-Cronrun': '1' },
      body: JSON.stringify({ token: token.value }),
    });
    if (r.ok) location.reload();
    else { app.replaceChildren(); showLogin('Wrong token: use the one in [http] token_file.'); }
  });
  app.replaceChildren(form);
  token.focus();
}

function stop() {
  clearTimeout(timer);
  timer = null;
  if (source) { source.close(); source = null; }
}

// Loads and renders now, then again every `ms` while the route is current. Timers are chained
// (not setInterval) so slow responses never pile up; a sequence number drops out-of-order
// responses. render() may return false to stop polling. Returns a "refresh now" function.
function poll(gen, ms, load, render) {
  let seq = 0;
  const tick = async () => {
    const mine = ++seq;
    clearTimeout(timer);
    try {
      const data = await load();
      if (gen !== routeGen || mine !== seq) return;
      clearError('load');
      if (render(data) === false) return;
    } catch (e) {
      if (gen !== routeGen || mine !== seq) return;
      fail(e, 'load');
      if (e.status === 401) return;
    }
    clearTimeout(timer);
    timer = setTimeout(tick, ms);
  };
  tick();
  return tick;
}

// A button that runs an action, disabling itself meanwhile and reporting failures in .error.
function actionButton(id, label, fn) {
  const b = el('button', { id, type: 'button' }, label);
  b.addEventListener('click', async () => {
    b.disabled = true;
    clearError();
    try { await fn(); } catch (e) { fail(e, 'action'); } finally { b.disabled = false; }
  });
  return b;
}

/* ---------- routing ---------- */

function route() {
  stop();
  const gen = ++routeGen;
  const raw = location.hash.replace(/^#\/?/, '');
  const qi = raw.indexOf('?');
  const params = new URLSearchParams(qi < 0 ? '' : raw.slice(qi + 1));
  let parts;
  try { parts = (qi < 0 ? raw : raw.slice(0, qi)).split('/').map(decodeURIComponent); } catch { parts = ['?']; }
  const [page, a, b] = parts;
  app.replaceChildren();
  for (const link of document.querySelectorAll('nav a')) {
    link.classList.toggle('active', link.dataset.route === (page === 'status' ? 'status' : 'jobs'));
  }
  if (page === '' || page === 'jobs') jobsPage(gen, params);
  else if (page === 'job' && a) jobPage(gen, a);
  else if (page === 'run' && a && b) runPage(gen, a, b);
  else if (page === 'status') statusPage(gen);
  else showError('Unknown page: ' + location.hash, 'route');
}

/* ---------- #/jobs ---------- */

function jobsPage(gen, params) {
  const st = {
    q: params.get('q') || '',
    filter: FILTERS.includes(params.get('filter')) ? params.get('filter') : 'all',
    page: Math.max(0, parseInt(params.get('page'), 10) || 0),
  };
  const search = el('input', { id: 'search', type: 'search', placeholder: 'Search jobs…', value: st.q, autocomplete: 'off' });
  const filter = el('select', { id: 'filter', 'aria-label': 'Filter' },
    FILTERS.map(f => el('option', { value: f, selected: f === st.filter }, f)));
  const count = el('span', { id: 'count', class: 'muted' });
  const prev = el('button', { id: 'prev', type: 'button', disabled: true }, 'Previous');
  const next = el('button', { id: 'next', type: 'button', disabled: true }, 'Next');
  const tbody = el('tbody');
  const heads = ['Job', 'Schedule', 'Next', 'Pool', 'State', 'Last', 'Success', 'Durations'];
  app.append(
    el('div', { class: 'toolbar' }, search, filter, el('span', { class: 'spacer' }), count, prev, next),
    el('table', { id: 'jobs' }, el('thead', null, el('tr', null, heads.map(h => el('th', null, h)))), tbody));

  // Query state lives in the hash so it survives reloads. replaceState does not fire hashchange,
  // so the page (and the focused search input) is not rebuilt while typing.
  const sync = () => {
    const p = new URLSearchParams();
    if (st.q) p.set('q', st.q);
    if (st.filter !== 'all') p.set('filter', st.filter);
    if (st.page) p.set('page', st.page);
    history.replaceState(null, '', '#/jobs' + (p.toString() ? '?' + p : ''));
  };
  const load = () => api('/api/jobs?' + new URLSearchParams({ q: st.q, filter: st.filter, page: st.page, per: PER }));
  const render = d => {
    const jobs = d.jobs || [], total = d.total || 0, per = d.per || PER, from = (d.page ?? st.page) * per;
    count.textContent = jobs.length ? `${from + 1}–${from + jobs.length} of ${total}` : `0 of ${total}`;
    prev.disabled = from <= 0;
    next.disabled = from + per >= total;
    tbody.replaceChildren(...(jobs.length ? jobs.map(jobRow)
      : [el('tr', null, el('td', { colspan: heads.length, class: 'muted empty' }, 'No jobs match.'))]));
  };
  const refresh = poll(gen, 5000, load, render);

  let debounce;
  search.addEventListener('input', () => {
    clearTimeout(debounce);
    debounce = setTimeout(() => {
      if (gen !== routeGen) return;
      st.q = search.value.trim();
      st.page = 0;
      sync();
      refresh();
    }, 200);
  });
  filter.addEventListener('change', () => { st.filter = filter.value; st.page = 0; sync(); refresh(); });
  prev.addEventListener('click', () => { st.page = Math.max(0, st.page - 1); sync(); refresh(); });
  next.addEventListener('click', () => { st.page++; sync(); refresh(); });
}

function jobRow(j) {
  const dst = j.dst && j.dst !== 'debian' ? 'dst ' + j.dst : null;
  const raw = [j.schedule, j.timezone, dst].filter(Boolean).join(' · ');
  const next = j.next || [];
  const rate = j.success_rate;
  let last = DASH;
  if (j.last_status) {
    last = badge(j.last_status);
    if (j.last_run) last = el('a', { href: runHref(j.name, runIdOf(j.name, j.last_run)) }, last);
  }
  return el('tr', { 'data-job': j.name },
    el('td', null, el('a', { href: jobHref(j.name) }, j.name), j.kind && el('small', { class: 'muted' }, ' ' + j.kind)),
    el('td', { title: raw || null }, j.schedule_words || j.schedule || DASH, raw && el('small', { class: 'muted block' }, raw)),
    el('td', { class: 'nowrap' }, next.length ? next.map(t => el('div', null, t)) : DASH),
    el('td', null, j.pool ?? DASH),
    el('td', { class: 'nowrap' },
      j.paused && el('span', { class: 'badge state-paused' }, 'paused'),
      j.invalid != null && el('span', { class: 'badge state-invalid', title: j.invalid }, 'invalid'),
      j.late && el('span', { class: 'badge state-late' }, 'late')),
    el('td', null, last),
    el('td', { class: 'num' }, rate == null ? DASH : `${Math.round(rate * 1000) / 10}%`),
    el('td', null, sparkline(j.durations_ms || [])));
}

// Tiny bar chart of recent durations, oldest left, heights relative to the slowest shown.
function sparkline(durs) {
  const W = 80, H = 18, w = W / Math.max(durs.length, 20), max = Math.max(1, ...durs);
  return svg('svg', { class: 'spark', width: W, height: H, viewBox: `0 0 ${W} ${H}` },
    durs.map((d, i) => {
      const h = Math.max(1, (d / max) * H);
      return svg('rect', { x: i * w, y: H - h, width: Math.max(1, w - 1), height: h }, svg('title', null, fmtDur(d)));
    }));
}

/* ---------- #/job/NAME ---------- */

function jobPage(gen, name) {
  const path = '/api/jobs/' + enc(name);
  const title = el('h2', null, name);
  const actions = el('div', { class: 'actions' });
  const info = el('div', { class: 'info' });
  const chart = svg('svg', { id: 'chart', class: 'chart', viewBox: '0 0 600 100', preserveAspectRatio: 'none' });
  const spec = el('pre', { id: 'spec', class: 'code' });
  const tbody = el('tbody');
  const heads = ['Run', 'Status', 'Started', 'Trigger', 'Attempt', 'Host', 'Lateness', 'Duration', 'Exit', 'Error'];
  app.append(
    el('div', { class: 'head' }, title, el('span', { class: 'spacer' }), actions), info,
    el('h3', null, 'Durations'), chart,
    el('h3', null, 'Runs'),
    el('table', { id: 'runs' }, el('thead', null, el('tr', null, heads.map(h => el('th', null, h)))), tbody),
    el('h3', null, 'Spec'), spec);

  // One toggle button whose id/label flip between pause and resume, so it is never re-created.
  let paused = false, toggle = null, refresh = null;
  const setToggle = () => {
    toggle.id = paused ? 'resume' : 'pause';
    toggle.textContent = paused ? 'Resume' : 'Pause';
  };
  if (session.actions) {
    toggle = actionButton('pause', 'Pause', async () => {
      await post(`${path}/${paused ? 'resume' : 'pause'}`);
      paused = !paused; // optimistic; the refresh below confirms from spec.paused
      setToggle();
      refresh();
    });
    const trigger = actionButton('trigger', 'Run now', async () => {
      const r = await post(path + '/trigger', {});
      if (r && r.run) location.hash = runHref(name, runIdOf(name, r.run));
      else refresh();
    });
    actions.append(toggle, trigger);
  }

  refresh = poll(gen, 3000, () => api(path), d => {
    const runs = d.runs || [];
    title.textContent = d.name || name;
    paused = !!(d.spec && d.spec.paused);
    if (toggle) setToggle();
    info.replaceChildren(
      el('div', null, d.schedule_words || DASH),
      el('div', { class: 'muted' }, 'Next: ', (d.next || []).join(', ') || DASH));
    const text = JSON.stringify(d.spec ?? null, null, 2);
    if (spec.textContent !== text) spec.textContent = text; // don't clobber a text selection every 3 s
    drawChart(chart, runs);
    tbody.replaceChildren(...(runs.length ? runs.map(r => runRow(name, r))
      : [el('tr', null, el('td', { colspan: heads.length, class: 'muted empty' }, 'No runs yet.'))]));
  });
}

function runRow(job, r) {
  return el('tr', { 'data-run': r.run_id },
    el('td', null, el('a', { href: runHref(job, r.run_id) }, r.run_id)),
    el('td', null, badge(r.status)),
    el('td', { class: 'nowrap' }, fmtTime(r.started_at)),
    el('td', null, r.trigger ?? DASH),
    el('td', { class: 'num' }, r.attempt ?? DASH),
    el('td', null, r.host ?? DASH),
    el('td', { class: 'num' }, fmtDur(lateness(r))),
    el('td', { class: 'num' }, fmtDur(r.duration_ms)),
    el('td', { class: 'num' }, r.exit_code ?? DASH),
    el('td', { class: 'err', title: r.error || null }, r.error ?? ''));
}

// One bar per run that has a duration, oldest left, coloured through the .status-* palette.
function drawChart(chart, runs) {
  const pts = runs.filter(r => r.duration_ms != null).reverse();
  const W = 600, H = 100, w = W / Math.max(pts.length, 20);
  const max = Math.max(1, ...pts.map(r => r.duration_ms));
  if (!pts.length) {
    chart.replaceChildren(svg('text', { x: 8, y: 20 }, 'No durations yet'));
    return;
  }
  chart.replaceChildren(...pts.map((r, i) => {
    const h = Math.max(1, (r.duration_ms / max) * (H - 4));
    return svg('rect', { class: `status-${cls(r.status)}`, x: i * w + w * 0.1, y: H - h, width: w * 0.8, height: h },
      svg('title', null, `${r.run_id}: ${fmtDur(r.duration_ms)} (${r.status})`));
  }));
}

/* ---------- #/run/JOB/RUN_ID ---------- */

function runPage(gen, job, id) {
  const base = `/api/runs/${enc(job)}/${enc(id)}`;
  const actions = el('div', { class: 'actions' });
  const record = el('dl', { id: 'record', class: 'record' });
  const output = el('pre', { id: 'output', class: 'code' });
  app.append(
    el('div', { class: 'head' }, el('h2', null, el('a', { href: jobHref(job) }, job), ' / ', id),
      el('span', { class: 'spacer' }), actions),
    record, el('h3', null, 'Output'), output);

  let refresh = null, rec = null, streamFailed = false, fromRecord = false;
  const kill = session.actions && actionButton('kill', 'Kill', async () => {
    if (!confirm(`Send TERM to run ${id} of ${job}?`)) return;
    await post(base + '/kill', { signal: 'TERM' });
    refresh();
  });

  // Fallback when the stream is unavailable: show the stored last lines, unless the stream
  // already produced output. Once we own the pre, keep it in sync with the record.
  const showStored = () => {
    if (!rec || !streamFailed || (output.firstChild && !fromRecord)) return;
    output.replaceChildren(...(rec.output || []).map(l => l + '\n'));
    fromRecord = true;
  };

  refresh = poll(gen, 2000, () => api(base), r => {
    rec = r;
    renderRecord(record, r, job);
    if (kill) {
      if (r.status === 'running') { if (!kill.isConnected) actions.append(kill); } else kill.remove();
    }
    showStored();
    return LIVE.has(r.status); // a finished run no longer changes: stop polling
  });

  const es = source = new EventSource(base + '/output');
  const append = (line, stderr) => {
    // Follow the tail only if the user was already at the bottom (not reading earlier output).
    const atBottom = output.scrollHeight - output.scrollTop - output.clientHeight < 8;
    output.append(stderr ? el('span', { class: 'stderr' }, line) : document.createTextNode(line), '\n');
    while (output.childNodes.length > MAX_OUTPUT_NODES) output.firstChild.remove();
    if (atBottom) output.scrollTop = output.scrollHeight;
  };
  const done = () => { es.close(); if (source === es) source = null; return gen === routeGen; };
  // Each line comes JSON-encoded: an event whose data is empty would not be dispatched.
  es.addEventListener('line', e => append(JSON.parse(e.data), false));
  es.addEventListener('stderr', e => append(JSON.parse(e.data), true));
  es.addEventListener('end', () => { if (done()) refresh(); });
  // EventSource would reconnect forever on its own; we give up and fall back instead.
  es.addEventListener('error', () => { if (done()) { streamFailed = true; showStored(); } });
}

function renderRecord(dl, r, job) {
  const rows = [
    ['Status', badge(r.status, { id: 'run-status' })],
    ['Job', el('a', { href: jobHref(r.job ?? job) }, r.job ?? job)],
    ['Run', r.run_id],
    ['Attempt', r.attempt],
    ['Trigger', r.trigger],
    ['Host', r.host],
    ['Scheduled', fmtTime(r.scheduled_at)],
    ['Dispatched', fmtTime(r.dispatched_at)],
    ['Started', fmtTime(r.started_at)],
    ['Finished', fmtTime(r.finished_at)],
    ['Heartbeat', fmtTime(r.heartbeat_at)],
    ['Lateness', fmtDur(lateness(r))],
    ['Duration', fmtDur(r.duration_ms)],
    ['Exit code', r.exit_code],
    ['Error', r.error],
    ['Input', r.input != null && el('pre', { class: 'code' }, JSON.stringify(r.input, null, 2))],
  ];
  dl.replaceChildren(...rows.flatMap(([k, v]) => [el('dt', null, k), el('dd', null, blank(v) ? DASH : v)]));
}

/* ---------- #/status ---------- */

function statusPage(gen) {
  const view = el('div');
  app.append(view);
  poll(gen, 5000, () => api('/api/status'), d => {
    const shards = d.shards || {};
    const warnings = (d.unserved_pools || []).map(p =>
      el('div', { class: 'warning' }, `Pool "${p.pool}" has ${p.jobs} job(s) but no runner serves it.`));
    if (shards.unled) warnings.unshift(el('div', { class: 'warning' }, `Shards without a leader: ${shards.unled}`));
    view.replaceChildren(...warnings,
      el('h2', null, 'Runners'),
      table('runners', ['Host', 'Pools', 'Slots', 'Running', 'Heartbeat', 'Version'], (d.runners || []).map(r =>
        [r.host, (r.pools || []).join(', '), r.slots, r.running, fmtTime(r.heartbeat_at), r.version])),
      el('h2', null, 'Schedulers'),
      table('schedulers', ['Holder', 'Acquired'], (d.schedulers || []).map(s => [s.holder, fmtTime(s.acquired_at)])),
      el('h2', null, `Shards (${shards.count ?? 0})`),
      table('shards', ['Holder', 'Shards', 'Count'], (shards.led || []).map(l => [l.holder, l.shards, l.count])));
  });
}

/* ---------- start ---------- */

async function init() {
  window.addEventListener('hashchange', route);
  let err = null;
  try {
    const s = await api('/api/session');
    session = { actions: !!(s && s.actions) };
    document.getElementById('whoami').textContent = session.actions ? 'admin' : 'viewer';
  } catch (e) {
    if (e.status === 401) return showLogin(e.message);
    err = e; // carry on read-only, but say why
  }
  route();
  if (err) showError(err.message, 'action');
}

init();
