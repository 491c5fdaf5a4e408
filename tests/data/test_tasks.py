"""The tasks, the parsing task's tokenizer and model preset (Table 4); its
search defaults (§6.3) are tests/decoding/test_settings.py's."""

from __future__ import annotations

import pytest

from keras_transformer.config import TransformerConfig
from keras_transformer.data.tasks import TASKS, task_tokenizer

pytestmark = pytest.mark.backend_neutral


def test_the_tasks_are_translation_then_parsing():
    assert TASKS == ("translation", "parsing")


def test_parsing_learns_words_and_translation_sentencepiece():
    assert task_tokenizer("parsing") == "words"
    assert task_tokenizer("translation") == "sentencepiece"


def test_the_parsing_preset_has_4_layers_of_width_1024():
    config = TransformerConfig.preset("parsing")
    assert config.num_encoder_layers == 4
    assert config.num_decoder_layers == 4
    assert config.d_model == 1024
