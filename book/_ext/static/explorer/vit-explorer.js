// The live ViT of chapter 7 (book/07b_what_vit_learns.ipynb): the model the build trained, exported
// to ONNX by vitref.explorer, run in the reader's browser with onnxruntime-web (WebAssembly, one
// thread). Every file comes from this script's own folder: ort.wasm.min.js, its .mjs and .wasm,
// vit.onnx and explorer.json (test images, class names, PyTorch's prediction for the first image).
// If WebAssembly or a file cannot load, one sentence says so and the page's static figures remain.
// The loading, the softmax and the colour scale are common.js's (window.vitrefExplorers), loaded first.
(() => {
  'use strict';
  const root = document.getElementById('vit-explorer');
  const shared = window.vitrefExplorers;
  if (!root || !shared) return;
  const {softmax, shade} = shared;
  const $ = id => document.getElementById('vit-explorer-' + id);
  const api = window.vitExplorer = {lastUpdateMs: null, updates: 0};

  // cursor: the patch cursor (occlude mode); pen: the pixel cursor (draw mode), both row * side + column
  const state = {data: null, session: null, pixels: null, occluded: new Set(), cursor: 0, pen: 0, drawing: false,
                 probabilities: null, attention: null, rollout: null};

  const fail = error => shared.fail($('status'), $('panel'), api, error);

  // ---------------------------------------------------------------- the model

  function inputTensor() {
    const {size, patch, grid} = state.data;
    const values = new Float32Array(size * size);
    for (let i = 0; i < values.length; i++) {
      const cell = Math.floor(Math.floor(i / size) / patch) * grid + Math.floor((i % size) / patch);
      values[i] = state.occluded.has(cell) ? 0 : state.pixels[i] / 255;   // occluded: black, the background
    }
    return new ort.Tensor('float32', values, [1, 1, size, size]);
  }

  // Attention rollout as vitref.viz.attention_rollout computes it (head_fusion='mean', residual=True):
  // per block, average the heads, add the identity, renormalise each row to sum 1, and multiply,
  // R = A_L ... A_1 (bottom block first). Returns the class token's row over the patches.
  // The browser test compares it with vitref.viz.rollout_map's value for the first test image.
  function rollout(attention, depth, heads, tokens) {
    let result = identity(tokens);
    for (let layer = 0; layer < depth; layer++) {
      const fused = new Float64Array(tokens * tokens);
      for (let h = 0; h < heads; h++) {
        const offset = (layer * heads + h) * tokens * tokens;
        for (let k = 0; k < tokens * tokens; k++) fused[k] += attention[offset + k] / heads;
      }
      for (let i = 0; i < tokens; i++) {
        fused[i * tokens + i] += 1;
        let sum = 0;
        for (let j = 0; j < tokens; j++) sum += fused[i * tokens + j];
        for (let j = 0; j < tokens; j++) fused[i * tokens + j] /= sum;
      }
      result = matmul(fused, result, tokens);
    }
    return Array.from(result.slice(1, tokens));              // class token's row, without itself
  }

  function identity(n) {
    const m = new Float64Array(n * n);
    for (let i = 0; i < n; i++) m[i * n + i] = 1;
    return m;
  }

  function matmul(a, b, n) {
    const out = new Float64Array(n * n);
    for (let i = 0; i < n; i++)
      for (let k = 0; k < n; k++) {
        const v = a[i * n + k];
        for (let j = 0; j < n; j++) out[i * n + j] += v * b[k * n + j];
      }
    return out;
  }

  async function update() {
    const started = performance.now();
    const {depth, heads, grid, classes} = state.data;
    const tokens = grid * grid + 1;
    const outputs = await state.session.run({pixels: inputTensor()});
    state.probabilities = softmax(outputs.logits.data);
    state.attention = outputs.attention.data;                // (1, depth, heads, tokens, tokens)
    state.rollout = rollout(state.attention, depth, heads, tokens);
    drawImage();
    drawMaps(depth, heads, grid, tokens);
    const order = state.probabilities.map((p, c) => [p, c]).sort((a, b) => b[0] - a[0]);
    $('top').replaceChildren(...order.slice(0, 3).map(([p, c]) => {
      const item = document.createElement('li');
      item.textContent = `${classes[c]}: ${(100 * p).toFixed(1)}%`;
      return item;
    }));
    const count = state.occluded.size;
    $('live').textContent = `Predicted: ${classes[order[0][1]]} (${(100 * order[0][0]).toFixed(0)}%)` +
        (count ? `, with ${count} patch${count > 1 ? 'es' : ''} occluded.` : '.');
    api.lastUpdateMs = performance.now() - started;
    api.updates += 1;
    $('timing').textContent = `Last update: ${api.lastUpdateMs.toFixed(0)} ms (the model, the rollout and the maps).`;
  }

  // ---------------------------------------------------------------- drawing

  // Each map from its smallest weight (light) to its largest (dark): shared.shade reads the same in greyscale.
  function drawPatchMap(canvas, values, grid) {
    const context = canvas.getContext('2d');
    const cell = canvas.width / grid;
    const low = Math.min(...values), range = (Math.max(...values) - low) || 1;
    values.forEach((v, p) => {                               // one flat square per patch: nothing is smoothed
      context.fillStyle = shade((v - low) / range);
      context.fillRect((p % grid) * cell, Math.floor(p / grid) * cell, cell, cell);
    });
    state.occluded.forEach(p => {
      context.strokeStyle = '#d00';
      context.lineWidth = 2;
      const x = (p % grid) * cell, y = Math.floor(p / grid) * cell;
      context.beginPath(); context.moveTo(x + 2, y + 2); context.lineTo(x + cell - 2, y + cell - 2); context.stroke();
    });
    const strongest = values.indexOf(Math.max(...values));
    canvas.setAttribute('aria-label', canvas.dataset.name + `: most weight (${(100 * values[strongest]).toFixed(0)}%) ` +
        `on the patch in row ${Math.floor(strongest / grid) + 1}, column ${(strongest % grid) + 1}`);
  }

  function drawMaps(depth, heads, grid, tokens) {
    for (let layer = 0; layer < depth; layer++)
      for (let h = 0; h < heads; h++) {
        const row = ((layer * heads + h) * tokens) * tokens;   // the class token's row
        const values = Array.from(state.attention.slice(row + 1, row + tokens));
        drawPatchMap($(`map-${layer}-${h}`), values, grid);
      }
    drawPatchMap($('rollout'), state.rollout, grid);
  }

  function drawImage() {
    const {size, patch, grid} = state.data;
    const canvas = $('image'), context = canvas.getContext('2d');
    const scale = canvas.width / size;
    for (let i = 0; i < size * size; i++) {
      const v = state.pixels[i];
      context.fillStyle = `rgb(${v},${v},${v})`;
      context.fillRect((i % size) * scale, Math.floor(i / size) * scale, scale, scale);
    }
    const cell = patch * scale;
    state.occluded.forEach(p => {                            // occluded patches: black, crossed out
      const x = (p % grid) * cell, y = Math.floor(p / grid) * cell;
      context.fillStyle = '#000';
      context.fillRect(x, y, cell, cell);
      context.strokeStyle = '#888';
      context.beginPath(); context.moveTo(x, y); context.lineTo(x + cell, y + cell);
      context.moveTo(x + cell, y); context.lineTo(x, y + cell); context.stroke();
    });
    if ($('draw').checked) {                                 // draw mode: the pixel cursor
      const x = (state.pen % size) * scale, y = Math.floor(state.pen / size) * scale;
      outline(context, x - 1, y - 1, scale + 2, [3, 2]);
      const ink = state.pixels[state.pen] > 127;
      $('cursor').textContent = `Pen: row ${Math.floor(state.pen / size) + 1}, column ${(state.pen % size) + 1} ` +
          `of ${size} (${ink ? 'ink: Space erases' : 'blank: Space paints'}).`;
      return;
    }
    const cx = (state.cursor % grid) * cell, cy = Math.floor(state.cursor / grid) * cell;
    outline(context, cx + 1.5, cy + 1.5, cell - 3, [6, 4]);
    const row = Math.floor(state.cursor / grid) + 1, column = (state.cursor % grid) + 1;
    $('cursor').textContent = `Patch cursor: row ${row}, column ${column}` +
        (state.occluded.has(state.cursor) ? ' (occluded).' : '.');
  }

  function outline(context, x, y, side, dash) {              // white under orange dashes: seen on any pixel
    context.lineWidth = 3;
    context.strokeStyle = '#fff';
    context.strokeRect(x, y, side, side);
    context.strokeStyle = '#e66100';
    context.setLineDash(dash);
    context.strokeRect(x, y, side, side);
    context.setLineDash([]);
    context.lineWidth = 1;
  }

  // ---------------------------------------------------------------- controls

  function choose(index) {
    state.pixels = Uint8ClampedArray.from(state.data.images[index]);
    state.occluded.clear();
    return update();
  }

  function toggle(cell) {
    if (state.occluded.has(cell)) state.occluded.delete(cell); else state.occluded.add(cell);
    return update();
  }

  function cellAt(event) {
    const {grid} = state.data, box = $('image').getBoundingClientRect();
    const column = Math.floor((event.clientX - box.left) / box.width * grid);
    const row = Math.floor((event.clientY - box.top) / box.height * grid);
    return Math.max(0, Math.min(grid - 1, row)) * grid + Math.max(0, Math.min(grid - 1, column));
  }

  // A round brush of about 2 pixels at (x, y), in pixels: paints ink, or erases it.
  function brush(x, y, erase) {
    const {size} = state.data;
    for (let r = 0; r < size; r++)
      for (let c = 0; c < size; c++) {
        const distance = Math.hypot(c + 0.5 - x, r + 0.5 - y), i = r * size + c;
        if (distance < 2) state.pixels[i] = erase ? 0 : Math.max(state.pixels[i], 255 * (1 - distance / 2.5));
      }
  }

  function paint(event) {
    const {size} = state.data, box = $('image').getBoundingClientRect();
    brush((event.clientX - box.left) / box.width * size, (event.clientY - box.top) / box.height * size, false);
    drawImage();
  }

  // Draw mode by keyboard: the arrows move the pen one pixel, Space paints a brush there (or erases it
  // where there is ink already) and the model runs again.
  function penKey(key) {
    const {size} = state.data;
    const moves = {ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0]};
    if (key in moves) {
      const row = Math.floor(state.pen / size) + moves[key][0], column = (state.pen % size) + moves[key][1];
      if (row >= 0 && row < size && column >= 0 && column < size) state.pen = row * size + column;
      drawImage();
      return null;
    }
    brush((state.pen % size) + 0.5, Math.floor(state.pen / size) + 0.5, state.pixels[state.pen] > 127);
    return update();
  }

  function wire() {
    const {grid} = state.data, canvas = $('image');
    $('choice').addEventListener('change', event => choose(Number(event.target.value)));
    $('clear').addEventListener('click', () => {
      state.pixels = new Uint8ClampedArray(state.data.size * state.data.size);
      state.occluded.clear();
      $('draw').checked = true;
      return update();
    });
    $('restore').addEventListener('click', () => { state.occluded.clear(); return update(); });
    ['draw', 'occlude'].forEach(id => $(id).addEventListener('change', drawImage));
    canvas.addEventListener('keydown', event => {
      const pen = ['ArrowLeft', 'ArrowRight', 'ArrowUp', 'ArrowDown', ' ', 'Enter'].includes(event.key);
      if ($('draw').checked && pen) { event.preventDefault(); penKey(event.key); return; }
      const moves = {ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0]};
      if (event.key in moves) {
        const [dr, dc] = moves[event.key];
        const row = Math.floor(state.cursor / grid) + dr, column = (state.cursor % grid) + dc;
        if (row >= 0 && row < grid && column >= 0 && column < grid) state.cursor = row * grid + column;
        drawImage();
        event.preventDefault();
      } else if (event.key === ' ' || event.key === 'Enter') {
        event.preventDefault();
        toggle(state.cursor);
      }
    });
    canvas.addEventListener('pointerdown', event => {
      if ($('draw').checked) { state.drawing = true; canvas.setPointerCapture(event.pointerId); paint(event); }
      else { state.cursor = cellAt(event); toggle(state.cursor); }
    });
    canvas.addEventListener('pointermove', event => { if (state.drawing) paint(event); });
    const stop = () => { if (state.drawing) { state.drawing = false; update(); } };
    canvas.addEventListener('pointerup', stop);
    canvas.addEventListener('pointercancel', stop);
  }

  function fillChoices() {
    const {images, labels, classes} = state.data;
    $('choice').replaceChildren(...images.map((_, i) => {
      const option = document.createElement('option');
      option.value = String(i);
      option.textContent = `test image ${i + 1}: ${classes[labels[i]]}`;
      return option;
    }));
  }

  function buildMapTable() {
    const {depth, heads} = state.data;
    shared.mapTable($('maps'), depth, heads, 'vit-explorer-map', (canvas, layer, h) => {
      canvas.width = canvas.height = 64;
      canvas.dataset.name = `Block ${layer + 1}, head ${h + 1}`;
    });
  }

  async function start() {
    Object.assign(state, await shared.loadModel('vit.onnx', 'explorer.json'));
    state.pen = (state.data.size >> 1) * state.data.size + (state.data.size >> 1);   // the centre
    fillChoices();
    buildMapTable();
    wire();
    $('status').hidden = true;
    $('panel').hidden = false;
    await choose(0);
  }

  api.state = state;
  api.toggle = toggle;
  api.choose = choose;
  api.ready = start().catch(fail);
})();
