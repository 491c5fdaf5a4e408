"""The parsing task's search defaults (§6.3) and model preset (Table 4)."""

from __future__ import annotations

import pytest

from keras_transformer.config import TransformerConfig
from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.parsing.settings import TASKS, task_search

pytestmark = pytest.mark.backend_neutral


def test_parsing_searches_as_the_paper_beam_21_alpha_0_3_up_to_input_plus_300():
    settings = task_search("parsing")
    assert settings.beam_size == 21
    assert settings.alpha == pytest.approx(0.3)
    assert settings.max_extra_length == 300
    assert not settings.allow_unk and not settings.early_stopping


def test_translation_searches_with_the_default_settings():
    assert task_search("translation") == SearchSettings()


def test_the_tasks_are_translation_then_parsing():
    assert TASKS == ("translation", "parsing")


def test_an_unknown_task_is_refused_listing_the_tasks():
    with pytest.raises(ValueError) as info:
        task_search("tagging")
    message = str(info.value)
    assert "'tagging'" in message
    assert all(task in message for task in TASKS)


def test_the_parsing_preset_has_4_layers_of_width_1024():
    config = TransformerConfig.preset("parsing")
    assert config.num_encoder_layers == 4
    assert config.num_decoder_layers == 4
    assert config.d_model == 1024
