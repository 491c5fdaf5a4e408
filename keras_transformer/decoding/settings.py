"""`SearchSettings`: what a translation search is asked to do, in one place.

`Translator`, `SequenceGenerator`, both exporters and the serving paths take
one frozen `SearchSettings`; the `translate`, `evaluate` and `export` flags
are made from its fields (`max_extra_length` is `--max-extra-length`), as
`train`'s are from `TrainOptions`, so a default or a range cannot drift
between them. How a search runs (cached or not, compiled or not, in
segments or not) is not a setting of the search: those stay plain
arguments of the classes that run it.

Light to import: the command line reads it before Keras starts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from keras_transformer.data.tasks import TASKS
from keras_transformer.decoding.quantization import QUANTIZE_MODES
from keras_transformer.utils.setting_fields import check_setting, flag_name, setting

# PAD and BOS are never generated; UNK unless allow_unk (see `decoding`).
_ALWAYS_SUPPRESSED = 2


@dataclasses.dataclass(frozen=True)
class SearchSettings:
    """Greedy or beam search as the paper decodes (§6.1): beam 4, alpha 0.6,
    output up to the source's length + 50.

    Raises ValueError, naming the setting and its flag, for a value out of
    range, of the wrong type or not finite.
    """

    beam_size: int = setting(4, "beam width; 1 is greedy search", minimum=1)
    alpha: float = setting(
        0.6, "length penalty exponent, ((5 + length) / 6) ** alpha", minimum=0.0
    )
    max_extra_length: int = setting(
        50, "output may be this many tokens longer than its source", minimum=1
    )
    allow_unk: bool = setting(
        False, "let the search generate the unknown token (default: suppressed)"
    )
    early_stopping: bool = setting(
        False,
        "beam search: end a sentence once it has beam-size finished hypotheses "
        "(fairseq's rule; faster, may differ) instead of when no live one can "
        "beat them (the paper's; default)",
    )

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            check_setting(field, getattr(self, field.name))

    @property
    def is_greedy(self) -> bool:
        return self.beam_size == 1

    def suppressed_count(self) -> int:
        """How many ids the search never generates (PAD, BOS, maybe UNK)."""
        return _ALWAYS_SUPPRESSED + (0 if self.allow_unk else 1)

    def check_vocabulary(self, vocab_size: int) -> None:
        """Refuse a beam wider than the ids the search may generate: the
        extra beams could only hold impossible hypotheses."""
        allowed = vocab_size - self.suppressed_count()
        if self.beam_size > allowed:
            raise ValueError(
                f"beam_size ({flag_name('beam_size')}) is {self.beam_size}, but "
                f"the vocabulary of {vocab_size} leaves only {allowed} ids the "
                "search may generate (PAD, BOS"
                + ("" if self.allow_unk else " and UNK")
                + f" never are): use a beam of at most {allowed}."
            )

    def replace(self, **changes: Any) -> SearchSettings:
        """A copy with `changes`; an unknown name is a TypeError listing the
        valid ones."""
        names = {field.name for field in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise TypeError(
                f"Unknown search setting {', '.join(unknown)}. Valid settings: "
                f"{', '.join(sorted(names))}."
            )
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> SearchSettings:
        return cls().replace(**values)


def search_settings(
    settings: SearchSettings | None = None, **changes: Any
) -> SearchSettings:
    """`settings` (default: the paper's) with `changes` applied: how the
    classes that take a `SearchSettings` also take `beam_size=1` and the
    like as keyword arguments without declaring them again."""
    settings = SearchSettings() if settings is None else settings
    if not isinstance(settings, SearchSettings):
        raise TypeError(
            f"settings must be a SearchSettings. Received: {type(settings).__name__}"
        )
    return settings.replace(**changes) if changes else settings


PARSING_SEARCH = SearchSettings(beam_size=21, alpha=0.3, max_extra_length=300)
"""§6.3: "we increased the maximum output length to input length + 300. We
used a beam size of 21 and alpha = 0.3 for both WSJ only and the
semi-supervised setting." The defaults of `parse` and of
`evaluate --task parsing`, and the final test decode of a parsing run."""


def task_search(task: str) -> SearchSettings:
    """The search defaults of `task` (one of `data.tasks.TASKS`)."""
    if task not in TASKS:
        raise ValueError(f"Unknown task {task!r}. Expected one of {TASKS}.")
    return PARSING_SEARCH if task == "parsing" else SearchSettings()


@dataclasses.dataclass(frozen=True)
class WeightOptions:
    """How an opened model's weights decode: `--quantize`, declared here once
    for every command that opens a model (translate, evaluate, parse; serve's
    `ServerSettings` shares the field)."""

    quantize: str | None = setting(
        None,
        "decode with int8 weights (Keras: int8 projections and embeddings, "
        "activations quantized per position; serve --engine ctranslate2: "
        "CTranslate2's int8 compute type)",
        choices=QUANTIZE_MODES,
        shown_default="float32",
    )

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            check_setting(field, getattr(self, field.name))
