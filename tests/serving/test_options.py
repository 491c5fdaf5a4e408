"""`serving.options`: every flag of `serve` declared once, in `ServeOptions`
and `ServerSettings`, and the search settings a request may ask for.

Plain Python, no Keras computation: run once (the torch suite)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from keras_transformer.cli import build_parser
from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.serving.options import (
    AllowedSettings,
    ServeOptions,
    ServerSettings,
)
from keras_transformer.utils.setting_fields import flag_name

pytestmark = pytest.mark.backend_neutral


def _serve_args(*argv: str):
    return build_parser().parse_args(["serve", "--run-dir", "R", *argv])


def test_every_field_is_a_serve_flag_with_the_fields_default():
    args = _serve_args()
    for settings in (ServeOptions, ServerSettings):
        for field in dataclasses.fields(settings):
            default = getattr(args, field.name)
            # A list flag starts empty; the settings hold it as a tuple.
            assert (tuple(default) if isinstance(default, list) else default) == (
                getattr(settings(), field.name)
            ), flag_name(field.name)


def test_list_flags_take_several_values_and_repeat():
    args = _serve_args("--ensemble", "a", "b", "--ensemble", "c", "--cors-origin", "o")
    server = ServerSettings(
        **{f.name: getattr(args, f.name) for f in dataclasses.fields(ServerSettings)}
    )
    assert server.ensemble == ("a", "b", "c")
    assert server.cors_origin == ("o",)


def test_without_lists_the_engine_chooses_what_a_request_may_ask():
    assert ServerSettings().allowed(SearchSettings()) is None


def test_allowed_lists_hold_the_servers_own_settings():
    settings = SearchSettings(beam_size=4, alpha=0.6)
    allowed = ServerSettings(allowed_beam_sizes="4,1,4").allowed(settings)
    assert allowed == AllowedSettings((1, 4), (0.6,))
    with pytest.raises(ValueError, match="must hold the server's own --beam-size 4"):
        ServerSettings(allowed_beam_sizes="1,2").allowed(settings)


def test_sampling_and_constraints_widen_the_default_lists():
    allowed = ServerSettings(
        allowed_sampling="top-k:10", allow_constraints=True
    ).allowed(SearchSettings(beam_size=4))
    assert (allowed.beam_sizes, allowed.alphas) == ((1, 4), (0.6,))
    assert [s.sampling for s in allowed.sampling] == ["top-k"]
    assert allowed.constraints


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"engine": "tflite"}, "engine (--engine) must be one of keras, ctranslate2"),
        ({"quantize": "int4"}, "quantize (--quantize) must be one of int8"),
        ({"port": 65536}, "port (--port) must be <= 65535"),
        ({"warmup_tokens": -1}, "warmup_tokens (--warmup-tokens) must be >= 0"),
        ({"log_format": "xml"}, "log_format (--log-format) must be one of text, json"),
    ],
)
def test_bad_settings_name_their_flag(changes, expected):
    with pytest.raises(ValueError, match=re.escape(expected)):
        ServerSettings(**changes)
