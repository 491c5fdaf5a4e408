"""A preset saved under one backend loads under the others with `generate`
equal line for line (greedy and beam 4), both ways.

The pytest process saves the fitted model's preset; one subprocess per other
installed backend loads it, generates, and saves it again with its own
backend; the pytest process then loads those presets and generates. It does
the same work whatever the suite's backend, so scripts/test.sh runs it in
one suite (tests/conftest.py, backend_neutral).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import keras
import pytest

from keras_transformer import TransformerSeq2SeqLM
from keras_transformer.utils.optional_imports import is_installed

pytestmark = pytest.mark.backend_neutral

SOURCES = ["the dog sleeps .", "", "the old man likes the garden .", "water ."]
OTHERS = tuple(
    b
    for b in ("tensorflow", "jax", "torch")
    if b != keras.backend.backend() and is_installed(b)
)
WORKER = textwrap.dedent(
    """
    import json, sys
    from keras_transformer import TransformerSeq2SeqLM

    preset, resaved, sources = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    task = TransformerSeq2SeqLM.from_preset(preset)
    outputs = {beam: task.generate(sources, beam_size=beam) for beam in (1, 4)}
    task.save_to_preset(resaved)
    print("OUTPUTS " + json.dumps(outputs))
    """
)


def generated(task):
    return {str(beam): task.generate(SOURCES, beam_size=beam) for beam in (1, 4)}


@pytest.mark.skipif(not OTHERS, reason="needs a second Keras backend installed")
def test_a_preset_moves_between_backends_with_equal_outputs(fitted, tmp_path):
    task, _ = fitted
    preset = task.save_to_preset(tmp_path / "saved")
    expected = generated(task)
    assert any(expected["4"])  # real translations, not only blanks
    processes = {}
    for backend in OTHERS:
        env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="2")
        argv = [str(preset), str(tmp_path / backend), json.dumps(SOURCES)]
        processes[backend] = subprocess.Popen(
            [sys.executable, "-c", WORKER, *argv],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    for backend, process in processes.items():
        output = process.communicate(timeout=600)[0]
        assert process.returncode == 0, f"{backend}:\n{output[-3000:]}"
        line = next(li for li in output.splitlines() if li.startswith("OUTPUTS "))
        assert json.loads(line[len("OUTPUTS ") :]) == expected, backend
        resaved = TransformerSeq2SeqLM.from_preset(tmp_path / backend)
        assert generated(resaved) == expected, f"saved by {backend}"
