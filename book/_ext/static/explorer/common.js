// What the book's live explorers share (chapter 7's ViT, vit-explorer.js; chapter 8's character GPT,
// text-explorer.js): loading onnxruntime-web and a model from the scripts' own folder, the failure
// sentence, the softmax and the greyscale-readable colour scale. Loaded before either script, it
// defines window.vitrefExplorers; nothing is fetched from another site.
(() => {
  'use strict';
  if (window.vitrefExplorers) return;                       // both explorers on one page: load once
  const base = new URL('.', document.currentScript.src).href;   // .../_static/explorer/

  function loadScript(src) {
    return new Promise((resolve, reject) => {
      const tag = document.createElement('script');
      tag.src = src;
      tag.onload = resolve;
      tag.onerror = () => reject(new Error('could not load ' + src));
      document.head.appendChild(tag);
    });
  }

  let ortLoaded = null;
  function loadOrt() {                                      // onnxruntime-web's WebAssembly build, once
    if (typeof WebAssembly !== 'object') return Promise.reject(new Error('no WebAssembly'));
    if (!ortLoaded) ortLoaded = loadScript(base + 'ort.wasm.min.js').then(() => {
      ort.env.wasm.numThreads = 1;                          // no SharedArrayBuffer needed (no COOP/COEP)
      ort.env.wasm.wasmPaths = base;
    });
    return ortLoaded;
  }

  async function fetchJson(name) {
    const response = await fetch(base + name);
    if (!response.ok) throw new Error(name + ': ' + response.status);
    return response.json();
  }

  // The model file `modelName` and the data `dataName`, both beside this script: {data, session}.
  async function loadModel(modelName, dataName) {
    const [data] = await Promise.all([fetchJson(dataName), loadOrt()]);
    const session = await ort.InferenceSession.create(base + modelName, {executionProviders: ['wasm']});
    return {data, session};
  }

  // The one sentence shown when the model cannot run: the page's static figures remain.
  function fail(status, panel, api, error) {
    status.textContent = 'The live model cannot run in this browser (it needs WebAssembly and the files ' +
        'served with this page), so only the static figures of this chapter are shown.';
    status.hidden = false;
    panel.hidden = true;
    api.error = String(error && (error.stack || error));
  }

  function softmax(logits) {
    let top = -Infinity;
    for (const v of logits) if (v > top) top = v;
    const exps = Array.from(logits, v => Math.exp(v - top));
    const total = exps.reduce((a, b) => a + b, 0);
    return exps.map(v => v / total);
  }

  // A monotone scale, light (0) to dark (1): it reads the same in greyscale.
  function shade(value) {
    const t = Math.max(0, Math.min(1, value));
    const light = [247, 251, 255], dark = [8, 48, 107];
    return `rgb(${light.map((l, i) => Math.round(l + t * (dark[i] - l))).join(',')})`;
  }

  // A cell no weight may reach (the causal mask blocks it): mid grey, hatched with darker lines.
  function hatch(context, x, y, width, height) {
    context.save();
    context.fillStyle = '#bdbdbd';
    context.fillRect(x, y, width, height);
    context.beginPath();
    context.rect(x, y, width, height);
    context.clip();
    context.strokeStyle = '#555';
    context.lineWidth = 1;
    context.beginPath();
    for (let d = -height; d < width; d += 4) { context.moveTo(x + d, y + height); context.lineTo(x + d + height, y); }
    context.stroke();
    context.restore();
  }

  // A block x head table of empty canvases (ids `${prefix}-${layer}-${head}`), headed by column and row.
  function mapTable(table, depth, heads, prefix, configure) {
    const head = table.createTHead().insertRow();
    head.appendChild(document.createElement('td'));
    for (let h = 0; h < heads; h++) {
      const th = document.createElement('th');
      th.scope = 'col';
      th.textContent = `head ${h + 1}`;
      head.appendChild(th);
    }
    const body = table.createTBody();
    for (let layer = 0; layer < depth; layer++) {
      const row = body.insertRow();
      const th = document.createElement('th');
      th.scope = 'row';
      th.textContent = `block ${layer + 1}`;
      row.appendChild(th);
      for (let h = 0; h < heads; h++) {
        const canvas = document.createElement('canvas');
        canvas.id = `${prefix}-${layer}-${h}`;
        canvas.setAttribute('role', 'img');
        if (configure) configure(canvas, layer, h);
        row.insertCell().appendChild(canvas);
      }
    }
  }

  window.vitrefExplorers = {base, loadScript, loadOrt, fetchJson, loadModel, fail, softmax, shade, hatch, mapTable};
})();
