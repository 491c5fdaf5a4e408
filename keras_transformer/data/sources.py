"""Parallel text sources: local files, Multi30k and TensorFlow Datasets.

The readers live in one module per kind of source; this module re-exports
their public names so that ``from keras_transformer.data.sources import ...``
keeps working:

* `keras_transformer.data.text_files`: local plain/gzip text and TSV files
  (`read_text_lines`, `read_parallel_files`, `read_tsv`), `ParallelCorpus`
  and `DataError`; its docstring gives the conventions every reader follows.
* `keras_transformer.data.multi30k`: `load_multi30k`, from a local directory
  or downloaded and verified with `keras.utils.get_file` (`download_file`).
* `keras_transformer.data.tfds_source`: `load_tfds`.

Importing this module imports neither TensorFlow nor Keras.
"""

from __future__ import annotations

from keras_transformer.data.multi30k import (
    MULTI30K_SHA256,
    MULTI30K_SPLITS,
    MULTI30K_URL,
    download_file,
    load_multi30k,
)
from keras_transformer.data.text_files import (
    DataError,
    ParallelCorpus,
    read_parallel_files,
    read_text_lines,
    read_tsv,
)
from keras_transformer.data.tfds_source import load_tfds

__all__ = [
    "MULTI30K_SHA256",
    "MULTI30K_SPLITS",
    "MULTI30K_URL",
    "DataError",
    "ParallelCorpus",
    "download_file",
    "load_multi30k",
    "load_tfds",
    "read_parallel_files",
    "read_text_lines",
    "read_tsv",
]
