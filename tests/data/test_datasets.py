"""DatasetSpec: settings that the chosen dataset would ignore are refused."""

from __future__ import annotations

import pytest

from keras_transformer.data.datasets import DatasetSpec
from keras_transformer.data.text_files import DataError

FILES = {"train": ("a.en", "a.de")}


@pytest.mark.parametrize(
    "spec, named",
    [
        (dict(name="builtin", files=FILES), "--train-src/tgt/tsv (files=)"),
        (dict(name="tfds:wmt14_translate/de-en", files=FILES), "--train-src"),
        (dict(name="builtin", data_dir="d"), "--data-dir (data_dir=)"),
        (dict(name="files", files=FILES, data_dir="d"), "--data-dir"),
        (dict(name="builtin", source_lang="de"), "--source-lang (source_lang=)"),
        (dict(name="files", files=FILES, target_lang="en"), "--target-lang"),
    ],
)
def test_settings_the_dataset_does_not_read_are_refused(spec, named):
    with pytest.raises(DataError) as info:
        DatasetSpec(**spec)
    message = str(info.value)
    assert named in message and f"--dataset {spec['name']}" in message


@pytest.mark.parametrize(
    "spec",
    [
        dict(),
        dict(name="files", files=FILES),
        dict(name="multi30k", data_dir="d", source_lang="de", target_lang="en"),
        dict(name="tfds:wmt14_translate/de-en", data_dir="d", source_lang="de"),
        dict(name="bogus", data_dir="d"),  # load_dataset names the bad name.
    ],
)
def test_settings_the_dataset_reads_are_accepted(spec):
    assert DatasetSpec(**spec).data_dir == spec.get("data_dir")
