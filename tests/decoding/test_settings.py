"""`SearchSettings`: the paper's defaults, one validation, one set of flags."""

from __future__ import annotations

import dataclasses
import math

import pytest

from keras_transformer.cli import build_parser
from keras_transformer.data.tasks import TASKS
from keras_transformer.decoding.settings import (
    SearchSettings,
    search_settings,
    task_search,
)

pytestmark = pytest.mark.backend_neutral


def test_defaults_are_the_papers():
    settings = SearchSettings()
    assert (settings.beam_size, settings.alpha, settings.max_extra_length) == (
        4,
        0.6,
        50,
    )
    assert not settings.allow_unk and not settings.early_stopping


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"beam_size": 0}, r"beam_size \(--beam-size\) must be >= 1"),
        ({"beam_size": 2.0}, r"beam_size \(--beam-size\) must be an integer"),
        ({"beam_size": True}, r"beam_size \(--beam-size\) must be a number"),
        ({"alpha": math.nan}, r"alpha \(--alpha\) must be a finite number"),
        ({"alpha": math.inf}, r"alpha \(--alpha\) must be a finite number"),
        ({"alpha": -0.1}, r"alpha \(--alpha\) must be >= 0.0"),
        ({"max_extra_length": 0}, r"--max-extra-length\) must be >= 1"),
        ({"early_stopping": 1}, r"early_stopping \(--early-stopping\) must be True"),
    ],
)
def test_bad_settings_name_the_setting_and_its_flag(changes, message):
    with pytest.raises(ValueError, match=message):
        SearchSettings(**changes)


def test_unknown_setting_lists_the_valid_ones():
    with pytest.raises(TypeError, match="Unknown search setting beam.*beam_size"):
        search_settings(beam=2)


def test_changes_apply_to_the_given_settings():
    base = SearchSettings(beam_size=2, alpha=0.0)
    changed = search_settings(base, max_extra_length=7)
    assert changed == SearchSettings(beam_size=2, alpha=0.0, max_extra_length=7)
    assert search_settings(base) is base
    assert SearchSettings.from_dict(changed.to_dict()) == changed


@pytest.mark.parametrize("allow_unk, widest", [(False, 7), (True, 8)])
def test_a_beam_wider_than_the_generable_vocabulary_is_refused(allow_unk, widest):
    SearchSettings(beam_size=widest, allow_unk=allow_unk).check_vocabulary(10)
    with pytest.raises(ValueError, match=f"at most {widest}"):
        SearchSettings(beam_size=widest + 1, allow_unk=allow_unk).check_vocabulary(10)


@pytest.mark.parametrize("command", ["translate", "evaluate", "export"])
def test_every_decoding_command_has_every_setting_with_its_default(command):
    """The flags are made from the fields, so none can be missing or drift."""
    argv = [command, "--run-dir", "R", "--ref", "x", "--out", "o"]
    argv = {"translate": argv[:3], "evaluate": argv[:5], "export": argv[:3] + argv[5:]}
    args = build_parser().parse_args(argv[command])
    for field in dataclasses.fields(SearchSettings):
        # evaluate's numbers default to None: its --task fills them in.
        unset = command == "evaluate" and field.type != "bool"
        assert getattr(args, field.name) == (None if unset else field.default)
    flags = build_parser().parse_args(
        argv[command] + ["--beam-size", "2", "--alpha", "0.3", "--early-stopping"]
    )
    assert (flags.beam_size, flags.alpha, flags.early_stopping) == (2, 0.3, True)


# --- each task's search ---------------------------------------------------------


def test_parsing_searches_as_the_paper_beam_21_alpha_0_3_up_to_input_plus_300():
    settings = task_search("parsing")
    assert settings.beam_size == 21
    assert settings.alpha == pytest.approx(0.3)
    assert settings.max_extra_length == 300
    assert not settings.allow_unk and not settings.early_stopping


def test_translation_searches_with_the_default_settings():
    assert task_search("translation") == SearchSettings()


def test_an_unknown_task_is_refused_listing_the_tasks():
    with pytest.raises(ValueError) as info:
        task_search("tagging")
    message = str(info.value)
    assert "'tagging'" in message
    assert all(task in message for task in TASKS)
