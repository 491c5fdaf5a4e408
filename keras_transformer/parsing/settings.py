"""The parsing task's name and its search defaults (the paper's §6.3).

Light to import: the command line reads it before Keras starts.
"""

from __future__ import annotations

from keras_transformer.decoding.settings import SearchSettings

TASKS = ("translation", "parsing")
"""What a run learns: translation (text pairs) or parsing (a treebank)."""

PARSING_SEARCH = SearchSettings(beam_size=21, alpha=0.3, max_extra_length=300)
"""§6.3: "we increased the maximum output length to input length + 300. We
used a beam size of 21 and alpha = 0.3 for both WSJ only and the
semi-supervised setting." The defaults of `parse` and of
`evaluate --task parsing`, and the final test decode of a parsing run."""

PARSING_TOKENIZER = "words"
"""One id per word and per tree symbol: the source is tokenized words, the
target the linearized tree (`parsing.linearize`)."""


def task_tokenizer(task: str) -> str:
    """The tokenizer kind `task` trains when none is given."""
    return PARSING_TOKENIZER if task == "parsing" else "sentencepiece"


def task_search(task: str) -> SearchSettings:
    """The search defaults of `task` (one of `TASKS`)."""
    if task not in TASKS:
        raise ValueError(f"Unknown task {task!r}. Expected one of {TASKS}.")
    return PARSING_SEARCH if task == "parsing" else SearchSettings()
