"""keras_transformer.data.sources: the public names of every source module."""

from __future__ import annotations

import pytest

from keras_transformer.data import multi30k, sources, text_files, tfds_source
from tests.data.helpers import assert_imports_nothing_heavy

REEXPORTED = {
    text_files: "DataError ParallelCorpus read_parallel_files read_text_lines read_tsv",
    multi30k: "MULTI30K_SHA256 MULTI30K_SPLITS MULTI30K_URL download_file "
    "load_multi30k",
    tfds_source: "load_tfds",
}


@pytest.mark.parametrize("module", list(REEXPORTED), ids=lambda m: m.__name__)
def test_reexports_are_the_same_objects(module):
    for name in REEXPORTED[module].split():
        assert getattr(sources, name) is getattr(module, name), name
        assert name in sources.__all__
        assert name in module.__all__


def test_all_lists_exactly_the_reexports():
    expected = {name for names in REEXPORTED.values() for name in names.split()}
    assert set(sources.__all__) == expected


def test_module_does_not_import_tensorflow():
    assert_imports_nothing_heavy("keras_transformer.data.sources")
