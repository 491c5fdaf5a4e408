// The demo page: translate, list the n-best hypotheses, and plot the
// cross-attention of the chosen one. Plain DOM and canvas, nothing loaded
// from elsewhere, so the page works on a machine without a network.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { info: null, source: "", weights: null, panels: [] };

// Viridis, sampled at 9 points; linear in between.
const VIRIDIS = [
  [68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141],
  [39, 173, 129], [92, 200, 99], [170, 220, 50], [253, 231, 37],
];

function colour(value) {
  const x = Math.min(Math.max(value, 0), 1) * (VIRIDIS.length - 1);
  const i = Math.min(Math.floor(x), VIRIDIS.length - 2);
  const t = x - i;
  const [a, b] = [VIRIDIS[i], VIRIDIS[i + 1]];
  return `rgb(${a.map((v, k) => Math.round(v + t * (b[k] - v))).join(",")})`;
}

async function call(path, body) {
  const response = await fetch(path, {
    method: body === undefined ? "GET" : "POST",
    headers: { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await response.json();
  if (!response.ok) {
    const error = data.error || {};
    const where = error.field ? `${error.field}: ` : "";
    throw new Error(`${response.status} ${where}${error.message || response.statusText}`);
  }
  return data;
}

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

async function loadInfo() {
  const info = await call("/v1/info");
  state.info = info;
  const model = info.model || {};
  const parts = [`${info.engine} engine`];
  if (model.layers) {
    parts.push(`${model.layers.join("+")} layers, d_model ${model.d_model}, ${model.heads} heads`);
  }
  parts.push(`${info.tokenizer.kind} vocabulary of ${info.tokenizer.vocab_size}`);
  parts.push(`score: ${info.score}`);
  $("model-line").textContent = parts.join(" · ");
  $("beam-size").max = info.limits.max_beam_size;
  $("beam-size").value = info.settings.beam_size;
  $("alpha").value = info.settings.alpha;
  $("source").maxLength = info.limits.max_text_chars;
}

async function translate() {
  const source = $("source").value;
  if (!source.trim()) {
    showError("Type a sentence first.");
    return;
  }
  showError("");
  $("translate").disabled = true;
  const start = performance.now();
  try {
    const answer = await call("/v1/translate", {
      texts: [source],
      beam_size: Number($("beam-size").value),
      alpha: Number($("alpha").value),
    });
    const total = performance.now() - start;
    $("time").textContent =
      `${Math.round(total)} ms (server ${Math.round(answer.milliseconds)} ms)`;
    state.source = source;
    showTranslation(answer.translations[0]);
  } catch (error) {
    showError(error.message);
  } finally {
    $("translate").disabled = false;
  }
}

function showTranslation(result) {
  $("result").hidden = false;
  $("translation").textContent = result.translation;
  const list = $("nbest");
  list.replaceChildren();
  result.n_best.forEach((hypothesis, index) => {
    const item = document.createElement("li");
    item.dataset.index = index;
    const text = document.createElement("span");
    text.className = "hypothesis";
    text.textContent = hypothesis.translation || "(empty)";
    const score = document.createElement("span");
    score.className = "score";
    score.textContent = hypothesis.score.toFixed(3);
    item.append(text, score);
    item.addEventListener("click", () => choose(result.n_best, index));
    list.append(item);
  });
  choose(result.n_best, 0);
}

async function choose(nbest, index) {
  for (const item of $("nbest").children) {
    item.classList.toggle("chosen", Number(item.dataset.index) === index);
  }
  if (!state.info.attention) {
    $("attention").hidden = false;
    $("attention-note").hidden = false;
    $("attention-note").textContent =
      `Attention plots need --engine keras; this server runs ${state.info.engine}.`;
    return;
  }
  try {
    state.weights = await call("/v1/attention", {
      source: state.source,
      translation: nbest[index].translation,
    });
    fillSelectors();
    draw();
  } catch (error) {
    showError(error.message);
  }
}

function fillSelectors() {
  const layers = state.weights.cross_attention.length;
  const heads = state.weights.cross_attention[0].length;
  const options = (select, count, extra) => {
    const kept = select.value;
    select.replaceChildren();
    for (let i = 0; i < count; i++) select.add(new Option(String(i + 1), String(i)));
    if (extra) select.add(new Option(extra, "all"));
    if ([...select.options].some((o) => o.value === kept)) select.value = kept;
  };
  const first = $("layer").options.length === 0;
  options($("layer"), layers);
  options($("head"), heads, "all heads");
  if (first) $("layer").value = String(layers - 1);  // The last layer first.
  $("attention").hidden = false;
}

function draw() {
  const weights = state.weights;
  const layer = weights.cross_attention[Number($("layer").value)];
  const heads = $("head").value === "all" ? layer.map((_, h) => h) : [Number($("head").value)];
  const cell = heads.length > 1 ? 14 : 26;
  const font = heads.length > 1 ? 10 : 12;
  const canvas = $("heatmap");
  const context = canvas.getContext("2d");
  context.font = `${font}px sans-serif`;
  const widest = (tokens) => Math.max(...tokens.map((t) => context.measureText(t).width));
  const left = widest(weights.target_tokens) + 10;
  const top = widest(weights.source_tokens) * 0.75 + 26;
  const width = weights.source_tokens.length * cell;
  const height = weights.target_tokens.length * cell;
  const gap = 24;
  const scale = window.devicePixelRatio || 1;
  const cssWidth = heads.length * (left + width + gap);
  const cssHeight = top + height + 10;
  canvas.width = cssWidth * scale;
  canvas.height = cssHeight * scale;
  canvas.style.width = `${cssWidth}px`;
  canvas.style.height = `${cssHeight}px`;
  context.setTransform(scale, 0, 0, scale, 0, 0);
  context.fillStyle = "#fff";
  context.fillRect(0, 0, cssWidth, cssHeight);
  state.panels = [];
  heads.forEach((head, panel) => {
    const x0 = panel * (left + width + gap) + left;
    drawPanel(context, layer[head], x0, top, cell, font, head);
    state.panels.push({ x0, y0: top, cell, head });
  });
  // What the picture shows, for screen readers (and the browser test).
  canvas.setAttribute("aria-label",
    `Cross-attention, layer ${Number($("layer").value) + 1}, ` +
    `${heads.length > 1 ? "all heads" : `head ${heads[0] + 1}`}. ` +
    `Rows: ${weights.target_tokens.join(" ")}. Columns: ${weights.source_tokens.join(" ")}.`);
  canvas.dataset.heads = String(heads.length);
  canvas.dataset.rendered = "true";
}

function drawPanel(context, matrix, x0, y0, cell, font, head) {
  const { source_tokens: source, target_tokens: target } = state.weights;
  // Each panel spans its own range: a diffuse head would be all dark on 0-1.
  const peak = Math.max(...matrix.flat(), 1e-6);
  matrix.forEach((row, i) => row.forEach((value, j) => {
    context.fillStyle = colour(value / peak);
    context.fillRect(x0 + j * cell, y0 + i * cell, cell, cell);
  }));
  context.fillStyle = "#1d2330";
  context.font = `${font}px sans-serif`;
  context.textAlign = "right";
  context.textBaseline = "middle";
  target.forEach((token, i) => context.fillText(token, x0 - 4, y0 + (i + 0.5) * cell));
  source.forEach((token, j) => {
    context.save();
    context.translate(x0 + (j + 0.5) * cell, y0 - 4);
    context.rotate(-Math.PI / 4);
    context.textAlign = "left";
    context.fillText(token, 0, 0);
    context.restore();
  });
  context.textAlign = "left";
  const name = `layer ${Number($("layer").value) + 1}, head ${head + 1}`;
  context.fillText(`${name} (brightest: ${peak.toFixed(2)})`, x0, 10);
}

function describeCell(event) {
  if (!state.weights) return;
  const box = $("heatmap").getBoundingClientRect();
  const [x, y] = [event.clientX - box.left, event.clientY - box.top];
  const layer = state.weights.cross_attention[Number($("layer").value)];
  for (const panel of state.panels) {
    const j = Math.floor((x - panel.x0) / panel.cell);
    const i = Math.floor((y - panel.y0) / panel.cell);
    const row = layer[panel.head][i];
    if (row !== undefined && j >= 0 && j < row.length) {
      const { source_tokens: source, target_tokens: target } = state.weights;
      $("cell").textContent =
        `head ${panel.head + 1}: ${target[i]} ← ${source[j]}: ${row[j].toFixed(3)}`;
      return;
    }
  }
  $("cell").textContent = "";
}

$("translate").addEventListener("click", translate);
$("source").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) translate();
});
$("layer").addEventListener("change", draw);
$("head").addEventListener("change", draw);
$("heatmap").addEventListener("mousemove", describeCell);
loadInfo().catch((error) => showError(`Cannot reach the server: ${error.message}`));
