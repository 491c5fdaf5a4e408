"""A trained run against its MarianMT export in `transformers`: logits and
greedy outputs, sentence by sentence.

Exports `--run-dir` with `export --format huggingface` (into `--out`, which
must not exist), loads it with `MarianMTModel` and `MarianTokenizer`, and
prints a table: the largest logit difference on the export's check
sentences (against this package with Marian's layer-norm epsilon, and as
trained), then on `--count` held-out sentences (the built-in corpus's test
split by default, or `--src`) how many of `transformers`' greedy outputs
equal `translate --beam-size 1`'s, tokenized as the card says
(`add_special_tokens=False`) and with `MarianTokenizer`'s default `</s>`.

    python benchmarks/huggingface_parity.py --run-dir runs/builtin-tiny \\
        --out /tmp/hf-parity [--count 20] [--src test.en]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine_line  # noqa: E402


def sources(args: argparse.Namespace) -> list[str]:
    if args.src:
        lines = Path(args.src).read_text(encoding="utf-8").splitlines()
        return lines[: args.count]
    from keras_transformer.data.builtin_corpus import generate_corpus

    return [source for source, _ in generate_corpus()["test"][: args.count]]


def generated(out: Path, texts: list[str], lengths: list[int], specials: bool):
    from transformers import MarianMTModel, MarianTokenizer

    tokenizer = MarianTokenizer.from_pretrained(str(out))
    model = MarianMTModel.from_pretrained(str(out)).eval()
    outputs = []
    for text, length in zip(texts, lengths):  # Each its own length limit.
        batch = tokenizer([text], return_tensors="pt", add_special_tokens=specials)
        ids = model.generate(**batch, num_beams=1, max_new_tokens=length + 50)
        outputs += tokenizer.batch_decode(ids, skip_special_tokens=True)
    return outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--out", required=True, help="the export to write")
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--src", help="source sentences, one per line")
    args = parser.parse_args()

    from keras_transformer.decoding.translator import Translator
    from keras_transformer.export.huggingface import export_huggingface
    from keras_transformer.run.directory import RunDirectory

    out = export_huggingface(args.run_dir, args.out, beam_size=1)
    info = json.loads((out / "export.json").read_text(encoding="utf-8"))
    run = RunDirectory(args.run_dir).open_for_inference(None, load_model=True)
    texts = sources(args)
    ours = Translator(run.model, run.tokenizer, beam_size=1).translate(texts)
    lengths = [len(ids) for ids in run.tokenizer.encode(texts)]
    print(machine_line())
    print(f"run {args.run_dir}, export {out}, {len(texts)} sentences")
    print("| measure | value |")
    print("| --- | --- |")
    for name, value in info["transformers_logits_difference"].items():
        print(f"| max logit difference, {name} | {value:.3g} |")
    for specials in (False, True):
        theirs = generated(out, texts, lengths, specials)
        same = sum(a == b for a, b in zip(ours, theirs))
        print(
            f"| greedy equal to translate --beam-size 1, "
            f"add_special_tokens={specials} | {same} of {len(texts)} |"
        )


if __name__ == "__main__":
    main()
