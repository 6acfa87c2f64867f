// The live character GPT of chapter 8 (book/08_decoder.ipynb): the model the build trained, exported to
// ONNX by vitref.text_explorer (tokens -> logits and every block's causal attention weights), run in the
// reader's browser with onnxruntime-web. The loading, the softmax, the colour scale and the hatching of
// blocked cells are common.js's (window.vitrefExplorers), loaded first; the files sit beside this
// script: charlm.onnx and charlm.json (the vocabulary, the context, vitref's outputs on a few texts).
(() => {
  'use strict';
  const root = document.getElementById('text-explorer');
  const shared = window.vitrefExplorers;
  if (!root || !shared) return;
  const {softmax, shade, hatch} = shared;
  const $ = id => document.getElementById('text-explorer-' + id);
  const api = window.textExplorer = {lastRunMs: null, lastDrawMs: null, updates: 0, draws: 0};
  // ids: the typed text as token ids; query: the chosen character; logits (T, V), attention (L, h, T, T)
  const state = {data: null, session: null, ids: [], query: 0, logits: null, attention: null};
  const MAP_WIDTH = 168, STRIP_HEIGHT = 24;

  const fail = error => shared.fail($('status'), $('panel'), api, error);
  const shown = c => c === ' ' ? '\u2423' : c === '\n' ? '\u21b5' : c;      // a space, a newline: visible
  const quoted = c => c === ' ' ? 'space' : c === '\n' ? 'newline' : `\u201c${c}\u201d`;

  // ---------------------------------------------------------------- the model

  // The text as token ids, or a message naming the characters the model has never seen.
  function encode(text) {
    const {itos, context} = state.data;
    if (!text.length) return {message: 'Type at least one character.'};
    if (text.length > context) return {message: `The model reads at most ${context} characters.`};
    const unknown = [...new Set([...text].filter(c => !state.stoi.has(c)))];
    if (unknown.length) {
      return {message: `Not in the model's vocabulary: ${unknown.map(quoted).join(', ')}. It knows the ` +
          `${itos.length - 1} characters of Python's documentation (ASCII letters, digits, punctuation).`};
    }
    return {ids: [...text].map(c => state.stoi.get(c))};
  }

  async function setText(text) {
    const encoded = encode(text);
    $('message').textContent = encoded.message || '';
    if (!encoded.ids) return;
    const started = performance.now();
    const T = encoded.ids.length;
    const tokens = new ort.Tensor('int64', BigInt64Array.from(encoded.ids, BigInt), [1, T]);
    const outputs = await state.session.run({tokens});
    if ($('input').value !== text) return;                   // typed on meanwhile: the newer text wins
    state.ids = encoded.ids;
    state.logits = outputs.logits.data;                      // (1, T, V)
    state.attention = outputs.attention.data;                // (1, L, h, T, T)
    api.lastRunMs = performance.now() - started;
    buildTokens();
    select(T - 1, false);
    api.updates += 1;
  }

  // The query's row of block `layer`, head `head`: T weights (0 after the query: the causal mask).
  function attentionRow(layer, head, query) {
    const {heads} = state.data, T = state.ids.length;
    const offset = ((layer * heads + head) * T + query) * T;
    return Array.from(state.attention.subarray(offset, offset + T));
  }

  // The model's top next characters after position `query` (the padding token never listed).
  function topNext(query) {
    const {itos, pad, top} = state.data, V = itos.length;
    const probabilities = softmax(state.logits.subarray(query * V, (query + 1) * V));
    return probabilities.map((p, id) => [p, id]).filter(([, id]) => id !== pad)
      .sort((a, b) => b[0] - a[0]).slice(0, top).map(([p, id]) => ({id, p, c: itos[id]}));
  }

  // ---------------------------------------------------------------- the page

  function buildTokens() {
    const {itos} = state.data;
    $('tokens').replaceChildren(...state.ids.map((id, t) => {
      const button = document.createElement('button');
      button.type = 'button';
      button.className = 'text-explorer-token';
      button.textContent = shown(itos[id]);
      button.setAttribute('aria-label', `character ${t + 1} of ${state.ids.length}: ${quoted(itos[id])}`);
      button.tabIndex = -1;
      button.addEventListener('focus', () => { if (t !== state.query) select(t, false); });
      button.addEventListener('mouseenter', () => { if (t !== state.query) select(t, false); });
      button.addEventListener('click', () => select(t, true));
      return button;
    }));
  }

  // Make character `query` the chosen one: its button the one Tab stop, the maps, the live region.
  function select(query, focus) {
    const started = performance.now();
    state.query = query;
    [...$('tokens').children].forEach((button, t) => {
      button.tabIndex = t === query ? 0 : -1;
      button.setAttribute('aria-pressed', String(t === query));
    });
    if (focus) focusToken(query);
    drawMaps();
    const {itos} = state.data;
    const upTo = state.ids.slice(0, query + 1).map(id => itos[id]).join('');
    const next = topNext(query).map(({c, p}) => `${quoted(c)} ${(100 * p).toFixed(0)}%`).join(', ');
    $('live').textContent = `Character ${query + 1} of ${state.ids.length}, ${quoted(itos[state.ids[query]])}. ` +
        `After \u201c${upTo.length > 24 ? '\u2026' + upTo.slice(-24) : upTo}\u201d the model expects: ${next}.`;
    api.lastDrawMs = performance.now() - started;
    api.draws += 1;
    $('timing').textContent = `Last update: ${api.lastDrawMs.toFixed(0)} ms to draw the maps ` +
        `(the model: ${api.lastRunMs.toFixed(0)} ms for the whole text).`;
  }

  function focusToken(query) {
    const button = $('tokens').children[query];
    if (button && document.activeElement !== button) button.focus();
  }

  function drawMaps() {
    const {depth, heads, itos} = state.data, full = $('full').checked;
    for (let layer = 0; layer < depth; layer++)
      for (let head = 0; head < heads; head++) {
        const canvas = document.getElementById(`text-explorer-map-${layer}-${head}`);
        if (full) drawFull(canvas, layer, head); else drawStrip(canvas, attentionRow(layer, head, state.query));
        const row = attentionRow(layer, head, state.query);
        const best = row.indexOf(Math.max(...row));
        canvas.setAttribute('aria-label', `Block ${layer + 1}, head ${head + 1}: character ${state.query + 1} ` +
            `attends most to character ${best + 1}, ${quoted(itos[state.ids[best]])} ` +
            `(${(100 * row[best]).toFixed(0)}%); the ${state.ids.length - state.query - 1} later ones are blocked.`);
      }
  }

  // One row: a cell per character, shaded by its weight (light: none, dark: the row's largest);
  // the characters after the query are hatched (the causal mask blocks them).
  function drawStrip(canvas, row) {
    const T = row.length, cell = MAP_WIDTH / T;
    canvas.width = MAP_WIDTH;
    canvas.height = STRIP_HEIGHT;
    const context = canvas.getContext('2d'), largest = Math.max(...row) || 1;
    row.forEach((w, s) => {
      if (s > state.query) hatch(context, s * cell, 0, cell, STRIP_HEIGHT);
      else { context.fillStyle = shade(w / largest); context.fillRect(s * cell, 0, cell, STRIP_HEIGHT); }
    });
    context.strokeStyle = '#e66100';
    context.lineWidth = 2;
    context.strokeRect(state.query * cell + 1, 1, Math.max(cell - 2, 1), STRIP_HEIGHT - 2);
  }

  // The whole T x T map of one head (rows: queries, columns: keys), the upper triangle hatched and the
  // chosen query's row outlined. Each row shaded from none to its own largest weight.
  function drawFull(canvas, layer, head) {
    const T = state.ids.length, cell = MAP_WIDTH / T;
    canvas.width = canvas.height = MAP_WIDTH;
    const context = canvas.getContext('2d');
    hatch(context, 0, 0, MAP_WIDTH, MAP_WIDTH);
    for (let t = 0; t < T; t++) {
      const row = attentionRow(layer, head, t), largest = Math.max(...row) || 1;
      for (let s = 0; s <= t; s++) {
        context.fillStyle = shade(row[s] / largest);
        context.fillRect(s * cell, t * cell, cell, cell);
      }
    }
    context.strokeStyle = '#e66100';
    context.lineWidth = 2;
    context.strokeRect(1, state.query * cell, MAP_WIDTH - 2, Math.max(cell, 2));
  }

  function buildMapTable() {
    shared.mapTable($('maps'), state.data.depth, state.data.heads, 'text-explorer-map');
  }

  // The characters are one toolbar: Tab reaches the chosen one, the arrows, Home and End move along.
  function onTokenKey(event) {
    const last = state.ids.length - 1;
    const moves = {ArrowLeft: state.query - 1, ArrowRight: state.query + 1, ArrowUp: state.query - 1,
                   ArrowDown: state.query + 1, Home: 0, End: last};
    if (!(event.key in moves)) return;
    event.preventDefault();
    select(Math.max(0, Math.min(last, moves[event.key])), true);
  }

  async function start() {
    Object.assign(state, await shared.loadModel('charlm.onnx', 'charlm.json'));
    state.stoi = new Map(state.data.itos.map((c, id) => [c, id]).filter(([, id]) => id !== state.data.pad));
    $('limit').textContent = String(state.data.context);
    $('input').maxLength = state.data.context;
    buildMapTable();
    $('input').addEventListener('input', () => setText($('input').value));
    $('full').addEventListener('change', () => select(state.query, false));
    $('tokens').addEventListener('keydown', onTokenKey);
    $('status').hidden = true;
    $('panel').hidden = false;
    await setText($('input').value);
  }

  api.state = state;
  api.setText = text => { $('input').value = text; return setText(text); };
  api.select = select;
  api.attentionRow = attentionRow;
  api.topNext = topNext;
  api.ready = start().catch(fail);
})();
