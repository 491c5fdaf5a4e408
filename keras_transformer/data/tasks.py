"""The tasks a run learns, and the parsing task's tokenizer.

The parsing task's search defaults (the paper's §6.3) are the search's:
`decoding.settings.task_search`. Imports nothing when imported: the command
line and the data pipeline read it before Keras starts.
"""

from __future__ import annotations

TASKS = ("translation", "parsing")
"""What a run learns: translation (text pairs) or parsing (a treebank)."""

PARSING_TOKENIZER = "words"
"""One id per word and per tree symbol: the source is tokenized words, the
target the linearized tree (`parsing.linearize`)."""


def task_tokenizer(task: str) -> str:
    """The tokenizer kind `task` trains when none is given."""
    return PARSING_TOKENIZER if task == "parsing" else "sentencepiece"


def pointer_bracket_ids(vocabulary) -> tuple[int, ...]:
    """The parsing vocabulary's ids that a decoder's word pointer skips (not
    tags: `parsing.linearize.bracket_ids`), for `--word-pointer`."""
    from keras_transformer.parsing.linearize import bracket_ids

    return bracket_ids(vocabulary)
