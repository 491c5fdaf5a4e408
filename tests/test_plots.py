"""Figures: each function draws what it says, from the package's own numbers."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.figure import Figure

from keras_transformer import plots
from keras_transformer.layers import masks, sinusoidal_table
from keras_transformer.schedules import FineTuneSchedule, TransformerSchedule
from tests.helpers import to_numpy

pytestmark = pytest.mark.backend_neutral


def renders(figure: Figure, tmp_path) -> None:
    assert isinstance(figure, Figure)
    path = tmp_path / "figure.png"
    figure.savefig(path)
    assert path.stat().st_size > 1000


def test_positional_encoding_shows_the_sinusoid_table(tmp_path):
    figure = plots.positional_encoding(length=10, depth=16)
    mesh = figure.axes[0].collections[0]
    drawn = np.asarray(mesh.get_array()).reshape(16, 10)
    np.testing.assert_allclose(drawn.T, to_numpy(sinusoidal_table(np.arange(10), 16)))
    renders(figure, tmp_path)


def test_attention_mask_shows_a_causal_mask_with_labels(tmp_path):
    ids = np.array([[5, 6, 7, 0]])
    mask = to_numpy(masks.self_attention_mask(ids, causal=True))[0]
    figure = plots.attention_mask(
        mask, title="causal", query_labels=list("abcd"), key_labels=list("abcd")
    )
    axis = figure.axes[0]
    np.testing.assert_array_equal(axis.images[0].get_array(), mask)
    assert [t.get_text() for t in axis.get_xticklabels()] == list("abcd")
    assert mask[0, 1] == 0 and mask[1, 0] == 1  # Never the future.
    renders(figure, tmp_path)


def test_attention_mask_must_be_two_dimensional():
    with pytest.raises(ValueError, match=r"2-D \(query, key\)"):
        plots.attention_mask(np.ones((1, 3, 3)), title="x")


def test_learning_rate_schedule_peaks_at_warmup(tmp_path):
    figure = plots.learning_rate_schedule(d_model=64, warmup_steps=50, steps=200)
    x, y = figure.axes[0].lines[0].get_data()
    assert x[np.argmax(y)] == 50
    expected = to_numpy(TransformerSchedule(64, 50)(np.float32(49)))  # 0-based
    np.testing.assert_allclose(y.max(), expected, rtol=1e-6)
    np.testing.assert_allclose(y.max(), 64**-0.5 * 50**-0.5, rtol=1e-6)
    renders(figure, tmp_path)


def test_learning_rates_draws_each_schedule_by_update(tmp_path):
    compared = {
        "paper": TransformerSchedule(64, 50),
        "fine-tune": FineTuneSchedule(1e-3, 10, 100),
    }
    figure = plots.learning_rates(compared, 100, title="compared")
    lines = figure.axes[0].lines
    assert [line.get_label() for line in lines] == ["paper", "fine-tune"]
    x, y = lines[1].get_data()
    assert x[0] == 1 and x[np.argmax(y)] == 10  # Update u is iteration u - 1.
    np.testing.assert_allclose(y.max(), 1e-3, rtol=1e-6)
    renders(figure, tmp_path)


def test_token_lengths_counts_every_sentence(tmp_path):
    figure = plots.token_lengths([3, 4, 4, 9], [5, 5, 6, 12, 12])
    counts = [sum(p.get_height() for p in c) for c in figure.axes[0].containers]
    assert counts == [4, 5]
    renders(figure, tmp_path)


def test_attention_heads_draws_every_layer_and_head(tmp_path):
    rng = np.random.default_rng(0)
    layers = [rng.random((4, 3, 5)) for _ in range(2)]
    figure = plots.attention_heads(
        layers, query_tokens=list("abc"), key_tokens=list("vwxyz"), title="cross"
    )
    assert len(figure.axes) == 8
    last = figure.axes[-1]
    assert last.get_title() == "layer 2, head 4"
    np.testing.assert_allclose(last.images[0].get_array(), layers[1][3])
    renders(figure, tmp_path)


def test_attention_heads_refuses_a_bad_shape():
    with pytest.raises(ValueError, match="heads, query, key"):
        plots.attention_heads(
            [np.ones((3, 3))], query_tokens=[], key_tokens=[], title=""
        )


def test_training_curves_plot_loss_and_dev_bleu(tmp_path):
    history = {"step": [10, 20, 30], "loss": [5.0, 4.0, 3.0], "val_loss": [5.5, 4.5]}
    bleu = [{"step": 20, "dev_bleu": 12.5}, {"step": 30, "dev_bleu": 20.0}]
    figure = plots.training_curves(history, bleu)
    loss_axis, bleu_axis = figure.axes
    assert [line.get_label() for line in loss_axis.lines] == ["loss", "val_loss"]
    np.testing.assert_array_equal(loss_axis.lines[1].get_xdata(), [10, 20])
    np.testing.assert_array_equal(bleu_axis.lines[0].get_ydata(), [12.5, 20.0])
    renders(figure, tmp_path)


def test_bar_chart_labels_each_value(tmp_path):
    figure = plots.bar_chart({"base": 30.25, "h=1": 28.0}, ylabel="BLEU", title="t")
    labels = [t.get_text() for t in figure.axes[0].texts]
    assert labels == ["30.2", "28.0"]
    renders(figure, tmp_path)


def test_constituency_tree_draws_every_label_and_word(tmp_path):
    from keras_transformer.parsing.tree import parse_tree

    tree = parse_tree("(S (NP (DT The) (NN dog)) (VP (VBD saw) (NP (NNP Anna))) (. .))")
    figure = plots.constituency_tree(tree, title="a parse")
    texts = [text.get_text() for text in figure.axes[0].texts]
    labels = ["S", "NP", "DT", "NN", "VP", "VBD", "NP", "NNP", "."]
    assert sorted(texts) == sorted(labels + tree.words())
    # Words sit on the bottom row, in sentence order.
    words = [t for t in figure.axes[0].texts if t.get_position()[1] == 0]
    assert [t.get_text() for t in sorted(words, key=lambda t: t.get_position()[0])] == (
        tree.words()
    )
    # One line from each node to each child: 3 + 2 + 1 + 1 + 2 + 1 + 1 + 1 + 1.
    assert len(figure.axes[0].lines) == 13
    renders(figure, tmp_path)


def _transformer(**overrides):
    from keras_transformer.config import TransformerConfig
    from keras_transformer.model import build_transformer

    config = TransformerConfig.preset("tiny", vocab_size=100, **overrides)
    return build_transformer(config)


def _texts(figure: Figure) -> list[str]:
    return [text.get_text() for text in figure.axes[0].texts]


def _heights(figure: Figure, starts: str) -> list[float]:
    """The heights of the texts that start with `starts`, the encoder's
    (left) first."""
    found = [t for t in figure.axes[0].texts if t.get_text().startswith(starts)]
    return [
        t.get_position()[1] for t in sorted(found, key=lambda t: t.get_position()[0])
    ]


def test_architecture_names_the_models_own_layers_and_n(tmp_path):
    model = _transformer(num_encoder_layers=3, num_decoder_layers=1)
    figure = plots.architecture(model)
    drawn = "\n".join(_texts(figure))
    block = model.decoder_blocks[0]
    for role in ("self_attention", "cross_attention", "feed_forward"):
        assert f"{role}: {type(getattr(block, role)).__name__}" in drawn
        assert f"{role}_norm: LayerNormalization" in drawn
    for side in ("source", "target"):
        assert f"{side}_embedding: ScaledEmbedding" in drawn
        assert f"{side}_position:\nSinusoidalPositionalEncoding" in drawn
    assert "N = 3" in drawn and "N = 1" in drawn  # Each stack its own N.
    assert "h = 4" in drawn and "d_ff = 256, relu" in drawn
    # Post-norm, the paper's: each norm after its sub-layer's sum.
    assert drawn.count("Add & Norm") == 2 + 3
    assert "encoder_norm" not in drawn and "decoder_norm" not in drawn
    sublayers = _heights(figure, "self_attention: ")
    norms = _heights(figure, "Add & Norm\nself_attention_norm")
    assert len(sublayers) == len(norms) == 2  # The encoder's and the decoder's.
    assert all(sublayer < norm for sublayer, norm in zip(sublayers, norms))
    assert "reverse=True (tied)" in drawn  # The preset ties the projection.
    renders(figure, tmp_path)


def test_architecture_draws_pre_norm_and_an_own_projection(tmp_path):
    model = _transformer(norm_first=True, tie_output_projection=False, output_bias=True)
    figure = plots.architecture(model)
    drawn = "\n".join(_texts(figure))
    # Pre-norm: each norm before its sub-layer, and a final norm per stack.
    assert "Add & Norm" not in drawn
    sublayers = _heights(figure, "self_attention: ")
    norms = _heights(figure, "Norm\nself_attention_norm")
    assert len(sublayers) == len(norms) == 2
    assert all(norm < sublayer for sublayer, norm in zip(sublayers, norms))
    assert "encoder_norm: LayerNormalization" in drawn
    assert "decoder_norm: LayerNormalization" in drawn
    assert "Pre-norm" in drawn
    assert "output_projection: Dense" in drawn and "output_bias: LogitsBias" in drawn
    assert "tied" not in drawn
    renders(figure, tmp_path)


def test_architecture_refuses_what_is_not_a_transformer():
    with pytest.raises(TypeError, match="build_transformer"):
        plots.architecture(object())


def test_serving_pipeline_names_every_engine_and_route(tmp_path):
    from keras_transformer.serving.options import ENGINES

    figure = plots.serving_pipeline()
    assert sorted(plots.SERVING_ENGINES) == sorted(ENGINES)
    texts = _texts(figure)
    for engine in ENGINES:
        assert any(text.startswith(f"{engine}\n") for text in texts), engine
    drawn = "\n".join(texts)
    for part in ("/v1/translate", "/readyz 200", "batcher.py", "warm-up", "Guard"):
        assert part in drawn
    renders(figure, tmp_path)
