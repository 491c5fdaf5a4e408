"""TransformerConfig: paper presets, validation messages, JSON round trip."""

from __future__ import annotations

import dataclasses
import json

import pytest

from keras_transformer import PRESETS, TransformerConfig
from keras_transformer.config import field_names

pytestmark = [pytest.mark.usefixtures("keras_state"), pytest.mark.backend_neutral]


def test_base_preset_has_paper_values():
    config = TransformerConfig.preset("base")
    assert config.num_encoder_layers == 6
    assert config.num_decoder_layers == 6
    assert config.d_model == 512
    assert config.d_ff == 2048
    assert config.num_heads == 8
    assert config.head_dim == 64
    assert config.dropout_rate == 0.1
    assert config.label_smoothing == 0.1
    assert config.warmup_steps == 4000
    assert config.share_embeddings and config.tie_output_projection
    assert config.position_encoding == "sinusoidal"
    assert config.norm_first is False
    assert config.attention_window is None


def test_big_preset_has_paper_values():
    config = TransformerConfig.preset("big")
    assert config.num_encoder_layers == 6
    assert config.num_decoder_layers == 6
    assert config.d_model == 1024
    assert config.d_ff == 4096
    assert config.num_heads == 16
    assert config.head_dim == 64
    assert config.dropout_rate == 0.3
    assert config.label_smoothing == 0.1


def test_tiny_preset_keeps_structure():
    config = TransformerConfig.preset("tiny")
    assert (config.d_model, config.d_ff, config.num_heads) == (64, 256, 4)
    assert config.head_dim == 16
    assert config.num_encoder_layers == config.num_decoder_layers == 2
    assert config.d_model % config.num_heads == 0
    assert {"base", "big", "tiny"} <= set(PRESETS)


def test_preset_overrides_and_presets_are_not_mutated():
    config = TransformerConfig.preset("base", vocab_size=1234, dropout_rate=0.2)
    assert config.vocab_size == 1234
    assert config.dropout_rate == 0.2
    assert config.d_model == 512
    assert TransformerConfig.preset("base").dropout_rate == 0.1
    assert TransformerConfig.preset("base").vocab_size == 37000


def test_unknown_preset():
    with pytest.raises(ValueError, match="huge"):
        TransformerConfig.preset("huge")


def test_output_vocab_size():
    shared = TransformerConfig.preset("tiny", vocab_size=50)
    assert shared.output_vocab_size == 50
    untied = shared.replace(share_embeddings=False, target_vocab_size=40)
    assert untied.output_vocab_size == 40


def test_frozen():
    config = TransformerConfig.preset("tiny")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.d_model = 8


def _assert_names(error, field, value):
    message = str(error.value)
    assert field in message
    assert f"{field}={value!r}" in message


@pytest.mark.parametrize(
    "field,value",
    [
        ("dropout_rate", -0.1),
        ("dropout_rate", 1.0),
        ("dropout_rate", 1.5),
        ("attention_dropout_rate", -0.5),
        ("relu_dropout_rate", 1.0),
        ("label_smoothing", 1.0),
        ("num_encoder_layers", 0),
        ("num_decoder_layers", 0),
        ("num_heads", 0),
        ("vocab_size", 0),
        ("d_ff", -1),
        ("max_position", 0),
        ("warmup_steps", 0),
        ("attention_window", 0),
        ("target_vocab_size", 0),
        ("layer_norm_epsilon", 0.0),
        ("position_encoding", "rotary"),
        ("num_heads", True),
        ("num_heads", "8"),
        ("num_heads", 8.0),
        ("d_model", 512.0),
        ("num_encoder_layers", False),
        ("dropout_rate", "0.1"),
        ("share_embeddings", 1),
        ("norm_first", "yes"),
        ("activation", "gelu_new"),
        ("output_bias", 1),
        ("pointer_bracket_ids", ()),
        ("pointer_bracket_ids", (3, 4)),
        ("pointer_bracket_ids", (4, 37000)),
        ("pointer_bracket_ids", (4.0,)),
        ("pointer_bracket_ids", "4"),
    ],
)
def test_invalid_value_names_field_and_value(field, value):
    with pytest.raises(ValueError) as error:
        TransformerConfig.preset("base", **{field: value})
    _assert_names(error, field, value)


def test_d_model_not_divisible_by_num_heads():
    with pytest.raises(ValueError) as error:
        TransformerConfig.preset("base", d_model=500)
    _assert_names(error, "d_model", 500)
    assert "num_heads=8" in str(error.value)
    with pytest.raises(ValueError) as error:
        TransformerConfig(d_model=512, num_heads=7)
    _assert_names(error, "d_model", 512)


def test_shared_embeddings_need_one_vocabulary():
    with pytest.raises(ValueError) as error:
        TransformerConfig.preset("tiny", vocab_size=50, target_vocab_size=40)
    _assert_names(error, "target_vocab_size", 40)
    config = TransformerConfig.preset(
        "tiny", vocab_size=50, target_vocab_size=40, share_embeddings=False
    )
    assert config.output_vocab_size == 40


def test_unknown_key_in_preset_overrides():
    with pytest.raises(ValueError, match="d_modle"):
        TransformerConfig.preset("base", d_modle=256)


def test_unknown_key_in_replace():
    with pytest.raises(ValueError, match="heads"):
        TransformerConfig.preset("tiny").replace(heads=2)


def test_unknown_key_in_from_dict():
    values = TransformerConfig.preset("tiny").to_dict()
    values["dropout"] = 0.2
    with pytest.raises(ValueError) as error:
        TransformerConfig.from_dict(values)
    assert "dropout" in str(error.value)
    assert "Unknown" in str(error.value)


def test_invalid_value_in_from_dict():
    values = TransformerConfig.preset("tiny").to_dict()
    values["num_heads"] = "4"
    with pytest.raises(ValueError) as error:
        TransformerConfig.from_dict(values)
    _assert_names(error, "num_heads", "4")


def test_dict_round_trip():
    config = TransformerConfig.preset("big", vocab_size=1000)
    values = config.to_dict()
    assert sorted(values) == sorted(field_names())
    assert TransformerConfig.from_dict(values) == config


@pytest.mark.parametrize(
    "config",
    [
        TransformerConfig.preset("base"),
        TransformerConfig.preset(
            "tiny",
            vocab_size=50,
            target_vocab_size=40,
            share_embeddings=False,
            tie_output_projection=False,
            position_encoding="learned",
            norm_first=True,
            attention_window=3,
            layer_norm_epsilon=1e-5,
            pointer_bracket_ids=(4, 5, 9),
        ),
    ],
)
def test_json_round_trip(tmp_path, config):
    path = tmp_path / "config.json"
    config.to_json(path)
    assert json.loads(path.read_text()) == config.to_dict()
    assert TransformerConfig.from_json(path) == config
    assert TransformerConfig.from_json(str(path)) == config


def test_invalid_json_names_the_path(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"d_model": 512,,}')
    with pytest.raises(ValueError) as error:
        TransformerConfig.from_json(path)
    assert str(path) in str(error.value)
    assert "line 1" in str(error.value)


def test_json_that_is_not_an_object_names_the_path(tmp_path):
    path = tmp_path / "list.json"
    path.write_text("[1, 2, 3]")
    with pytest.raises(ValueError) as error:
        TransformerConfig.from_json(path)
    assert str(path) in str(error.value)


def test_json_with_invalid_value(tmp_path):
    path = tmp_path / "bad_value.json"
    values = TransformerConfig.preset("tiny").to_dict()
    values["dropout_rate"] = 2.0
    path.write_text(json.dumps(values))
    with pytest.raises(ValueError) as error:
        TransformerConfig.from_json(path)
    _assert_names(error, "dropout_rate", 2.0)


FLOAT_FIELDS = [
    f.name for f in dataclasses.fields(TransformerConfig) if f.type == "float"
]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("name", FLOAT_FIELDS)
def test_non_finite_float_fields_are_refused_naming_the_field(name, value):
    # NaN passes comparison-based range checks: layer_norm_epsilon=nan was
    # accepted and trained to a NaN loss.
    with pytest.raises(ValueError, match="a finite number") as error:
        TransformerConfig.preset("tiny", **{name: value})
    _assert_names(error, name, value)


def test_key_dim_defaults_to_d_model_over_h():
    config = TransformerConfig.preset("base")
    assert config.key_dim is None
    assert config.query_key_dim == config.head_dim == 64
    row_b = config.replace(key_dim=16)  # Table 3 row (B): d_k = 16, d_v = 64.
    assert (row_b.query_key_dim, row_b.head_dim) == (16, 64)
    assert TransformerConfig.from_dict(row_b.to_dict()) == row_b


@pytest.mark.parametrize("key_dim", [0, -1, 16.0, True, "16"])
def test_invalid_key_dim(key_dim):
    with pytest.raises(ValueError) as error:
        TransformerConfig.preset("tiny", key_dim=key_dim)
    _assert_names(error, "key_dim", key_dim)
