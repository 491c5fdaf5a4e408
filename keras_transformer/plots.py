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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure


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
