// The page of `tensorpc serve`: a chat streamed from /v1/chat/completions,
// and a view of the cluster (/v1/cluster) with live figures (/metrics).
// Plain scripts, no build step: chats.js (the chats kept in the browser) and
// tokens.js (token probabilities) load first, this one wires the page. Model
// output is only ever inserted as text (textContent, text nodes), never
// parsed as HTML.
'use strict';

const $ = (id) => document.getElementById(id);
const KEY_STORAGE = 'tensorpc.apiKey';
const PROBS_STORAGE = 'tensorpc.showProbabilities';
const POLL_MS = 2000;
// /v1/cluster asks every device for its free memory, a round trip to each
// server that competes with generation: it is fetched far less often than
// /metrics, and only while the cluster view is open.
const CLUSTER_MS = 15000;

// ---- Talking to the server ----

const storedKey = () => storageGet(KEY_STORAGE) || '';

// Headers for any API request: the key, once one was given, goes on all of them.
function apiHeaders(extra = {}) {
  const key = storedKey();
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

// The message of a failed response: OpenAI's {"error":{"message"}} when the
// body has one, else the status. A 401 also asks the user for a key.
async function errorMessage(res) {
  if (res.status === 401) $('key-box').hidden = false;
  try {
    const body = await res.json();
    if (body?.error?.message) return body.error.message;
  } catch { /* not JSON: the status says enough */ }
  return `${res.status} ${res.statusText}`.trim();
}

async function get(path, as) {
  const res = await fetch(path, { headers: apiHeaders(), cache: 'no-store' });
  if (!res.ok) throw new Error(await errorMessage(res));
  return as === 'text' ? res.text() : res.json();
}

let modelId = null;  // what requests name as "model": the first of /v1/models

async function loadModel() {
  const body = await get('/v1/models');
  modelId = body?.data?.[0]?.id ?? null;
  if (!modelId) throw new Error('the server lists no model');
  $('model-name').textContent = modelId;
  return modelId;
}

// The JSON payloads of a Server-Sent Events body (`data: {...}` lines, a blank
// line between events), up to `data: [DONE]`. A body that ends before [DONE]
// was cut off, and that is an error, not a short answer.
async function* sseEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) throw new Error('the answer was cut off');
      buffer += value;
      const events = buffer.split(/\r?\n\r?\n/);
      buffer = events.pop();  // the last one may be incomplete
      for (const event of events) {
        const data = event.split(/\r?\n/).filter((l) => l.startsWith('data:'))
          .map((l) => l.slice(5).trimStart()).join('\n');
        if (data === '[DONE]') return;
        if (data) yield JSON.parse(data);
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

// ---- Chat ----

const store = new ChatStore();
let chat = store.get(store.openId) ?? blankChat();  // the chat shown
let controller = null;  // the AbortController of the answer being streamed

function nearBottom() {
  const m = $('messages');
  return m.scrollHeight - m.scrollTop - m.clientHeight < 60;
}

function scrollToEnd() {
  const m = $('messages');
  m.scrollTop = m.scrollHeight;
}

function addMessage(role, text) {
  $('empty').hidden = true;
  const msg = document.createElement('div');
  msg.className = `msg ${role}`;
  const content = document.createElement('div');
  content.className = 'content';
  content.textContent = text;
  msg.append(content);
  $('messages').append(msg);
  scrollToEnd();
  return msg;
}

// A small line under a message: the usage figures, or what went wrong.
function addNote(msg, text, className = 'note') {
  const note = document.createElement('div');
  note.className = className;
  note.textContent = text;
  msg.append(note);
}

function setStreaming(on) {
  $('send').hidden = on;
  $('stop').hidden = !on;
  $('messages').dataset.state = on ? 'streaming' : 'idle';
}

function requestBody(history, withProbs) {
  const system = $('system').value.trim();
  const maxTokens = parseInt($('max-tokens').value, 10);
  const said = history.map(({ role, content }) => ({ role, content }));
  return {
    model: modelId,
    messages: system ? [{ role: 'system', content: system }, ...said] : said,
    stream: true,
    stream_options: { include_usage: true },
    temperature: Number($('temperature').value),
    max_tokens: maxTokens > 0 ? maxTokens : 256,
    ...(withProbs ? { logprobs: true, top_logprobs: 5 } : {}),
  };
}

// "N tokens, X tok/s, first after Y s". The rate is over the whole request,
// from sending to the last token: pieces can arrive bunched in one read, so
// timing the gaps between them would be noise.
function usageLine(usage, started, first, last) {
  const n = usage.completion_tokens ?? 0;
  let line = `${n} token${n === 1 ? '' : 's'}`;
  if (n > 0 && last > started) line += `, ${(n / ((last - started) / 1000)).toFixed(1)} tok/s`;
  if (first) line += `, first after ${((first - started) / 1000).toFixed(2)} s`;
  return line;
}

// Keeps `owner` (the chat an answer belongs to, shown or not) in the browser.
function keepChat(owner) {
  store.save(owner, owner === chat);
  renderChatList();
}

async function send() {
  const text = $('prompt').value.trim();
  if (!text || controller) return;
  $('prompt').value = '';
  // Another chat may be opened meanwhile; this answer finishes into the one it belongs to.
  const owner = chat;
  const history = owner.messages;
  const userMsg = addMessage('user', text);
  history.push({ role: 'user', content: text });
  const bubble = addMessage('assistant', '');
  const withProbs = $('show-probs').checked;
  const spans = withProbs ? new TokenSpans(bubble.firstChild) : null;
  const answerNode = withProbs ? null : bubble.firstChild.appendChild(document.createTextNode(''));
  let answer = '';
  const finishAnswer = (note) => {
    history.push({ role: 'assistant', content: answer, note, ...(spans ? { tokens: spans.tokens } : {}) });
    owner.title ||= chatTitle(text);
    keepChat(owner);
  };
  controller = new AbortController();
  setStreaming(true);

  const started = performance.now();
  let first = 0, last = 0, usage = null;
  try {
    if (!modelId) await loadModel();
    const res = await fetch('/v1/chat/completions', {
      method: 'POST',
      headers: apiHeaders({ 'Content-Type': 'application/json' }),
      body: JSON.stringify(requestBody(history, withProbs)),
      signal: controller.signal,
    });
    if (!res.ok) throw new Error(await errorMessage(res));
    for await (const chunk of sseEvents(res.body)) {
      if (chunk.error) throw new Error(chunk.error.message || 'the server reported an error');
      const piece = chunk.choices?.[0]?.delta?.content ?? '';
      const entries = chunk.choices?.[0]?.logprobs?.content;
      if (piece || entries?.length) {
        const stick = nearBottom();
        answer += piece;
        if (spans) spans.add(piece, entries); else answerNode.appendData(piece);
        last = performance.now();
        first ||= last;
        if (stick) scrollToEnd();
      }
      if (chunk.usage) usage = chunk.usage;
    }
    spans?.layOut(true);
    const note = usage ? usageLine(usage, started, first, last) : undefined;
    if (note) addNote(bubble, note);
    finishAnswer(note);
  } catch (err) {
    spans?.layOut(true);
    if (err.name === 'AbortError') {
      // Stopped: what came so far stays, as the model's answer.
      if (answer) {
        finishAnswer('stopped');
      } else {
        history.pop();
        userMsg.classList.add('failed');
      }
      addNote(bubble, 'stopped');
    } else {
      // Failed: the question leaves the conversation, and goes back in the box to retry.
      if (history.at(-1)?.role === 'user') history.pop();
      userMsg.classList.add('failed');
      bubble.classList.add('error');
      addNote(bubble, err.message, 'note error-text');
      if (!$('prompt').value) $('prompt').value = text;
    }
  } finally {
    controller = null;
    setStreaming(false);
  }
}

// Shows `next` in place of the chat shown, stopping an answer being streamed.
function showChat(next) {
  controller?.abort();
  hideTokenTip();
  chat = next;
  if (!wide.matches) $('chats').open = false;  // on a phone the list is a drawer: shut it
  $('messages').replaceChildren($('empty'));
  $('empty').hidden = chat.messages.length > 0;
  for (const m of chat.messages) {
    const msg = addMessage(m.role, m.tokens ? '' : m.content);
    if (m.tokens) TokenSpans.render(msg.firstChild, m.content, m.tokens);
    if (m.note) addNote(msg, m.note);
  }
  renderChatList();
}

function newChat() {
  store.setOpen(null);
  showChat(blankChat());
  $('prompt').focus();
}

function openChat(id) {
  const found = store.get(id);
  if (!found || found === chat) return;
  store.setOpen(id);
  showChat(found);
}

function deleteChat(id) {
  store.remove(id);
  if (id === chat.id) showChat(blankChat());
  else renderChatList();
}

// The past chats, newest first: each opens with a click, and has a delete button.
function renderChatList() {
  $('chat-list').replaceChildren(...store.chats.map((c) => {
    const open = el('button', 'chat-open', el('span', 'chat-title', c.title || 'Untitled'),
      el('time', 'chat-time', new Date(c.time).toLocaleString([], { dateStyle: 'short', timeStyle: 'short' })));
    open.type = 'button';
    if (c.id === chat.id) open.setAttribute('aria-current', 'true');
    open.addEventListener('click', () => openChat(c.id));
    const remove = el('button', 'chat-delete', '×');
    remove.type = 'button';
    remove.setAttribute('aria-label', `Delete chat “${c.title || 'Untitled'}”`);
    remove.addEventListener('click', () => deleteChat(c.id));
    const item = el('li', 'chat-item', open, remove);
    item.dataset.chatId = c.id;
    return item;
  }));
  $('storage-note').textContent = store.problem ?? '';
  $('storage-note').hidden = !store.problem;
}

// ---- Cluster and metrics ----

// Prometheus' text format: `name{label="value",...} value` a line, `#` lines
// are comments.
function parseMetrics(text) {
  const samples = [];
  for (const line of text.split('\n')) {
    const m = /^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line.trim());
    if (!m) continue;  // comments and blank lines
    const labels = {};
    for (const [, k, v] of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) {
      labels[k] = v.replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
    }
    samples.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return samples;
}

// The sum of a metric's samples whose labels include `match`; null if none.
function metric(samples, name, match = {}) {
  let sum = null;
  for (const s of samples ?? []) {
    if (s.name !== name || !Object.entries(match).every(([k, v]) => s.labels[k] === v)) continue;
    sum = (sum ?? 0) + s.value;
  }
  return sum;
}

function formatBytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(n < 10 ? 2 : 1) : n} ${units[i]}`;
}

const formatCount = (n) => (n == null ? '–' : Math.round(n).toLocaleString('en-US'));

// Shorthand for building the cluster view: el('div', 'class', child, 'text', ...).
function el(tag, className, ...children) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  e.append(...children.filter((c) => c != null));
  return e;
}

function figure(label, value) {
  return el('div', 'figure', el('dt', '', label), el('dd', '', value));
}

let cluster = null, clusterAt = 0, clusterError = null;
let samples = null, metricsError = null;

// A bar of the model's layers, this device's [first, last] highlighted.
function layerBar(layers, nLayer) {
  const bar = el('div', nLayer > 40 ? 'layerbar dense' : 'layerbar');
  bar.style.gridTemplateColumns = `repeat(${Math.max(nLayer, 1)}, 1fr)`;
  for (let l = 0; l < nLayer; l++) {
    const held = layers.length === 2 && l >= layers[0] && l <= layers[1];
    const cell = el('span', held ? 'held' : '');
    cell.title = `layer ${l}`;
    bar.append(cell);
  }
  return bar;
}

function deviceItem(d, nLayer) {
  const held = d.layers.length === 2
    ? (d.layers[0] === d.layers[1] ? `layer ${d.layers[0]}` : `layers ${d.layers[0]}–${d.layers[1]}`)
    : 'no layers';
  const head = el('div', 'device-head', el('strong', '', `${d.name} #${d.index}`), el('span', 'muted', held),
    d.embedding ? el('span', 'tag', 'embedding') : null, d.output ? el('span', 'tag', 'output') : null);
  const used = d.memory_total - d.memory_free;
  const memory = el('div', 'memory', d.memory_total
    ? `${formatBytes(used)} of ${formatBytes(d.memory_total)} used` : 'memory unknown');
  const meter = el('div', 'meter', el('span'));
  meter.firstChild.style.width = d.memory_total ? `${(100 * used / d.memory_total).toFixed(1)}%` : '0';
  return el('li', 'device', head, layerBar(d.layers, nLayer), memory, meter);
}

function serverCard(endpoint, devices, nLayer) {
  const card = el('article', 'server', el('header', '', el('h3', '', endpoint),
    el('span', 'tag', endpoint === 'local' ? 'this process' : 'server')));
  card.dataset.endpoint = endpoint;
  if (endpoint !== 'local') {
    const m = (name) => metric(samples, name, { server: endpoint });
    const rtt = m('tensorpc_server_last_round_trip_seconds');
    const sent = m('tensorpc_server_bytes_sent_total');
    const received = m('tensorpc_server_bytes_received_total');
    card.append(el('dl', 'figures',
      figure('Round trips', formatCount(m('tensorpc_server_round_trips_total'))),
      figure('Last round trip', rtt == null ? '–' : `${(rtt * 1000).toFixed(rtt < 0.01 ? 2 : 1)} ms`),
      figure('Sent', sent == null ? '–' : formatBytes(sent)),
      figure('Received', received == null ? '–' : formatBytes(received))));
  }
  card.append(el('ul', 'devices', ...devices.map((d) => deviceItem(d, nLayer))));
  return card;
}

function renderHeader() {
  const m = (name) => metric(samples, name);
  const tps = m('tensorpc_tokens_per_second');
  const active = m('tensorpc_slots_active'), total = m('tensorpc_slots_total');
  $('stat-tps').textContent = metricsError ? 'unavailable' : tps == null ? '–' : tps.toFixed(1);
  $('stat-slots').textContent = active == null || total == null ? '–' : `${active}/${total}`;
  $('stat-queue').textContent = formatCount(m('tensorpc_queue_depth'));
  if (!modelId && cluster) $('model-name').textContent = cluster.model;
}

function renderCluster() {
  const problems = [clusterError && `cluster: ${clusterError}`, metricsError && `metrics: ${metricsError}`];
  const status = problems.filter(Boolean).join('; ');
  $('cluster-status').textContent = status ? `Unavailable (${status}), retrying…`
    : cluster ? `Updated ${new Date().toLocaleTimeString()}` : 'Loading…';
  $('cluster-status').classList.toggle('warn', Boolean(status));

  const m = (name, match) => metric(samples, name, match);
  $('totals').replaceChildren(
    figure('Generated tokens', formatCount(m('tensorpc_generated_tokens_total'))),
    figure('Prompt tokens', formatCount(m('tensorpc_prompt_tokens_total'))),
    figure('Chat requests', formatCount(m('tensorpc_requests_total', { endpoint: 'chat', status: '200' }))),
    figure('Layers', cluster ? String(cluster.n_layer) : '–'),
    figure('Context per slot', cluster ? formatCount(cluster.n_ctx) : '–'));
  if (!cluster) return;
  // One card per server, in the order the devices come (the local one first).
  const byEndpoint = new Map();
  for (const d of cluster.devices) {
    if (!byEndpoint.has(d.endpoint)) byEndpoint.set(d.endpoint, []);
    byEndpoint.get(d.endpoint).push(d);
  }
  $('cluster').replaceChildren(...[...byEndpoint].map(([ep, devices]) => serverCard(ep, devices, cluster.n_layer)));
}

// One poll: /metrics each time, /v1/cluster when missing, failed or old.
// Failures are shown and the next poll tries again.
async function poll() {
  const clusterOpen = !$('cluster-view').hidden;
  const wantCluster = !cluster || clusterError || (clusterOpen && Date.now() - clusterAt > CLUSTER_MS);
  const [m, c] = await Promise.allSettled([
    get('/metrics', 'text').then(parseMetrics),
    wantCluster ? get('/v1/cluster') : Promise.resolve(null),
  ]);
  if (m.status === 'fulfilled') [samples, metricsError] = [m.value, null];
  else [samples, metricsError] = [null, m.reason.message];  // no stale figures shown as live
  if (c.status === 'rejected') clusterError = c.reason.message;
  else if (c.value) [cluster, clusterAt, clusterError] = [c.value, Date.now(), null];
  renderHeader();
  renderCluster();
}

async function pollForever() {
  if (!document.hidden) await poll().catch(() => {});
  setTimeout(pollForever, POLL_MS);
}

// ---- Wiring ----

function showView(name) {
  for (const v of ['chat', 'cluster']) {
    $(`${v}-view`).hidden = v !== name;
    $(`tab-${v}`).setAttribute('aria-selected', String(v === name));
  }
  if (name === 'cluster') poll().catch(() => {});
}

$('tab-chat').addEventListener('click', () => showView('chat'));
$('tab-cluster').addEventListener('click', () => showView('cluster'));
$('composer').addEventListener('submit', (e) => { e.preventDefault(); send(); });
$('prompt').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
});
$('stop').addEventListener('click', () => controller?.abort());
$('new-chat').addEventListener('click', newChat);
$('temperature').addEventListener('input', (e) => {
  $('temperature-value').textContent = Number(e.target.value).toFixed(2);
});
$('api-key').value = storedKey();
$('key-box').addEventListener('submit', (e) => {
  e.preventDefault();
  storageSet(KEY_STORAGE, $('api-key').value.trim());  // if it fails, the key is kept for this page only
  $('key-box').hidden = true;
  loadModel().catch(() => {});
  poll().catch(() => {});
});
$('show-probs').checked = storageGet(PROBS_STORAGE) === '1';
$('show-probs').addEventListener('change', (e) => storageSet(PROBS_STORAGE, e.target.checked ? '1' : '0'));
watchTokens($('messages'));
// Wide screens show the chats and settings beside the chat; phones keep them folded.
const wide = matchMedia('(min-width: 800px)');
const unfold = () => { $('chats').open = $('settings').open = wide.matches; };
unfold();
wide.addEventListener('change', unfold);
$('temperature-value').textContent = Number($('temperature').value).toFixed(2);
setStreaming(false);
showChat(chat);

loadModel().catch(() => { $('model-name').textContent = 'unavailable'; });
pollForever();
