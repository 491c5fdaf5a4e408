// The demo page: translate a sentence or a document, list the n-best
// hypotheses of a sentence, and plot the cross-attention of the chosen one.
// Plain DOM and canvas, nothing loaded from elsewhere, so the page works on
// a machine without a network. A server run with --api-key-file serves
// this page without the key; its API answers 401 until the page sends the
// key, which it asks for and keeps in the tab's sessionStorage.
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  info: null,
  maxChars: 1000,
  documents: false, // Whether the server splits sentences (split_sentences).
  sentences: [], // [{source, translation, score, n_best}] of the last answer.
  selected: 0,
  view: null, // The chosen hypothesis's attention, byte pieces merged.
  panels: [],
  attentionRequest: 0, // Only the latest answer is drawn.
};

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

const number = (n) => n.toLocaleString("en-US");

// --- The API key (--api-key-file) ---

const KEY_STORAGE = "keras-transformer-api-key";

// sessionStorage: this tab only, gone when it closes; never a cookie, so
// no other site's page can make the browser send it.
function storedKey() {
  try {
    return sessionStorage.getItem(KEY_STORAGE) || "";
  } catch {
    return "";  // Storage disabled: the key is asked for again.
  }
}

function storeKey(key) {
  try {
    if (key) sessionStorage.setItem(KEY_STORAGE, key);
    else sessionStorage.removeItem(KEY_STORAGE);
  } catch {
    // Storage disabled: nothing kept.
  }
}

class KeyNeeded extends Error {}

// A 401: show the key field, saying whether a key was missing or refused.
function askForKey(sent) {
  const message = sent
    ? "The server refused this API key (401): paste the key in its " +
      "--api-key-file again."
    : "This server needs an API key (401): paste the key in its --api-key-file.";
  $("key-message").textContent = message;
  $("key-panel").hidden = false;
  $("api-key").focus();
  return new KeyNeeded(`${message.replace(" (401)", "")} See "API key" above.`);
}

async function useKey(event) {
  event.preventDefault();
  const key = $("api-key").value.trim();
  if (!key) {
    $("key-message").textContent = "Paste the key first.";
    return;
  }
  storeKey(key);
  $("api-key").value = "";
  $("key-message").textContent = "";
  showError("");
  await loadInfo().catch(showLoadError);
}

function forgetKey() {
  storeKey("");
  $("api-key").value = "";
  $("key-message").textContent = "";
}

async function call(path, body) {
  const headers = { "Content-Type": "application/json" };
  const key = storedKey();
  if (key) headers.Authorization = `Bearer ${key}`;
  const response = await fetch(path, {
    method: body === undefined ? "GET" : "POST",
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 401) throw askForKey(Boolean(key));
  // A proxy in front may answer an error page that is not JSON.
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = data.error || {};
    const where = error.field ? `${describeField(error.field)}: ` : "";
    throw new Error(`${response.status} ${where}${error.message || response.statusText}`);
  }
  return data;
}

// "texts[0].sentences[2]" is the page's third sentence; keep the path too,
// as the API names it.
function describeField(field) {
  const sentence = /^texts\[0\]\.sentences\[(\d+)\]$/.exec(field);
  return sentence ? `sentence ${Number(sentence[1]) + 1} (${field})` : field;
}

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

// --- The server's description: model line, limits, allowed settings ---

async function loadInfo() {
  const info = await call("/v1/info");
  state.info = info;
  // Accepted: the key field stays for forgetting the key, its message goes.
  $("key-panel").hidden = !storedKey();
  $("key-message").textContent = "";
  $("model-line").textContent = modelLine(info);
  const limits = info.limits || {};
  // An older server has neither split_sentences nor max_document_chars.
  state.documents = limits.max_document_chars !== undefined;
  state.maxChars = limits.max_document_chars || limits.max_text_chars || state.maxChars;
  $("source").maxLength = state.maxChars;
  $("token-limit").textContent = limits.max_text_tokens === undefined ? "" :
    `Each ${state.documents ? "sentence" : "text"} may have at most ` +
    `${number(limits.max_text_tokens)} subword tokens.`;
  updateCounter();
  fillSettings(info);
  for (const element of document.querySelectorAll(".attention-only")) {
    element.hidden = !info.attention;
  }
}

function modelLine(info) {
  const model = info.model || {};
  const parts = [`${info.engine} engine`];
  if (model.layers) {
    parts.push(`${model.layers.join("+")} layers, d_model ${model.d_model}, ${model.heads} heads`);
  }
  parts.push(`${info.tokenizer.kind} vocabulary of ${info.tokenizer.vocab_size}`);
  if (!info.attention) parts.push("no attention plots (--engine keras has them)");
  parts.push(`score: ${info.score}`);
  return parts.join(" · ");
}

// The server refuses any beam size or alpha it did not compile (422), so
// the page offers exactly `allowed`; an older server gave a maximum beam.
function fillSettings(info) {
  const settings = info.settings;
  const allowed = info.allowed || {};
  const maxBeam = (info.limits || {}).max_beam_size || settings.beam_size;
  const beams = allowed.beam_sizes || Array.from({ length: maxBeam }, (_, i) => i + 1);
  const alphas = allowed.alphas || [settings.alpha];
  fillSelect($("beam-size"), beams, settings.beam_size,
    (size) => (size === 1 ? "1 (greedy)" : String(size)));
  fillSelect($("alpha"), alphas, settings.alpha, String);
}

function fillSelect(select, values, preferred, label) {
  select.replaceChildren(...values.map((v) => new Option(label(v), String(v))));
  if (values.includes(preferred)) select.value = String(preferred);
}

// Characters as the server counts them: code points, not UTF-16 units.
function updateCounter() {
  const used = [...$("source").value].length;
  const counter = $("counter");
  counter.textContent = `${number(used)} / ${number(state.maxChars)} characters`;
  counter.classList.toggle("near", used >= 0.9 * state.maxChars && used < state.maxChars);
  counter.classList.toggle("over", used >= state.maxChars);
}

// --- Translating ---

async function translate() {
  if ($("translate").disabled) return;  // One at a time (Ctrl+Enter too).
  const source = $("source").value;
  if (!source.trim()) {
    fail("Type a sentence first.");
    return;
  }
  showError("");
  $("translate").disabled = true;
  const start = performance.now();
  try {
    const answer = await call("/v1/translate", translateBody(source));
    const total = performance.now() - start;
    $("time").textContent =
      `${Math.round(total)} ms (server ${Math.round(answer.milliseconds)} ms)`;
    showTranslation(answer.translations[0], source);
  } catch (error) {
    fail(error.message);
  } finally {
    $("translate").disabled = false;
  }
}

function translateBody(source) {
  const body = {
    texts: [source],
    beam_size: Number($("beam-size").value),
    alpha: Number($("alpha").value),
  };
  if (state.documents) body.split_sentences = true;
  return body;
}

// An old result under a new error would read as the answer to the new text.
function fail(message) {
  clearResult();
  showError(message);
}

function clearResult() {
  state.sentences = [];
  state.view = null;
  state.attentionRequest++;  // An attention answer still on its way is stale.
  $("result").hidden = true;
  $("time").textContent = "";
  $("translation").textContent = "";
  $("sentences").replaceChildren();
  $("nbest").replaceChildren();
  clearAttention();
}

function clearAttention() {
  $("attention").hidden = true;
  $("cell").textContent = "";
  const canvas = $("heatmap");
  delete canvas.dataset.rendered;
  canvas.removeAttribute("aria-label");
}

function showTranslation(result, source) {
  // Without split_sentences (an older server) the text is one sentence.
  state.sentences = result.sentences ||
    [{ source, translation: result.translation, score: result.score, n_best: result.n_best }];
  $("result").hidden = false;
  $("translation").textContent = result.translation;
  showSentences();
  selectSentence(0);
}

function showSentences() {
  const several = state.sentences.length > 1;
  $("sentence-block").hidden = !several;
  const items = several ? state.sentences.map(sentenceItem) : [];
  $("sentences").replaceChildren(...items);
}

function sentenceItem(sentence, index) {
  const item = document.createElement("li");
  item.dataset.index = index;
  const source = document.createElement("span");
  source.className = "sentence-source";
  source.textContent = sentence.source;
  const arrow = document.createElement("span");
  arrow.className = "arrow";
  arrow.textContent = "→";
  arrow.setAttribute("aria-hidden", "true");
  const translation = document.createElement("span");
  translation.className = "sentence-translation";
  translation.lang = "de";
  translation.textContent = sentence.translation || "(empty)";
  item.append(source, arrow, translation);
  item.addEventListener("click", () => selectSentence(index));
  return item;
}

function selectSentence(index) {
  state.selected = index;
  markChosen($("sentences"), index);
  const sentence = state.sentences[index] || { n_best: [] };  // A text of no sentence.
  $("nbest-heading").textContent = state.sentences.length > 1
    ? `N-best hypotheses of sentence ${index + 1}` : "N-best hypotheses";
  const list = $("nbest");
  list.replaceChildren(...sentence.n_best.map(hypothesisItem));
  if (sentence.n_best.length) choose(0);
  else clearAttention();
}

function hypothesisItem(hypothesis, index) {
  const item = document.createElement("li");
  item.dataset.index = index;
  const text = document.createElement("span");
  text.className = "hypothesis";
  text.textContent = hypothesis.translation || "(empty)";
  const score = document.createElement("span");
  score.className = "score";
  score.textContent = hypothesis.score.toFixed(3);
  item.append(text, score);
  item.addEventListener("click", () => choose(index));
  return item;
}

function markChosen(list, index) {
  for (const item of list.children) {
    item.classList.toggle("chosen", Number(item.dataset.index) === index);
  }
}

async function choose(index) {
  markChosen($("nbest"), index);
  if (!state.info.attention) return;  // CTranslate2 and SavedModel: none to plot.
  const sentence = state.sentences[state.selected];
  const request = ++state.attentionRequest;
  delete $("heatmap").dataset.rendered;  // Until this hypothesis's plot is drawn.
  try {
    const weights = await call("/v1/attention", {
      source: sentence.source,
      translation: sentence.n_best[index].translation,
    });
    if (request !== state.attentionRequest) return;
    state.view = mergedView(weights);
    fillSelectors();
    draw();
  } catch (error) {
    if (request !== state.attentionRequest) return;
    clearAttention();
    showError(error.message);
  }
}

// --- Byte-fallback pieces ---
// SentencePiece spells a character missing from its vocabulary as the
// pieces of its UTF-8 bytes (<0xF0> <0x9F> <0x9A> <0xB2>). The plot shows
// the character once: its source columns summed (each row still sums to 1),
// its target rows averaged (one row for one character produced).

const BYTE_PIECE = /^<0x([0-9A-Fa-f]{2})>$/;

function bytePiece(token) {
  const match = BYTE_PIECE.exec(token);
  return match ? parseInt(match[1], 16) : null;
}

// How many bytes a UTF-8 sequence starting with `byte` has (1: taken alone,
// a continuation byte or an invalid lead shows as U+FFFD).
function sequenceLength(byte) {
  if (byte >= 0xc2 && byte <= 0xdf) return 2;
  if (byte >= 0xe0 && byte <= 0xef) return 3;
  if (byte >= 0xf0 && byte <= 0xf4) return 4;
  return 1;
}

const isContinuation = (byte) => byte !== null && byte >= 0x80 && byte <= 0xbf;

// [{label, start, end}]: runs of tokens shown as one label, in order. An
// incomplete or invalid sequence is one U+FFFD, as TextDecoder shows it.
function mergeBytePieces(tokens) {
  const groups = [];
  let start = 0;
  while (start < tokens.length) {
    const byte = bytePiece(tokens[start]);
    let end = start + 1;
    if (byte !== null) {
      const wanted = sequenceLength(byte);
      while (end - start < wanted && isContinuation(bytePiece(tokens[end]))) end++;
    }
    const label = byte === null ? tokens[start] : spell(tokens.slice(start, end));
    groups.push({ label, start, end });
    start = end;
  }
  return groups;
}

function spell(pieces) {
  const bytes = new Uint8Array(pieces.map(bytePiece));
  let text;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    return "\uFFFD";
  }
  // A control character (a byte-fallback newline) would draw as nothing.
  return /^\p{Cc}$/u.test(text) ? pieces.join("") : text;
}

function mergeColumns(row, groups) {
  return groups.map((g) => row.slice(g.start, g.end).reduce((a, b) => a + b, 0));
}

function mergeRows(matrix, groups) {
  return groups.map((g) => {
    const rows = matrix.slice(g.start, g.end);
    return rows[0].map((_, j) => rows.reduce((sum, row) => sum + row[j], 0) / rows.length);
  });
}

function mergedView(weights) {
  const sourceGroups = mergeBytePieces(weights.source_tokens);
  const targetGroups = mergeBytePieces(weights.target_tokens);
  return {
    sourceTokens: sourceGroups.map((g) => g.label),
    targetTokens: targetGroups.map((g) => g.label),
    rawTokens: { source: weights.source_tokens, target: weights.target_tokens },
    attention: weights.cross_attention.map((layer) => layer.map((matrix) =>
      mergeRows(matrix, targetGroups).map((row) => mergeColumns(row, sourceGroups)))),
  };
}

// --- The heatmap ---

function fillSelectors() {
  const layers = state.view.attention.length;
  const heads = state.view.attention[0].length;
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
  const view = state.view;
  if (!view) return;
  const layer = view.attention[Number($("layer").value)];
  const heads = $("head").value === "all" ? layer.map((_, h) => h) : [Number($("head").value)];
  const cell = heads.length > 1 ? 14 : 26;
  const font = heads.length > 1 ? 10 : 12;
  const canvas = $("heatmap");
  const context = canvas.getContext("2d");
  context.font = `${font}px sans-serif`;
  const widest = (tokens) => Math.max(...tokens.map((t) => context.measureText(t).width));
  const left = widest(view.targetTokens) + 10;
  const top = widest(view.sourceTokens) * 0.75 + 26;
  const width = view.sourceTokens.length * cell;
  const height = view.targetTokens.length * cell;
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
  describeCanvas(canvas, heads);
}

// What the picture shows, for screen readers (and the browser test); the
// raw pieces stay in data-tokens.
function describeCanvas(canvas, heads) {
  const view = state.view;
  canvas.setAttribute("aria-label",
    `Cross-attention, layer ${Number($("layer").value) + 1}, ` +
    `${heads.length > 1 ? "all heads" : `head ${heads[0] + 1}`}. ` +
    `Rows: ${view.targetTokens.join(" ")}. Columns: ${view.sourceTokens.join(" ")}.`);
  canvas.dataset.tokens = JSON.stringify(view.rawTokens);
  canvas.dataset.heads = String(heads.length);
  canvas.dataset.rendered = "true";
}

function drawPanel(context, matrix, x0, y0, cell, font, head) {
  const { sourceTokens: source, targetTokens: target } = state.view;
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
  if (!state.view) return;
  const box = $("heatmap").getBoundingClientRect();
  const [x, y] = [event.clientX - box.left, event.clientY - box.top];
  const layer = state.view.attention[Number($("layer").value)];
  for (const panel of state.panels) {
    const j = Math.floor((x - panel.x0) / panel.cell);
    const i = Math.floor((y - panel.y0) / panel.cell);
    const row = layer[panel.head][i];
    if (row !== undefined && j >= 0 && j < row.length) {
      const { sourceTokens: source, targetTokens: target } = state.view;
      $("cell").textContent =
        `head ${panel.head + 1}: ${target[i]} ← ${source[j]}: ${row[j].toFixed(3)}`;
      return;
    }
  }
  $("cell").textContent = "";
}

function showLoadError(error) {
  if (error instanceof KeyNeeded) {
    $("model-line").textContent = "Waiting for the API key…";
    showError(error.message);
  } else {
    showError(`Cannot reach the server: ${error.message}`);
  }
}

$("key-form").addEventListener("submit", useKey);
$("key-forget").addEventListener("click", forgetKey);
$("translate").addEventListener("click", translate);
$("source").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) translate();
});
$("source").addEventListener("input", updateCounter);
$("layer").addEventListener("change", draw);
$("head").addEventListener("change", draw);
$("heatmap").addEventListener("mousemove", describeCell);
updateCounter();
loadInfo().catch(showLoadError);
