"""One backend at a time: the extras, the import guard, the GPU checks.

A package is hidden by `sys.modules[name] = None` in a fresh interpreter:
`import name` then fails as if it were not installed, and
`importlib.util.find_spec(name)` returns None. The real single-backend
environment is built and run by scripts/smoke_single_backend.sh.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import pytest

from keras_transformer.training import accelerators
from keras_transformer.utils import optional_imports
from keras_transformer.utils.optional_imports import MissingExtraError, require

ROOT = Path(__file__).resolve().parents[1]
tomllib = pytest.importorskip("tomllib")  # Python 3.11+, as the dev setup.
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
    "project"
]


def _python(code: str, hide=(), argv0=None, **env) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter with the packages `hide` hidden."""
    prelude = "import sys\n"
    prelude += "".join(f"sys.modules[{name!r}] = None\n" for name in hide)
    if argv0:
        prelude += f"sys.argv[0] = {argv0!r}\n"
    environment = dict(os.environ, PYTHONPATH=str(ROOT), **env)
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
    )


# --- the extras ---------------------------------------------------------


def test_core_dependencies_hold_no_backend():
    names = " ".join(PROJECT["dependencies"])
    for package in ("tensorflow", "jax", "torch", "keras-hub", "ctranslate2"):
        assert package not in names


def test_extras_cover_each_backend_and_feature():
    extras = PROJECT["optional-dependencies"]
    assert set(extras) >= {
        "tensorflow",
        "jax",
        "torch",
        "tensorflow-cuda",
        "jax-cuda",
        "hub",
        "serve",
        "notebooks",
        "dev",
    }
    assert any(r.startswith("tensorflow[and-cuda]") for r in extras["tensorflow-cuda"])
    assert any(r.startswith("jax[cuda") for r in extras["jax-cuda"])
    # Every extra that require() or a message names exists.
    named = set(optional_imports.EXTRAS.values()) | set(
        accelerators.CUDA_EXTRAS.values()
    )
    assert named <= set(extras)


def test_torch_extra_is_the_cpu_wheel_on_disk():
    # A range admitting a newer release makes pip fetch a CUDA build of GBs.
    assert PROJECT["optional-dependencies"]["torch"] == ["torch==2.13.0"]


def test_dev_holds_every_cpu_backend_and_the_test_tools():
    dev = " ".join(PROJECT["optional-dependencies"]["dev"])
    assert "keras-nmt[tensorflow,jax,torch,hub,serve,notebooks]" in dev
    assert "pytest" in dev and "ruff" in dev
    assert "cuda" not in dev


# --- require() ----------------------------------------------------------


def test_require_returns_the_module():
    assert require("json", extra="serve") is sys.modules["json"]


def test_require_names_the_extra_of_a_missing_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    with pytest.raises(MissingExtraError) as caught:
        require("ctranslate2", purpose="CTranslate2 export")
    message = str(caught.value)
    assert "CTranslate2 export needs the ctranslate2 package" in message
    assert "pip install -e '.[serve]' in the keras-nmt clone" in message
    assert isinstance(caught.value, ImportError)  # Callers catch ImportError.


@pytest.mark.parametrize(
    "module, extra",
    [
        ("tensorflow", "tensorflow"),
        ("tensorflow_text", "tensorflow"),
        ("jax", "jax"),
        ("torch", "torch"),
        ("keras_hub", "hub"),
    ],
)
def test_require_default_extra(monkeypatch, module, extra):
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(MissingExtraError, match=rf"'\.\[{extra}\]'"):
        require(module)


def test_require_refuses_a_module_without_an_extra():
    with pytest.raises(ValueError, match="No extra installs 'numpy'"):
        require("numpy")


def test_explain_missing_only_for_our_optional_packages():
    explained = optional_imports.explain_missing(
        ModuleNotFoundError("No module named 'keras_hub'", name="keras_hub")
    )
    assert "pip install -e '.[hub]'" in str(explained)
    other = ModuleNotFoundError("No module named 'yaml'", name="yaml")
    assert optional_imports.explain_missing(other) is None


def test_wordpiece_without_keras_hub_names_the_hub_extra(monkeypatch):
    from keras_transformer.data.tokenizer import WordPieceTokenizer

    monkeypatch.setitem(sys.modules, "keras_hub", None)
    with pytest.raises(MissingExtraError, match=r"'\.\[hub\]'"):
        WordPieceTokenizer(["<pad>"])


def test_tensorboard_logs_need_tensorflow(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    assert optional_imports.tensorboard_callback(tmp_path) is None
    assert "pip install -e '.[tensorflow]'" in capsys.readouterr().err


@pytest.mark.skipif(
    not optional_imports.is_installed("tensorflow"), reason="needs TensorFlow"
)
def test_tensorboard_callback_where_tensorflow_is(tmp_path):
    callback = optional_imports.tensorboard_callback(tmp_path)
    assert isinstance(callback, keras.callbacks.TensorBoard)


# --- the import guard -----------------------------------------------------

# The import guard's tests start a fresh interpreter that chooses its own
# backend (KERAS_BACKEND set, or unset, for it): their result cannot depend on
# the suite's backend, and each start costs a Python + Keras import, so they
# run in one suite (tests/conftest.py, backend_neutral).
in_a_fresh_interpreter = pytest.mark.backend_neutral


@in_a_fresh_interpreter
@pytest.mark.parametrize("backend", ["tensorflow", "jax", "torch"])
def test_import_names_the_extra_of_a_hidden_backend(backend):
    result = _python("import keras_transformer", hide=[backend], KERAS_BACKEND=backend)
    assert result.returncode != 0
    assert "MissingExtraError" in result.stderr
    assert f"KERAS_BACKEND={backend}, but the {backend} package" in result.stderr
    assert f"pip install -e '.[{backend}]'" in result.stderr


@in_a_fresh_interpreter
def test_default_backend_missing_says_how_to_choose_another(tmp_path):
    env = dict(os.environ, KERAS_HOME=str(tmp_path))  # No keras.json there.
    env.pop("KERAS_BACKEND", None)
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['tensorflow'] = None; import keras_transformer",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(env, PYTHONPATH=str(ROOT)),
    )
    assert result.returncode != 0
    assert "its default: KERAS_BACKEND is not set" in result.stderr
    assert "pip install -e '.[tensorflow]'" in result.stderr
    assert "KERAS_BACKEND=jax" in result.stderr  # Installed in [dev].


def test_configured_backend_reads_keras_json(tmp_path, monkeypatch):
    (tmp_path / "keras.json").write_text('{"backend": "jax"}')
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    assert optional_imports.configured_backend() == "jax"
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    assert optional_imports.configured_backend() == "torch"


# The command line as a user starts it, with `argv` as its arguments.
_COMMAND = """
from keras_transformer.cli import console
sys.argv[1:] = {argv!r}
sys.exit(console())
"""


@in_a_fresh_interpreter
def test_command_line_prints_the_sentence_and_exits_2():
    result = _python(
        _COMMAND.format(argv=["summary", "tiny"]),
        hide=["jax"],
        argv0="keras-transformer",
        KERAS_BACKEND="jax",
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "keras-transformer summary: error: KERAS_BACKEND=jax" in result.stderr
    assert "pip install -e '.[jax]'" in result.stderr


@in_a_fresh_interpreter
def test_what_needs_no_keras_runs_without_a_backend(tmp_path):
    """A deployment installs [serve,onnx] and no backend: `--help`,
    `translate --onnx` and serving an ONNX or CTranslate2 export alone start
    no Keras (the commands that do name the missing extra, above)."""
    result = _python(
        _COMMAND.format(argv=["translate", "--help"]),
        hide=["jax", "tensorflow", "torch"],
        argv0="keras-transformer",
        KERAS_BACKEND="jax",
    )
    assert result.returncode == 0 and "--onnx" in result.stdout
    result = _python(
        _COMMAND.format(argv=["translate", "--onnx", str(tmp_path)]),
        hide=["jax", "tensorflow", "torch", "keras"],
        argv0="keras-transformer",
        KERAS_BACKEND="jax",
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{tmp_path}" in result.stderr and "KERAS_BACKEND" not in result.stderr


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["translate", "--onnx", "X"], False),
        (["translate", "--run-dir", "R"], True),
        (["prepare"], False),
        (["serve", "--engine", "onnx", "--export-dir", "X"], False),
        (["serve", "--engine", "ctranslate2", "--export-dir", "X"], False),
        (["serve", "--engine", "onnx", "--export-dir", "X", "--run-dir", "R"], True),
        (["serve", "--engine", "savedmodel", "--export-dir", "X"], True),
        (["serve", "--run-dir", "R"], True),
        (["summary"], True),
    ],
)
def test_which_commands_start_keras(argv, expected):
    from keras_transformer.cli import build_parser, needs_keras

    assert needs_keras(build_parser().parse_args(argv)) is expected


@in_a_fresh_interpreter
@pytest.mark.parametrize("backend", ["mxnet", "numpy"])
def test_a_backend_we_do_not_run_on_is_named_with_the_ones_we_do(backend):
    result = _python(
        _COMMAND.format(argv=["summary", "tiny"]),
        argv0="keras-transformer",
        KERAS_BACKEND=backend,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert f"KERAS_BACKEND={backend} is not a backend keras-transformer runs on" in (
        result.stderr
    )
    assert "tensorflow, jax, torch" in result.stderr


_EVERY_COMMAND = """
import keras_transformer
from keras_transformer import cli
from keras_transformer.run import averaging
from keras_transformer.decoding import evaluation
from keras_transformer.export import ctranslate2, savedmodel
from keras_transformer import training
from keras_transformer.decoding import translator
print(sorted(m for m in {names!r} if sys.modules.get(m) is not None))
"""


@in_a_fresh_interpreter
@pytest.mark.slow
def test_jax_backend_imports_no_tensorflow():
    code = _EVERY_COMMAND.format(names=("tensorflow", "tensorflow_text", "keras_hub"))
    result = _python(code, KERAS_BACKEND="jax")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


@in_a_fresh_interpreter
@pytest.mark.slow
def test_tensorflow_backend_works_with_jax_hidden():
    code = _EVERY_COMMAND.format(names=("jax", "torch"))
    result = _python(code, hide=["jax", "torch"], KERAS_BACKEND="tensorflow")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


# --- GPUs -------------------------------------------------------------------


def _fake_nvidia_smi(directory: Path, output: str, status: int = 0) -> None:
    script = directory / "nvidia-smi"
    script.write_text(f"#!/bin/sh\nprintf '{output}'\nexit {status}\n")
    script.chmod(0o755)


def test_no_nvidia_smi_lists_no_gpu(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert accelerators.nvidia_gpus() == []
    assert accelerators.unused_gpus_warning() is None


def test_failing_nvidia_smi_lists_no_gpu(monkeypatch, tmp_path):
    _fake_nvidia_smi(tmp_path, "NVIDIA-SMI has failed\\n", status=9)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert accelerators.nvidia_gpus() == []


def test_gpus_the_backend_does_not_see_are_named_with_the_extra(
    monkeypatch, tmp_path, capsys
):
    _fake_nvidia_smi(
        tmp_path,
        "GPU 0: NVIDIA H200 (UUID: GPU-0)\\nGPU 1: NVIDIA H200 (UUID: GPU-1)\\n",
    )
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert len(accelerators.nvidia_gpus()) == 2
    assert accelerators.backend_gpus() == []  # This machine's CPU build.
    accelerators.warn_if_gpus_unused()
    err = capsys.readouterr().err
    extra = accelerators.CUDA_EXTRAS[keras.backend.backend()]
    assert "nvidia-smi lists 2 GPU(s) (GPU 0: NVIDIA H200" in err
    assert "backend sees none: this runs on the CPU" in err
    assert f"pip install -e '.[{extra}]'" in err


def test_gpus_the_backend_sees_give_no_warning(monkeypatch, tmp_path):
    _fake_nvidia_smi(tmp_path, "GPU 0: NVIDIA H200 (UUID: GPU-0)\\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(accelerators, "backend_gpus", lambda: ["cuda:0"])
    assert accelerators.unused_gpus_warning() is None


def test_mirrored_on_one_device_lists_the_devices_found():
    with pytest.raises(ValueError) as caught:
        accelerators.check_mirrored_devices(["/device:CPU:0"])
    message = str(caught.value)
    assert "--distribute mirrored needs 2 or more devices" in message
    assert "found 1: /device:CPU:0" in message
    accelerators.check_mirrored_devices(["cpu:0", "cpu:1"])  # Two are enough.


@pytest.mark.skipif(
    keras.backend.backend() == "torch",
    reason="torch refuses mirrored on any device count "
    "(test_distributed.py::test_torch_refuses_...)",
)
def test_setup_distribution_mirrored_on_one_device_fails():
    from keras_transformer.training.distribution import setup_distribution

    with pytest.raises(ValueError, match=r"needs 2 or more devices; .* found 1: "):
        setup_distribution("mirrored")
    assert keras.distribution.distribution() is None  # Nothing was set.
