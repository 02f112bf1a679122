// tf's chat page: chat and completion over the server's own OpenAI routes (SSE), conversations in
// localStorage, and a live panel of the KV ledger from /v1/load and /metrics. Plain JS, no build.
'use strict';

const $ = (id) => document.getElementById(id);
const query = new URLSearchParams(location.search);
// ?poll=MS changes the live panel's period (tests poll faster than the default second).
const POLL_MS = Math.max(100, Number(query.get('poll')) || 1000);

const saved = {
  get(key, fallback) {
    try {
      const v = localStorage.getItem('tf.' + key);
      return v === null ? fallback : JSON.parse(v);
    } catch (e) {
      return fallback;
    }
  },
  set(key, value) {
    try {
      localStorage.setItem('tf.' + key, JSON.stringify(value));
    } catch (e) {
      // A full or disabled storage loses the history, not the page.
    }
  },
};

const state = {
  apiKey: saved.get('apiKey', ''),
  props: null,
  mode: null,
  conversations: saved.get('conversations', []),
  current: saved.get('current', null),
  controller: null,  // the running request's AbortController
  liveTimer: null,
};

class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function headers(json) {
  const h = {};
  if (json) h['Content-Type'] = 'application/json';
  if (state.apiKey) h.Authorization = 'Bearer ' + state.apiKey;
  return h;
}

function setStatus(text, bad = false) {
  const s = $('status');
  s.textContent = text;
  s.classList.toggle('bad', bad);
}

// Every call but /health and /metrics may need the key; a 401 asks for it.
async function api(path, options = {}) {
  const res = await fetch(path, { ...options, headers: headers(Boolean(options.body)) });
  if (res.status === 401) {
    askKey(state.apiKey
      ? 'The server refused the API key (401). Enter the key it was started with (--api-key).'
      : 'This server needs an API key (it was started with --api-key).');
    throw new HttpError(401, 'refused: a valid API key is needed (401)');
  }
  if (!res.ok) {
    let message = res.status + ' ' + res.statusText;
    try {
      const body = await res.json();
      if (body.error && body.error.message) message = res.status + ': ' + body.error.message;
    } catch (e) {
      // Not JSON: the status line says enough.
    }
    throw new HttpError(res.status, message);
  }
  return res;
}

function askKey(reason) {
  setStatus('API key needed', true);
  $('key-reason').textContent = reason;
  const d = $('key-dialog');
  if (!d.open) d.showModal();
  $('key-input').focus();
}

// Loading: /health answers 503 {"status":"loading","progress"} until the model is in.
async function waitReady() {
  for (;;) {
    let body = null;
    try {
      const res = await fetch('/health');
      if (res.ok) break;
      body = await res.json();
    } catch (e) {
      setStatus('server unreachable', true);
    }
    if (body && body.status === 'loading') {
      const p = Number(body.progress) || 0;
      $('loading').hidden = false;
      $('loading-bar').value = p;
      $('loading-text').textContent = Math.round(p * 100) + '%';
      setStatus('loading ' + Math.round(p * 100) + '%');
    }
    await new Promise((r) => setTimeout(r, 500));
  }
  $('loading').hidden = true;
}

async function boot() {
  setStatus('connecting');
  await waitReady();
  try {
    state.props = await (await api('/props')).json();
  } catch (e) {
    if (!(e instanceof HttpError && e.status === 401)) setStatus(e.message, true);
    return;
  }
  const p = state.props;
  $('model-name').textContent = p.model + ' · ' + p.total_slots + ' streams · ' + p.n_ctx +
    '-token window';
  $('mode-chat').disabled = !p.chat;
  $('live-budget').textContent = (p.start_lines || []).join('\n');
  // The page opens in the mode that suits the model: chat when it brings its own template.
  setMode(query.get('mode') || p.page_mode);
  setStatus('ready');
  startLive();
}

function setMode(mode) {
  if (mode === 'chat' && state.props && !state.props.chat) mode = 'completion';
  state.mode = mode;
  $('chat-view').hidden = mode !== 'chat';
  $('completion-view').hidden = mode !== 'completion';
  $('mode-chat').classList.toggle('active', mode === 'chat');
  $('mode-completion').classList.toggle('active', mode === 'completion');
  document.body.dataset.mode = mode;
}

// ---- settings ----

const FIELDS = ['temperature', 'top_k', 'top_p', 'min_p', 'seed', 'max_tokens'];

function loadSettings() {
  const s = saved.get('settings', {});
  for (const f of FIELDS) $(f).value = s[f] ?? '';
  $('system-prompt').value = s.system ?? '';
  $('template-kwargs').value = s.kwargs ?? '';
  $('extra-fields').value = s.extra ?? '';
}

function saveSettings() {
  const s = { system: $('system-prompt').value, kwargs: $('template-kwargs').value,
              extra: $('extra-fields').value };
  for (const f of FIELDS) s[f] = $(f).value;
  saved.set('settings', s);
}

function parseObject(id, name) {
  const text = $(id).value.trim();
  if (!text) return null;
  let v;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new Error(name + ' is not JSON: ' + e.message);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v))
    throw new Error(name + ' must be a JSON object');
  return v;
}

// The sampling fields set on the page; empty ones are left to the server's defaults.
function requestFields(chat) {
  const body = {};
  for (const f of FIELDS) {
    const v = $(f).value.trim();
    if (v !== '') body[f] = Number(v);
  }
  const error = $('settings-error');
  error.hidden = true;
  try {
    if (chat) {
      const kwargs = parseObject('template-kwargs', 'chat_template_kwargs');
      if (kwargs) body.chat_template_kwargs = kwargs;
    }
    Object.assign(body, parseObject('extra-fields', 'more request fields') || {});
  } catch (e) {
    error.textContent = e.message;
    error.hidden = false;
    throw e;
  }
  return body;
}

// ---- streaming ----

// POSTs `body` and calls onChunk with each SSE data object until [DONE].
async function streamSSE(path, body, signal, onChunk) {
  const res = await api(path, { method: 'POST', body: JSON.stringify(body), signal });
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let nl;
    while ((nl = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, nl).replace(/\r$/, '');
      buffer = buffer.slice(nl + 1);
      if (!line.startsWith('data:')) continue;  // SSE comments keep the connection checked
      const data = line.slice(5).trim();
      if (data === '[DONE]') return;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new HttpError(500, chunk.error.message || 'generation failed');
      onChunk(chunk);
    }
  }
}

// Per reply: tokens, tokens/s, time to first token, cached prompt tokens.
function replyStats(t) {
  const tokens = t.usage ? t.usage.completion_tokens : t.chunks;
  const parts = [tokens + ' tokens'];
  if (t.first !== null) {
    // Tokens after the first over the time they took; a reply that arrived in one piece (a fast
    // model, a short reply) is timed from the request instead.
    const gen = (t.end - t.first) / 1000;
    const rate = gen > 0.05 && tokens > 1 ? (tokens - 1) / gen : tokens / ((t.end - t.start) / 1000);
    if (tokens > 0 && Number.isFinite(rate)) parts.push(rate.toFixed(1) + ' tokens/s');
    parts.push('first token ' + Math.round(t.first - t.start) + ' ms');
  }
  const details = t.usage && t.usage.prompt_tokens_details;
  if (details && details.cached_tokens !== undefined)
    parts.push(details.cached_tokens + ' of ' + t.usage.prompt_tokens + ' prompt tokens cached');
  if (t.stopped) parts.push('stopped');
  return parts.join(' · ');
}

function newTiming() {
  return { start: performance.now(), first: null, end: null, chunks: 0, usage: null,
           stopped: false };
}

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
  $('complete').disabled = busy;
  $('complete-stop').disabled = !busy;
  document.body.dataset.busy = busy ? '1' : '';
  if (state.props) setStatus(busy ? 'generating' : 'ready');
}

function stop() {
  if (state.controller) state.controller.abort();
}

// ---- conversations ----

function conversation() {
  let c = state.conversations.find((x) => x.id === state.current);
  if (!c) {
    c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: 'New chat',
          messages: [] };
    state.conversations.unshift(c);
    state.current = c.id;
  }
  return c;
}

function persist() {
  saved.set('conversations', state.conversations);
  saved.set('current', state.current);
}

function renderConversations() {
  const ul = $('conversations');
  ul.replaceChildren();
  for (const c of state.conversations) {
    const li = document.createElement('li');
    li.classList.toggle('active', c.id === state.current);
    const title = document.createElement('span');
    title.textContent = c.title;
    li.append(title);
    const del = document.createElement('button');
    del.textContent = '×';
    del.title = 'Delete';
    del.addEventListener('click', (e) => {
      e.stopPropagation();
      state.conversations = state.conversations.filter((x) => x.id !== c.id);
      if (state.current === c.id) state.current = null;
      persist();
      renderAll();
    });
    li.append(del);
    li.addEventListener('click', () => {
      if (state.controller) return;
      state.current = c.id;
      persist();
      renderAll();
    });
    ul.append(li);
  }
}

function toolCallText(call) {
  const f = call.function || {};
  return (f.name || '?') + '(' + (f.arguments || '') + ')';
}

// Fills `el` with one message: reasoning folded, content, tool calls, stats, its buttons.
function renderMessage(el, m, index, last) {
  el.className = 'msg ' + m.role;
  el.replaceChildren();
  const role = document.createElement('div');
  role.className = 'role';
  role.append(m.role);
  const busy = Boolean(state.controller);
  if (m.role === 'user' && !busy) role.append(button('edit', () => editTurn(el, index)));
  if (m.role === 'assistant' && last && !busy) role.append(button('regenerate', regenerate));
  el.append(role);
  if (m.reasoning) {
    const d = document.createElement('details');
    d.className = 'reasoning';
    const s = document.createElement('summary');
    s.textContent = 'reasoning';
    const body = document.createElement('div');
    body.textContent = m.reasoning;
    d.append(s, body);
    el.append(d);
  }
  const content = document.createElement('div');
  content.className = 'content';
  content.textContent = m.content || '';
  el.append(content);
  for (const call of m.tool_calls || []) {
    const t = document.createElement('div');
    t.className = 'tool-call';
    t.textContent = 'tool call: ' + toolCallText(call);
    el.append(t);
  }
  if (m.error) {
    const e = document.createElement('div');
    e.className = 'error';
    e.textContent = m.error;
    el.append(e);
  }
  if (m.stats) {
    const s = document.createElement('div');
    s.className = 'stats';
    s.textContent = m.stats;
    el.append(s);
  }
}

function button(text, onClick) {
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = text;
  b.addEventListener('click', onClick);
  return b;
}

function renderMessages() {
  const box = $('messages');
  box.replaceChildren();
  const msgs = conversation().messages;
  msgs.forEach((m, i) => {
    const el = document.createElement('div');
    renderMessage(el, m, i, i === msgs.length - 1);
    box.append(el);
  });
  box.scrollTop = box.scrollHeight;
}

function renderAll() {
  conversation();  // there is always a current one to type into
  renderConversations();
  renderMessages();
}

function editTurn(el, index) {
  const c = conversation();
  const area = document.createElement('textarea');
  area.rows = 4;
  area.value = c.messages[index].content;
  el.replaceChildren(area, button('save and send', () => {
    c.messages[index].content = area.value;
    c.messages.length = index + 1;  // the turns after an edited one no longer follow from it
    persist();
    runChat();
  }), button('cancel', renderMessages));
  area.focus();
}

function regenerate() {
  const c = conversation();
  if (c.messages.length && c.messages[c.messages.length - 1].role === 'assistant') c.messages.pop();
  runChat();
}

function sendChat(text) {
  const c = conversation();
  if (c.messages.length === 0) c.title = text.slice(0, 40) || 'New chat';
  c.messages.push({ role: 'user', content: text });
  persist();
  runChat();
}

// The conversation as the API wants it; the page's own fields (stats, errors) stay out.
function apiMessages(messages) {
  const out = [];
  const system = $('system-prompt').value.trim();
  if (system) out.push({ role: 'system', content: system });
  for (const m of messages) {
    const msg = { role: m.role, content: m.content || '' };
    if (m.tool_calls && m.tool_calls.length) msg.tool_calls = m.tool_calls;
    out.push(msg);
  }
  return out;
}

async function runChat() {
  const c = conversation();
  let fields;
  try {
    fields = requestFields(true);
  } catch (e) {
    renderAll();
    return;
  }
  const body = { messages: apiMessages(c.messages), stream: true,
                 stream_options: { include_usage: true }, ...fields };
  const reply = { role: 'assistant', content: '', reasoning: '', tool_calls: [] };
  c.messages.push(reply);
  state.controller = new AbortController();
  setBusy(true);
  renderAll();
  const el = $('messages').lastElementChild;
  const t = newTiming();
  let frame = 0;
  const draw = () => {
    frame = 0;
    renderMessage(el, reply, c.messages.length - 1, true);
    $('messages').scrollTop = $('messages').scrollHeight;
  };
  try {
    await streamSSE('/v1/chat/completions', body, state.controller.signal, (chunk) => {
      if (chunk.usage) t.usage = chunk.usage;
      const choice = chunk.choices && chunk.choices[0];
      if (!choice || !choice.delta) return;
      const d = choice.delta;
      let got = false;
      if (d.content) { reply.content += d.content; got = true; }
      if (d.reasoning_content) { reply.reasoning += d.reasoning_content; got = true; }
      for (const tc of d.tool_calls || []) {
        const slot = reply.tool_calls[tc.index] ||
          (reply.tool_calls[tc.index] = { id: '', type: 'function',
                                           function: { name: '', arguments: '' } });
        if (tc.id) slot.id = tc.id;
        if (tc.function && tc.function.name) slot.function.name = tc.function.name;
        if (tc.function && tc.function.arguments) slot.function.arguments += tc.function.arguments;
        got = true;
      }
      if (got) {
        t.chunks++;
        if (t.first === null) t.first = performance.now();
        // One redraw a frame: a fast model sends far more chunks than the screen shows.
        if (!frame) frame = requestAnimationFrame(draw);
      }
    });
  } catch (e) {
    if (e.name === 'AbortError') t.stopped = true;
    else reply.error = e.message;
  }
  if (frame) cancelAnimationFrame(frame);
  t.end = performance.now();
  reply.stats = replyStats(t);
  state.controller = null;
  setBusy(false);
  persist();
  renderAll();
}

// ---- completion mode ----

async function runCompletion() {
  const area = $('completion-text');
  let fields;
  try {
    fields = requestFields(false);
  } catch (e) {
    return;
  }
  const body = { prompt: area.value, stream: true, stream_options: { include_usage: true },
                 ...fields };
  state.controller = new AbortController();
  setBusy(true);
  $('completion-stats').textContent = '';
  $('completion-stats').classList.remove('error');
  const t = newTiming();
  let pending = '';
  let frame = 0;
  const draw = () => {
    frame = 0;
    area.value += pending;
    pending = '';
    area.scrollTop = area.scrollHeight;
  };
  try {
    await streamSSE('/v1/completions', body, state.controller.signal, (chunk) => {
      if (chunk.usage) t.usage = chunk.usage;
      const choice = chunk.choices && chunk.choices[0];
      if (!choice || !choice.text) return;
      pending += choice.text;
      t.chunks++;
      if (t.first === null) t.first = performance.now();
      if (!frame) frame = requestAnimationFrame(draw);
    });
  } catch (e) {
    if (e.name === 'AbortError') t.stopped = true;
    else {
      $('completion-stats').textContent = e.message;
      $('completion-stats').classList.add('error');
    }
  }
  if (frame) cancelAnimationFrame(frame);
  draw();
  t.end = performance.now();
  if (!$('completion-stats').textContent) $('completion-stats').textContent = replyStats(t);
  saved.set('completion', area.value);
  state.controller = null;
  setBusy(false);
}

// ---- live panel ----

function metric(text, name) {
  const m = text.match(new RegExp('^' + name + ' ([0-9.e+-]+)$', 'm'));
  return m ? Number(m[1]) : null;
}

async function pollLive() {
  let load;
  let metrics = '';
  try {
    load = await (await api('/v1/load')).json();
    const res = await fetch('/metrics');
    if (res.ok) metrics = await res.text();
  } catch (e) {
    return;
  }
  const p = load.pages;
  const kept = metric(metrics, 'tf_kv_pages_kept') ?? 0;
  $('live-lanes').textContent = (load.lanes.total - load.lanes.free) + ' busy of ' +
    load.lanes.total;
  $('live-running').textContent = load.running + ' / ' + load.queued;
  $('live-pages-held').textContent = p.held;
  $('live-pages-promised').textContent = p.promised;
  $('live-pages-kept').textContent = kept + ' (store ' + p.store + ')';
  $('live-pages-free').textContent = p.free + ' / ' + p.total;
  const slots = load.state_slots;
  $('live-slots-row').hidden = !slots || slots.total === 0;
  if (slots) $('live-slots').textContent = slots.held + ' / ' + slots.total;
  const hits = metric(metrics, 'tf_prefix_cache_hits_total');
  $('live-hits').textContent = hits === null ? '–' : hits;
  const gen = metric(metrics, 'tf_generation_tokens_total');
  $('live-generated').textContent = gen === null ? '–' : gen;
  // The bar: held, then promised beyond held, then kept; the rest is free.
  const total = Math.max(1, p.total);
  const parts = [['held', p.held], ['promised', Math.max(0, p.promised - p.held)],
                 ['kept', kept]];
  const bar = $('live-bar');
  bar.replaceChildren();
  for (const [cls, n] of parts) {
    const d = document.createElement('div');
    d.className = cls;
    // A page or more is drawn at least a pixel wide, so a small request still shows.
    d.style.width = n > 0 ? 'max(2px, ' + (100 * n / total) + '%)' : '0';
    bar.append(d);
  }
  document.body.dataset.liveRounds = load.rounds;
}

function startLive() {
  if (state.liveTimer) clearInterval(state.liveTimer);
  pollLive();
  state.liveTimer = setInterval(pollLive, POLL_MS);
}

// ---- wiring ----

function wire() {
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    const input = $('prompt-input');
    const text = input.value;
    if (!text.trim() || state.controller || !state.props) return;
    input.value = '';
    sendChat(text);
  });
  $('prompt-input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey) {
      e.preventDefault();
      $('composer').requestSubmit();
    }
  });
  $('stop').addEventListener('click', stop);
  $('complete-stop').addEventListener('click', stop);
  $('complete').addEventListener('click', () => {
    if (!state.controller && state.props) runCompletion();
  });
  $('completion-text').addEventListener('input', () => saved.set('completion', $('completion-text').value));
  $('new-chat').addEventListener('click', () => {
    if (state.controller) return;
    state.current = null;
    conversation();
    persist();
    renderAll();
    setMode('chat');
  });
  $('mode-chat').addEventListener('click', () => setMode('chat'));
  $('mode-completion').addEventListener('click', () => setMode('completion'));
  $('key-button').addEventListener('click', () => askKey('The API key sent as a bearer token.'));
  $('key-form').addEventListener('submit', (e) => {
    if (e.submitter && e.submitter.value === 'save') {
      state.apiKey = $('key-input').value.trim();
      saved.set('apiKey', state.apiKey);
      boot();
    }
  });
  for (const id of [...FIELDS, 'system-prompt', 'template-kwargs', 'extra-fields'])
    $(id).addEventListener('change', saveSettings);
}

function main() {
  wire();
  loadSettings();
  $('completion-text').value = saved.get('completion', '');
  $('key-input').value = state.apiKey;
  renderAll();
  boot();
}

main();
