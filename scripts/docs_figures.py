"""Draws the documentation's figures into docs/figures/ with `keras_transformer.plots`.

The positional encoding and the schedules need nothing else; the training
curve and the attention heads are those of a trained run (`--run-dir`, the
Multi30k `small` recipe of docs/results.md; its test split's first sentence
is the one drawn). Rerun after a change to the plots or the recipe:

    python scripts/docs_figures.py --run-dir runs/m30k
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
    args = parser.parse_args()
    from keras_transformer import plots

    FIGURES.mkdir(exist_ok=True)
    save(plots.positional_encoding(), "positional-encoding.png")
    schedules()
    if args.run_dir:
        trained_run(args.run_dir)


if __name__ == "__main__":
    main()
