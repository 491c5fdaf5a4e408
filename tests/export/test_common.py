"""What the export targets share: the child process's errors come back as
themselves (a full disk is `WriteFailed`, exit 74, from a SavedModel export
made under TensorFlow in a child as from one made in this process)."""

from __future__ import annotations

import json

import pytest

from keras_transformer.export.common import child_error, child_main
from keras_transformer.utils.atomic_files import WriteFailed

pytestmark = pytest.mark.backend_neutral


def _last_line_of_child(error: Exception, capsys) -> str:
    def export(request):
        raise error

    assert child_main([json.dumps({})], export) == 2
    return capsys.readouterr().err.splitlines()[-1]


def test_a_full_disk_in_the_child_is_a_write_failure_here(tmp_path, capsys):
    failed = WriteFailed(
        tmp_path / "savedmodel", OSError(28, "No space left on device"),
        "the SavedModel export", ": it needs about 2.0 MB, 0.0 MB free",
    )  # fmt: skip
    again = child_error(_last_line_of_child(failed, capsys), "tensorflow")
    assert isinstance(again, WriteFailed) and str(again) == str(failed)


def test_a_known_error_keeps_its_kind_and_an_unknown_one_is_quoted(capsys):
    again = child_error(_last_line_of_child(ValueError("bad\nrun"), capsys), "jax")
    assert type(again) is ValueError and str(again) == "bad run"
    other = child_error("Segmentation fault", "tensorflow")
    assert type(other) is RuntimeError
    assert str(other) == "The export under tensorflow failed: Segmentation fault"
