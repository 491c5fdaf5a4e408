"""Draws the documentation's figures into docs/figures/ with `keras_transformer.plots`.

The positional encoding, the schedules, the architecture (the `base` model,
built untrained) and the serving pipeline need nothing else; the training
curve and the attention heads are those of a trained run (`--run-dir`, the
Multi30k `small` recipe of docs/results.md; its test split's first sentence
is the one drawn). Rerun after a change to the plots or the recipe:

    python scripts/docs_figures.py --run-dir runs/m30k

or redraw some of the figures that need no run, by name:

    python scripts/docs_figures.py --only architecture serving
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "figures"
# The sentence whose attention is drawn (Multi30k test2016's first).
SENTENCE = "A man in an orange hat starring at something."


def save(figure, name: str) -> None:
    path = FIGURES / name
    figure.savefig(path, dpi=110)
    print(path.relative_to(ROOT))


def schedules() -> None:
    """The paper's schedule (base), and a fine-tune's choices over 200 updates."""
    from keras_transformer import plots
    from keras_transformer.schedules import FineTuneSchedule, TransformerSchedule

    save(plots.learning_rate_schedule(512, 4000, 20_000), "schedule-base.png")
    steps = 200
    compared = {
        "paper's, restarted (small: warmup 400, scale 0.4)": TransformerSchedule(
            256, 400, scale=0.4
        ),
        "fine-tuning, full (peak 3e-4)": FineTuneSchedule(3e-4, 10, steps),
        "fine-tuning, LoRA (peak 3e-3)": FineTuneSchedule(3e-3, 10, steps),
    }
    title = f"A fine-tune's first {steps} updates"
    save(plots.learning_rates(compared, steps, title=title), "fine-tune-schedules.png")


def architecture() -> None:
    """The paper's Figure 1 as this package builds it: the base model with
    EN-DE's shared vocabulary of 37,000 tokens (§5.1)."""
    from keras_transformer import plots
    from keras_transformer.config import TransformerConfig
    from keras_transformer.model import build_transformer

    model = build_transformer(TransformerConfig.preset("base", vocab_size=37000))
    save(plots.architecture(model), "architecture.png")


def serving() -> None:
    from keras_transformer import plots

    save(plots.serving_pipeline(), "serving.png")


def positional_encoding() -> None:
    from keras_transformer import plots

    save(plots.positional_encoding(), "positional-encoding.png")


# The figures drawn without a run, by name (`--only`), in the order drawn.
WITHOUT_A_RUN = {
    "positional-encoding": positional_encoding,
    "schedules": schedules,
    "architecture": architecture,
    "serving": serving,
}


def trained_run(run_dir: Path) -> None:
    from keras_transformer import plots
    from keras_transformer.decoding.translator import Translator
    from keras_transformer.run.directory import RunDirectory

    history = json.loads((run_dir / "history.json").read_text(encoding="utf-8"))
    save(plots.training_curves(history), "training-curve.png")
    run = RunDirectory(run_dir).open_for_inference()
    weights = Translator(run.model, run.tokenizer).attention_weights(SENTENCE)
    figure = plots.attention_heads(
        weights["cross_attention"],
        query_tokens=weights["target_tokens"],
        key_tokens=weights["source_tokens"],
        title=f"Cross-attention, every decoder layer and head: {SENTENCE!r}",
    )
    save(figure, "cross-attention.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, help="a trained run")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=list(WITHOUT_A_RUN),
        help="draw only these of the figures that need no run (default: all); "
        "the run's are drawn with --run-dir",
    )
    args = parser.parse_args()

    FIGURES.mkdir(exist_ok=True)
    for name in args.only or WITHOUT_A_RUN:
        WITHOUT_A_RUN[name]()
    if args.run_dir:
        trained_run(args.run_dir)


if __name__ == "__main__":
    main()
