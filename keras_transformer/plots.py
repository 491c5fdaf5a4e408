"""Figures for the notebooks and the run directory, as matplotlib Figures.

Each function returns a matplotlib `Figure` (built without pyplot, so
nothing global changes and nothing opens a window; in a notebook the figure
shows as a cell's value, and `figure.savefig(path)` writes it to a file).

- `positional_encoding`: the §3.5 sinusoid matrix.
- `attention_mask`: a (query, key) mask, True = may attend.
- `learning_rate_schedule`: the §5.3 warmup schedule.
- `learning_rates`: several schedules compared (a fine-tune's choices).
- `token_lengths`: histogram of source and target lengths in tokens.
- `attention_heads`: every layer and head of one attention kind.
- `training_curves`: loss (and dev BLEU) against the optimizer step.
- `bar_chart`: one value per variant (the ablation table).
- `constituency_tree`: a parse tree, words at the bottom (Table 4).
- `architecture`: the paper's Figure 1, drawn from a model's own layers.
- `serving_pipeline`: a request's way through `keras-transformer serve`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch
from matplotlib.path import Path

if TYPE_CHECKING:
    import keras


def positional_encoding(length: int = 64, depth: int = 128) -> Figure:
    """PE(pos, i) for positions 0..length-1 and dimensions 0..depth-1."""
    from keras import ops

    from keras_transformer.layers import sinusoidal_table

    table = ops.convert_to_numpy(sinusoidal_table(np.arange(length), depth))
    figure = Figure(figsize=(7, 3.5))
    axis = figure.add_subplot()
    image = axis.pcolormesh(table.T, cmap="RdBu", vmin=-1, vmax=1)
    axis.set_xlabel("position")
    axis.set_ylabel("dimension (even: sin, odd: cos)")
    axis.set_title("Sinusoidal positional encoding (§3.5)")
    figure.colorbar(image, ax=axis)
    figure.tight_layout()
    return figure


def attention_mask(
    mask,
    *,
    title: str,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
) -> Figure:
    """A (query, key) boolean mask: dark = may attend."""
    mask = np.asarray(mask, bool)
    if mask.ndim != 2:
        raise ValueError(f"mask must be 2-D (query, key). Received shape {mask.shape}")
    figure = Figure(figsize=(0.3 * mask.shape[1] + 2, 0.3 * mask.shape[0] + 1.5))
    axis = figure.add_subplot()
    axis.imshow(mask, cmap="Greys", vmin=0, vmax=1)
    _label_axes(axis, query_labels, key_labels)
    axis.set_xlabel("key")
    axis.set_ylabel("query")
    axis.set_title(title)
    figure.tight_layout()
    return figure


def learning_rate_schedule(
    d_model: int, warmup_steps: int, steps: int, *, scale: float = 1.0
) -> Figure:
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)."""
    from keras import ops

    from keras_transformer.schedules import TransformerSchedule

    schedule = TransformerSchedule(d_model, warmup_steps, scale=scale)
    x = np.arange(1, steps + 1)
    # The schedule takes Keras's 0-based iteration count: update u is u - 1.
    rates = ops.convert_to_numpy(schedule(ops.convert_to_tensor(x - 1, "float32")))
    figure = Figure(figsize=(6, 3.5))
    axis = figure.add_subplot()
    axis.plot(x, rates)
    axis.axvline(warmup_steps, color="grey", linestyle=":", label="warmup_steps")
    axis.set_xlabel("optimizer update")
    axis.set_ylabel("learning rate")
    axis.set_title(f"Warmup schedule (§5.3), d_model={d_model}")
    axis.legend()
    figure.tight_layout()
    return figure


def learning_rates(
    schedules: Mapping[str, object], steps: int, *, title: str
) -> Figure:
    """Several learning-rate schedules (name -> a Keras `LearningRateSchedule`,
    called with the 0-based iteration) over updates 1..steps."""
    from keras import ops

    x = np.arange(1, steps + 1)
    iterations = ops.convert_to_tensor(x - 1, "float32")
    figure = Figure(figsize=(6, 3.5))
    axis = figure.add_subplot()
    for name, schedule in schedules.items():
        axis.plot(x, ops.convert_to_numpy(schedule(iterations)), label=name)
    axis.set_xlabel("optimizer update")
    axis.set_ylabel("learning rate")
    axis.set_yscale("log")
    axis.set_title(title)
    axis.legend()
    figure.tight_layout()
    return figure


def token_lengths(
    source_lengths: Sequence[int], target_lengths: Sequence[int], *, bins: int = 40
) -> Figure:
    """Histograms of source and target lengths in subword tokens."""
    figure = Figure(figsize=(7, 3.5))
    axis = figure.add_subplot()
    top = max([*source_lengths, *target_lengths, 1])
    edges = np.linspace(0, top + 1, bins + 1)
    axis.hist(source_lengths, bins=edges, alpha=0.6, label="source")
    axis.hist(target_lengths, bins=edges, alpha=0.6, label="target")
    axis.set_xlabel("tokens per sentence")
    axis.set_ylabel("sentences")
    axis.set_title("Sentence lengths in subword tokens")
    axis.legend()
    figure.tight_layout()
    return figure


def attention_heads(
    weights: Sequence,
    *,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    title: str,
) -> Figure:
    """One row per layer, one column per head.

    Args:
        weights: one (heads, query, key) array per layer.
        query_tokens, key_tokens: labels of the query and key positions.
        title: the figure's title.
    """
    layers = [np.asarray(w, np.float32) for w in weights]
    if not layers or any(w.ndim != 3 for w in layers):
        raise ValueError("weights must be a non-empty list of (heads, query, key).")
    heads = layers[0].shape[0]
    cell = 0.22 * max(len(key_tokens), len(query_tokens)) + 1
    figure = Figure(figsize=(cell * heads, cell * len(layers) + 0.6))
    grid = figure.subplots(len(layers), heads, squeeze=False)
    for layer, (row, layer_weights) in enumerate(zip(grid, layers)):
        for head, axis in enumerate(row):
            axis.imshow(layer_weights[head], cmap="viridis", vmin=0)
            _label_axes(axis, query_tokens, key_tokens, fontsize=6)
            axis.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=8)
    figure.suptitle(title)
    figure.tight_layout()
    return figure


def training_curves(history: Mapping[str, Sequence], dev_bleu=None) -> Figure:
    """Loss per token against the update; dev BLEU on a second axis.

    Args:
        history: the run's history.json: "step" and "loss", "val_loss", ...
        dev_bleu: optional list of {"step", "dev_bleu"} records (the run's
            dev_bleu.jsonl).
    """
    figure = Figure(figsize=(6.5, 4))
    axis = figure.add_subplot()
    steps = history.get("step") or list(range(1, len(history.get("loss", [])) + 1))
    for key in ("loss", "val_loss"):
        values = history.get(key)
        if values:
            axis.plot(steps[: len(values)], values, marker=".", label=key)
    axis.set_xlabel("optimizer update")
    axis.set_ylabel("cross-entropy per token")
    lines, labels = axis.get_legend_handles_labels()
    if dev_bleu:
        bleu_axis = axis.twinx()
        bleu_axis.plot(
            [r["step"] for r in dev_bleu],
            [r["dev_bleu"] for r in dev_bleu],
            color="tab:green",
            marker="o",
            label="dev BLEU",
        )
        bleu_axis.set_ylabel("dev BLEU")
        more_lines, more_labels = bleu_axis.get_legend_handles_labels()
        lines, labels = lines + more_lines, labels + more_labels
    if lines:
        axis.legend(lines, labels, loc="center right")
    axis.set_title("Training")
    figure.tight_layout()
    return figure


def bar_chart(values: Mapping[str, float], *, ylabel: str, title: str) -> Figure:
    """One bar per variant, labelled with its value."""
    figure = Figure(figsize=(max(4, 0.8 * len(values) + 2), 3.5))
    axis = figure.add_subplot()
    names = list(values)
    bars = axis.bar(names, [values[name] for name in names])
    axis.bar_label(bars, fmt="%.1f", fontsize=8)
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    axis.tick_params(axis="x", labelrotation=45)
    figure.tight_layout()
    return figure


def constituency_tree(tree, *, title: str | None = None) -> Figure:
    """`tree` (a `parsing.tree.Tree`) drawn top-down: each label centred
    over its children, the words on the bottom row in sentence order."""
    words = tree.words()
    depth = _tree_depth(tree)
    figure = Figure(figsize=(max(4.0, 0.75 * len(words)), 0.55 * depth + 1))
    axis = figure.add_subplot()
    _place(tree, 0, depth, iter(range(len(words))), axis)
    axis.set_xlim(-0.7, max(len(words), 1) - 0.3)
    axis.set_ylim(-0.6, depth + 0.4)
    axis.axis("off")
    if title:
        axis.set_title(title)
    figure.tight_layout()
    return figure


def _tree_depth(node) -> int:
    """Rows of labels above the words (a preterminal counts one)."""
    if isinstance(node, str):
        return 0
    return 1 + max((_tree_depth(child) for child in node.children), default=0)


def _place(node, level: int, depth: int, word_slots, axis) -> float:
    """Draw `node` at row `level` (0 = top); return its x (words: slots)."""
    if isinstance(node, str):
        x = float(next(word_slots))
        axis.text(x, 0, node, ha="center", va="center", fontsize=9, style="italic")
        return x
    y = depth - level
    xs = [_place(child, level + 1, depth, word_slots, axis) for child in node.children]
    x = sum(xs) / len(xs) if xs else 0.0
    for child, child_x in zip(node.children, xs):
        child_y = 0 if isinstance(child, str) else depth - level - 1
        axis.plot([x, child_x], [y - 0.18, child_y + 0.18], color="0.55", lw=0.8)
    axis.text(x, y, node.label, ha="center", va="center", fontsize=9, weight="bold")
    return x


def _label_axes(axis, query_labels, key_labels, fontsize: int = 8) -> None:
    if key_labels is not None:
        axis.set_xticks(range(len(key_labels)))
        axis.set_xticklabels(key_labels, rotation=90, fontsize=fontsize)
    if query_labels is not None:
        axis.set_yticks(range(len(query_labels)))
        axis.set_yticklabels(query_labels, fontsize=fontsize)


# The diagrams below are drawn in inches: the axes fill the figure and one
# data unit is one inch, so circles stay round and the room between boxes
# does not depend on how tall the model makes the figure.
_FONT = 9.5
_GAP = 0.3  # Between two stacked boxes: room for the arrow joining them.
_BOX_HEIGHT = 0.5  # Two lines of text.
_ADD_RADIUS = 0.13
# One colour per kind of layer, near Figure 1's, the same in both stacks.
_COLOURS = {
    "embedding": "#f6cbc2",
    "plain": "#ececec",
    "attention": "#fbd6a8",
    "norm": "#f3eea2",
    "feed_forward": "#c2e1f4",
    "projection": "#dacff0",
    "softmax": "#c8e7bf",
    "region": "#f7f7f7",
}


def architecture(model: keras.Model) -> Figure:
    """The paper's Figure 1 drawn from `model`, a `keras_transformer.model.
    Transformer`: every box names the model's attribute and its class.

    The encoder stack on the left (inputs, `ScaledEmbedding`, the positions
    added, dropout, then N blocks of self-attention and feed-forward), the
    decoder stack on the right (shifted outputs, its embedding, positions,
    N blocks of masked self-attention, cross-attention on the encoder's
    output and feed-forward), then the output projection and the softmax.
    Residual connections run beside each sub-layer, and the norms stand
    where this model applies them: after each sum (post-norm, the paper's)
    or before each sub-layer with a final norm per stack (`norm_first`).
    The last lines give N, d_model, d_ff, h, the activation and dropout.
    """
    parts = getattr(model, "_parts", None)
    if parts is None or not getattr(parts, "encoder_blocks", None):
        raise TypeError(
            "architecture() draws a keras_transformer Transformer "
            f"(build_transformer). Received: {type(model).__name__}"
        )
    config = model.config
    # One block stands for all N: they are built from the same arguments.
    encoder, decoder = parts.encoder_blocks[0], parts.decoder_blocks[0]
    heads = encoder.self_attention.num_heads
    window = (
        f", window r = {config.attention_window}" if config.attention_window else ""
    )
    figure, axis = _diagram()
    width, box = 10.4, 3.6
    left = _Stack(axis, x=1.2 + box / 2, width=box, side=-1, bottom=0.9)
    right = _Stack(axis, x=width - 1.2 - box / 2, width=box, side=1, bottom=0.9)
    _embedded(left, parts, "source", "Inputs\nsource_ids (B, S)")
    _embedded(right, parts, "target", "Outputs (shifted right)\ntarget_ids (B, T)")

    left.open_block()
    details = f"h = {heads}, {_head_sizes(encoder.self_attention)}{window}"
    _sublayer(left, encoder, "self_attention", details, "attention")
    _sublayer(left, encoder, "feed_forward", _ff(encoder), "feed_forward")
    left.close_block(len(parts.encoder_blocks), "encoder_blocks", _class(encoder))
    if parts.encoder_norm is not None:
        left.box(f"encoder_norm: {_class(parts.encoder_norm)}", "norm")

    right.open_block()
    details = f"masked (causal), h = {heads}{window}"
    _sublayer(right, decoder, "self_attention", details, "attention")
    details = f"h = {heads}; keys, values: the encoder's output"
    cross = _sublayer(right, decoder, "cross_attention", details, "attention")
    _sublayer(right, decoder, "feed_forward", _ff(decoder), "feed_forward")
    right.close_block(len(parts.decoder_blocks), "decoder_blocks", _class(decoder))
    _outputs(right, parts, config.output_vocab_size)

    # The encoder's output goes up, across, and into every cross-attention
    # from the side (its keys and values; the queries come from below).
    rise = left.top + 0.3
    corridor = (left.x + box / 2 + right.x - box / 2) / 2
    _arrow(
        axis,
        (left.x, left.top),
        (left.x, rise),
        (corridor, rise),
        (corridor, cross),
        (right.x - box / 2, cross),
    )
    axis.text(left.x + 0.08, rise + 0.05, "encoder output", fontsize=_FONT, va="bottom")

    if config.norm_first:
        norm = (
            "Pre-norm (norm_first): each sub-layer gives "
            "x + Dropout(Sublayer(LayerNorm(x))); a final norm ends each stack."
        )
    else:
        norm = (
            "Post-norm, as the paper: each sub-layer gives "
            "LayerNorm(x + Dropout(Sublayer(x)))."
        )
    summary = (
        f"N = {len(parts.encoder_blocks)} encoder and {len(parts.decoder_blocks)} "
        f"decoder layers · d_model = {config.d_model} · "
        f"d_ff = {encoder.feed_forward.intermediate_dim} · h = {heads} · "
        f"activation {encoder.feed_forward.activation} · "
        f"dropout {config.dropout_rate:g}"
    )
    axis.text(width / 2, 0.52, summary, ha="center", va="center", fontsize=_FONT)
    axis.text(width / 2, 0.25, norm, ha="center", va="center", fontsize=_FONT)
    _fit(figure, axis, (0, width), (0, max(right.top, rise) + 0.3))
    return figure


def _embedded(stack: _Stack, parts, side: str, inputs: str) -> None:
    """The ids of one side as far as the blocks: embedding x sqrt(d_model),
    plus the positions, dropout (§3.4, §3.5, §5.4)."""
    stack.label(inputs)
    embedding = getattr(parts, f"{side}_embedding")
    model_dim = embedding.model_dim
    if side == "target" and embedding is parts.source_embedding:
        scale = f"× √{model_dim}; the source's table (shared)"
    else:
        scale = f"× √d_model = √{model_dim}; V = {embedding.vocab_size}"
    stack.box(f"{side}_embedding: {_class(embedding)}\n{scale}", "embedding")
    position = getattr(parts, f"{side}_position")
    stack.side_input(stack.add(), f"{side}_position:\n{_class(position)}")
    dropout = getattr(parts, f"{side}_dropout")
    stack.box(f"{side}_dropout: {_class(dropout)}\nrate = {dropout.rate:g}", "plain")


def _outputs(stack: _Stack, parts, vocab: int) -> None:
    """From the decoder's last block to the output probabilities."""
    if parts.decoder_norm is not None:
        stack.box(f"decoder_norm: {_class(parts.decoder_norm)}", "norm")
    if parts.output_projection is None:  # The target embedding, transposed.
        projection = (
            f"target_embedding: {_class(parts.target_embedding)}\n"
            f"reverse=True (tied): logits over V = {vocab}"
        )
    else:
        projection = (
            f"output_projection: {_class(parts.output_projection)}\n"
            f"d_model → V = {vocab} logits"
        )
    stack.box(projection, "projection")
    if parts.output_bias is not None:
        bias = f"output_bias: {_class(parts.output_bias)}\nadded to the logits"
        stack.box(bias, "projection")
    # The model returns logits: the loss and the search take the softmax.
    stack.box("Softmax (outside the model,\nwhich returns the logits)", "softmax")
    stack.label("Output probabilities")


def _class(layer) -> str:
    return type(layer).__name__


def _head_sizes(attention) -> str:
    key, value = attention.key_head_dim, attention.head_dim
    return f"d_k = d_v = {key}" if key == value else f"d_k = {key}, d_v = {value}"


def _ff(block) -> str:
    feed_forward = block.feed_forward
    return f"d_ff = {feed_forward.intermediate_dim}, {feed_forward.activation}"


def _sublayer(stack, block, role: str, details: str, colour: str) -> float:
    """One residual sub-layer of `block` as the model runs it
    (`layers.utils.residual`): post-norm, LayerNorm(x + Dropout(f(x)));
    pre-norm, x + Dropout(f(LayerNorm(x))). Returns the height of `role`'s
    box (where the encoder's output joins a cross-attention)."""
    norm = getattr(block, f"{role}_norm")
    norm_text = f"{role}_norm: {_class(norm)}"
    layer = getattr(block, role)
    text = f"{role}: {_class(layer)}\n{details}"
    branch = stack.branch()
    if block.norm_first:
        stack.box(f"Norm\n{norm_text}", "norm")
        y = stack.box(text, colour)
        stack.residual(branch, stack.add(), _ADD_RADIUS)
    else:
        y = stack.box(text, colour)
        stack.residual(
            branch, stack.box(f"Add & Norm\n{norm_text}", "norm"), stack.width / 2
        )
    return y


class _Stack:
    """One column of Figure 1, drawn bottom-up as the data flows: each
    element sits above the last, an arrow from the last into it."""

    def __init__(self, axis, *, x: float, width: float, side: int, bottom: float):
        self.axis, self.x, self.width = axis, x, width
        self.side = side  # -1: the residual connections run on the left.
        self.top = bottom  # Of the last element.
        self.gap = 0.0  # Below the next element: none below the first.
        self.block_bottom = bottom

    def branch(self) -> float:
        """Where on the arrow into the next element a residual leaves."""
        return self.top + self.gap / 2

    def _place(self, height: float) -> float:
        bottom = self.top + self.gap
        if self.gap:
            _arrow(self.axis, (self.x, self.top), (self.x, bottom))
        self.top, self.gap = bottom + height, _GAP
        return bottom + height / 2

    def label(self, text: str) -> float:
        """Words without a box: the inputs and the outputs."""
        y = self._place(0.36)
        self.axis.text(
            self.x, y, text, ha="center", va="center", fontsize=_FONT, linespacing=1.3
        )
        return y

    def box(self, text: str, colour: str) -> float:
        y = self._place(_BOX_HEIGHT)
        _box(self.axis, self.x, y, self.width, _BOX_HEIGHT, text, _COLOURS[colour])
        return y

    def add(self) -> float:
        """A circled plus: the main line and what joins it from the side."""
        y = self._place(2 * _ADD_RADIUS)
        self.axis.add_patch(
            Circle(
                (self.x, y), _ADD_RADIUS, facecolor="white", edgecolor="0.2", zorder=2
            )
        )
        arm = 0.6 * _ADD_RADIUS
        for xs, ys in (([-arm, arm], [0, 0]), ([0, 0], [-arm, arm])):
            self.axis.plot(
                np.add(xs, self.x), np.add(ys, y), color="0.2", lw=1.0, zorder=3
            )
        return y

    def residual(self, branch: float, y: float, reach: float) -> None:
        """x + Sublayer(x): from the main line at `branch`, round the side
        of the sub-layer, into the element at height `y` whose edge is
        `reach` from the centre (a box's half width, a circle's radius)."""
        outside = self.x + self.side * (self.width / 2 + 0.2)
        self.axis.plot([self.x], [branch], marker="o", markersize=3.5, color="0.2")
        _arrow(
            self.axis,
            (self.x, branch),
            (outside, branch),
            (outside, y),
            (self.x + self.side * reach, y),
        )

    def side_input(self, y: float, text: str) -> None:
        """A box beside the main line feeding the circle at height `y`
        (the positional encoding, as in Figure 1)."""
        width = 2.3
        inner = self.x + self.side * (_ADD_RADIUS + 0.3)
        _box(
            self.axis,
            inner + self.side * width / 2,
            y,
            width,
            _BOX_HEIGHT,
            text,
            _COLOURS["plain"],
        )
        _arrow(self.axis, (inner, y), (self.x + self.side * _ADD_RADIUS, y))

    def open_block(self) -> None:
        """Start the N× bracket: what follows is one of N identical blocks."""
        self.block_bottom = self.top + 0.12
        self.gap = _GAP + 0.25  # Room for the first residual's branch.

    def close_block(self, count: int, attribute: str, name: str) -> None:
        """End the bracket, and say N and the model's list of blocks."""
        top = self.top + 0.14
        near = self.x - self.side * (self.width / 2 + 0.15)
        far = self.x + self.side * (self.width / 2 + 0.38)
        _region(
            self.axis,
            min(near, far),
            self.block_bottom,
            abs(far - near),
            top - self.block_bottom,
        )
        middle = (self.block_bottom + top) / 2
        x = far + self.side * 0.3
        self.axis.text(x, middle + 0.12, "N×", ha="center", va="center", fontsize=15)
        self.axis.text(
            x, middle - 0.22, f"N = {count}", ha="center", va="center", fontsize=_FONT
        )
        # The stack's attribute, along the bracket: read bottom-up on the
        # left, top-down on the right, as a book's spine.
        self.axis.text(
            far + self.side * 0.64,
            middle,
            f"{attribute}: {count} × {name}",
            ha="center",
            va="center",
            rotation=90 if self.side < 0 else 270,
            fontsize=_FONT - 1,
            color="0.3",
        )
        self.top, self.gap = top, _GAP + 0.1


def _diagram() -> tuple[Figure, object]:
    """A white figure whose one axes will be sized in inches (`_fit`)."""
    figure = Figure(facecolor="white")
    axis = figure.add_axes((0, 0, 1, 1))
    axis.axis("off")
    return figure, axis


def _fit(
    figure: Figure, axis, xs: tuple[float, float], ys: tuple[float, float]
) -> None:
    """Size the figure so that one data unit is one inch."""
    figure.set_size_inches(xs[1] - xs[0], ys[1] - ys[0])
    axis.set_xlim(*xs)
    axis.set_ylim(*ys)


def _box(
    axis,
    x: float,
    y: float,
    width: float,
    height: float,
    text: str,
    colour: str,
    fontsize: float = _FONT,
) -> None:
    """A rounded box centred on (x, y) holding `text`."""
    axis.add_patch(
        FancyBboxPatch(
            (x - width / 2, y - height / 2),
            width,
            height,
            boxstyle="round,pad=0,rounding_size=0.07",
            facecolor=colour,
            edgecolor="0.3",
            linewidth=0.9,
            zorder=2,
        )
    )
    axis.text(
        x,
        y,
        text,
        ha="center",
        va="center",
        fontsize=fontsize,
        linespacing=1.3,
        zorder=3,
    )


def _arrow(axis, *points: tuple[float, float], dashed: bool = False) -> None:
    """An arrow along the straight segments joining `points`, its head at
    the last (one patch, so a bend has no gap)."""
    axis.add_patch(
        FancyArrowPatch(
            path=Path(points),
            arrowstyle="-|>",
            mutation_scale=10,
            color="0.25",
            linewidth=1.0,
            linestyle="--" if dashed else "-",
            zorder=1,
        )
    )


# What each engine of `keras-transformer serve --engine` runs a batch with
# (serving/engines/; tests/test_plots.py checks the names against the
# server's own list).
SERVING_ENGINES = {
    "keras": "Translator's search,\ncompiled per batch shape",
    "onnx": "the same search in NumPy\nover onnxruntime",
    "ctranslate2": "CTranslate2's own\ntranslate_batch",
    "savedmodel": "the search in the graph,\nsettings fixed at export",
}


# The boxes down the middle of `serving_pipeline`, a request's path: (text,
# colour).
_REQUEST_PATH = (
    ("HTTP client\ncurl, a service, the demo page at /", "plain"),
    ("uvicorn with h11_connection (server.py)\nheader timeout, keep-alive", "plain"),
    (
        "Middleware (observability.py, guards.py)\nRequestLog: request id, log "
        "line, metrics\nGuard: Host, Origin, API key; CORS",
        "plain",
    ),
    (
        "FastAPI app (app.py)\nPOST /v1/translate · /v1/attention · GET /v1/info"
        "\n/healthz · /readyz · /metrics · / (demo page)",
        "attention",
    ),
    (
        "Checks and limits (schema.py, jobs.py)\ntoo many texts, characters or "
        "tokens: 413\na setting not allowed: 422; warming up: 503",
        "attention",
    ),
    ("Sentence splitting (documents.py)\nsplit_sentences: sentencex", "attention"),
    (
        "Dynamic batcher (batcher.py)\n"
        "texts queue up: at most --max-queue, then 503\n"
        "a batch: same settings, ≤ --max-batch-size texts,\n"
        "the oldest waiting ≤ --max-wait-ms; --workers at once",
        "feed_forward",
    ),
)
# The boxes on the right of `serving_pipeline`: start-up and shutdown.
_START_UP = (
    ("open_engine: load the\nrun, preset or export", "plain"),
    ("socket listens: /healthz 200,\n/readyz 503 + Retry-After", "plain"),
    (
        "warm-up on a batcher worker:\nevery allowed search, every\nbatch "
        "shape (--warmup-tokens)",
        "feed_forward",
    ),
    ("/readyz 200: ready", "softmax"),
    ("SIGTERM: the requests in\nflight finish, then exit 0", "plain"),
)
_METRICS = "GET /metrics (Prometheus):\nrequests, queue, batches,\nwarm-up, compiles"


def serving_pipeline() -> Figure:
    """How `keras-transformer serve` answers a request (serving/).

    Down the middle, a `POST /v1/translate` from the HTTP client through
    uvicorn, the middleware (request log; Host, Origin and API-key guard),
    the FastAPI app's routes, the request's checks and limits, the sentence
    splitting and the dynamic batcher to the engine that decodes the batch
    (`SERVING_ENGINES`); the answers go back up on the left. On the right,
    the start-up: the engine opens, the socket listens, and the warm-up
    compiles every allowed search before `/readyz` answers 200.
    """
    figure, axis = _diagram()
    left, width = 0.55, 4.9
    placed = _column_down(axis, left + width / 2, width, -0.2, _REQUEST_PATH)
    top = placed[-1][1] - _GAP
    _arrow(axis, (left + width / 2, placed[-1][1]), (left + width / 2, top))
    engines, bottom = _engines(axis, left, width, top)
    _answers_back(axis, left, engines, (placed[0][0] + placed[0][1]) / 2)

    # The start-up, on the right: nothing is translated before the warm-up.
    side, side_width = left + width + 0.55, 3.05
    axis.text(
        side + side_width / 2,
        placed[1][0] + 0.2,
        "Start-up and shutdown (server.py)",
        ha="center",
        va="center",
        fontsize=_FONT,
    )
    started = _column_down(
        axis, side + side_width / 2, side_width, placed[1][0], _START_UP
    )
    # The warm-up runs the engine's searches as a batch would (dashed: once,
    # before the first request).
    warm, corridor = sum(started[2]) / 2, left + width + 0.27
    _arrow(
        axis,
        (side, warm),
        (corridor, warm),
        (corridor, engines),
        (left + width, engines),
        dashed=True,
    )
    _column_down(
        axis, side + side_width / 2, side_width, bottom + 0.8, [(_METRICS, "plain")]
    )
    _fit(figure, axis, (0, side + side_width + 0.1), (bottom - 0.15, 0))
    return figure


def _engines(axis, left: float, width: float, top: float) -> tuple[float, float]:
    """The engines, one `run_batch` call per batch whichever --engine runs,
    in a region from `top` down; its middle and bottom heights."""
    cell = ((width - 0.45) / 2, 0.62)
    region = 0.42 + 2 * cell[1] + 0.3
    _region(axis, left, top - region, width, region)
    axis.text(
        left + width / 2,
        top - 0.22,
        "Engine.run_batch (engines/, --engine)",
        ha="center",
        va="center",
        fontsize=_FONT,
    )
    for index, (name, runs) in enumerate(SERVING_ENGINES.items()):
        row, column = divmod(index, 2)
        x = left + 0.15 + cell[0] / 2 + column * (cell[0] + 0.15)
        y = top - 0.42 - cell[1] / 2 - row * (cell[1] + 0.15)
        _box(axis, x, y, *cell, f"{name}\n{runs}", _COLOURS["projection"])
    return top - region / 2, top - region


def _answers_back(axis, left: float, engines: float, client: float) -> None:
    """The answers go back up on the left, past every layer they came down."""
    back = 0.25
    _arrow(axis, (left, engines), (back, engines), (back, client), (left, client))
    axis.text(
        back,
        (engines + client) / 2,
        "answers: JSON, a split text rejoined (Document.join)",
        ha="center",
        va="center",
        rotation=90,
        fontsize=_FONT,
        bbox={"facecolor": "white", "edgecolor": "none", "pad": 1},
    )


def _column_down(axis, x: float, width: float, top: float, steps) -> list:
    """(text, colour) boxes one under the other from `top`, each as tall as
    its lines, an arrow from each to the next; their (top, bottom)s."""
    placed = []
    for text, colour in steps:
        height = 0.2 + 0.19 * (text.count("\n") + 1)
        if placed:
            _arrow(axis, (x, placed[-1][1]), (x, top))
        _box(axis, x, top - height / 2, width, height, text, _COLOURS[colour])
        placed.append((top, top - height))
        top -= height + _GAP
    return placed


def _region(axis, x: float, y: float, width: float, height: float) -> None:
    """A grey rounded area behind boxes that belong together."""
    axis.add_patch(
        FancyBboxPatch(
            (x, y),
            width,
            height,
            boxstyle="round,pad=0,rounding_size=0.12",
            facecolor=_COLOURS["region"],
            edgecolor="0.55",
            zorder=0,
        )
    )
