"""Tests for keras_transformer.data.tfds_source (a fake TFDS module)."""

from __future__ import annotations

import sys
import types

import pytest

from keras_transformer.data.text_files import DataError
from keras_transformer.data.tfds_source import load_tfds
from tests.data.helpers import (
    TFDS_EXAMPLES,
    assert_imports_nothing_heavy,
    install_fake_tfds,
)

pytestmark = pytest.mark.backend_neutral


def test_load_tfds_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)
    with pytest.raises(DataError, match="pip install tensorflow-datasets"):
        load_tfds("wmt14_translate/de-en", "validation")


def test_load_tfds_not_installed_for_real():
    try:
        import tensorflow_datasets  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("tensorflow_datasets is installed here")
    with pytest.raises(DataError, match="pip install tensorflow-datasets"):
        load_tfds("wmt14_translate/de-en", "validation")


@pytest.fixture
def fake_tfds(monkeypatch):
    return install_fake_tfds(monkeypatch)


def test_load_tfds_default_direction(fake_tfds, tmp_path):
    corpus = load_tfds("wmt14_translate/de-en", "validation", data_dir=tmp_path)
    assert fake_tfds.calls == [("wmt14_translate/de-en", "validation", tmp_path, True)]
    assert corpus.source == ["Guten Morgen .", "Grüße", ""]
    assert corpus.target == ["Good morning .", "Greetings", "  spaced  "]
    assert corpus.line_numbers == [1, 2, 3]
    assert corpus.origin == "tfds:wmt14_translate/de-en[validation] de-en"


def test_load_tfds_explicit_languages(fake_tfds):
    en_de = load_tfds("x", "train", source_lang="en")
    assert en_de.source[0] == "Good morning ." and en_de.target[0] == "Guten Morgen ."
    same = load_tfds("x", "train", target_lang="de")
    assert same.source == en_de.source and same.target == en_de.target
    both = load_tfds("x", "train", source_lang="en", target_lang="de")
    assert both.source == en_de.source
    assert load_tfds("x", "train", target_lang="en").source[1] == "Grüße"


def test_load_tfds_language_errors(fake_tfds):
    with pytest.raises(DataError, match="'fr' is not one of"):
        load_tfds("x", "train", source_lang="fr")
    with pytest.raises(DataError, match="must differ"):
        load_tfds("x", "train", source_lang="de", target_lang="de")
    with pytest.raises(DataError, match=r"example 1: no feature 'fr'"):
        load_tfds("x", "train", source_lang="fr", target_lang="en")
    fake_tfds.info = types.SimpleNamespace(supervised_keys=None)
    with pytest.raises(DataError, match="pass source_lang and target_lang"):
        load_tfds("x", "train")
    assert len(load_tfds("x", "train", source_lang="de", target_lang="en")) == 3


def test_load_tfds_bad_text_and_load_failure(fake_tfds):
    fake_tfds.examples = [*TFDS_EXAMPLES, {"de": b"\xff", "en": b"x"}]
    with pytest.raises(DataError, match=r"example 4, de: invalid UTF-8"):
        load_tfds("x", "train")
    fake_tfds.examples = [{"de": 3, "en": b"x"}]
    with pytest.raises(DataError, match="expected a string"):
        load_tfds("x", "train")
    with pytest.raises(DataError, match="tfds.load failed: no such dataset"):
        load_tfds("broken", "train")


def test_module_imports_nothing_heavy():
    # tensorflow_datasets is imported by load_tfds only.
    assert_imports_nothing_heavy("keras_transformer.data.tfds_source")
