"""deploy/: an export served alone, on what deploy/Dockerfile installs.

`deploy/install.sh` (the image's install step) runs into a fresh virtual
environment: the package with [serve,onnx] and no Keras backend. From it,
`translate --onnx` and `serve --engine onnx|ctranslate2 --export-dir X`
(no run directory anywhere near) give what the same exports give in the
development environment. The image itself is not built: CI has no
container builder.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from keras_transformer.decoding.settings import SearchSettings
from tests.serving.client import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.backend_neutral]

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = SearchSettings(beam_size=4, max_extra_length=5)
FLAGS = ["--max-extra-length", "5"]
TEXTS = ["the dog sleeps.", "a child reads a book.", "", "the old man likes water."]


def copy_as_the_image_does(image_root: Path) -> None:
    """The Dockerfile's COPY lines, into `image_root` (its `/`): the install
    then sees only what the image holds."""
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text(encoding="utf-8")
    for line in dockerfile.splitlines():
        if not line.startswith("COPY "):
            continue
        *sources, destination = line.split()[1:]
        target = image_root / destination.lstrip("/")
        for source in sources:
            into = target / Path(source).name if destination.endswith("/") else target
            into.parent.mkdir(parents=True, exist_ok=True)
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, into, ignore=_BUILD_LEFTOVERS)
            else:
                shutil.copy(ROOT / source, into)


_BUILD_LEFTOVERS = shutil.ignore_patterns("__pycache__", "*.egg-info")


@pytest.fixture(scope="module")
def deployed(tmp_path_factory) -> Path:
    """The image's environment: what its COPY lines bring, installed by its
    RUN line (deploy/install.sh) into a fresh venv."""
    image = tmp_path_factory.mktemp("image")
    copy_as_the_image_does(image)
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text(encoding="utf-8")
    assert "RUN sh /src/deploy/install.sh /opt/serve /src" in dockerfile
    venv = image / "opt" / "serve"
    install = [
        str(image / "src" / "deploy" / "install.sh"),
        str(venv),
        str(image / "src"),
    ]
    subprocess.run(["sh", *install], check=True, timeout=900)
    return venv / "bin" / "python"


@pytest.fixture(scope="module")
def exports(untrained_run, tmp_path_factory) -> dict[str, Path]:
    """ONNX and CTranslate2 exports, copied away from their run."""
    from keras_transformer.export.ctranslate2 import export_ctranslate2
    from keras_transformer.export.onnx import export_onnx

    out = tmp_path_factory.mktemp("exports")
    return {
        "onnx": export_onnx(untrained_run, out / "onnx", SETTINGS),
        "ctranslate2": export_ctranslate2(untrained_run, out / "ct2", SETTINGS),
    }


def test_the_install_has_no_keras_backend(deployed):
    code = (
        "import importlib.util as u; "
        "print([m for m in ('jax', 'tensorflow', 'torch') if u.find_spec(m)])"
    )
    found = subprocess.run([deployed, "-c", code], capture_output=True, text=True)
    assert found.stdout.strip() == "[]"


def test_translate_onnx_runs_on_the_install(deployed, exports, tmp_path):
    from keras_transformer.export.onnx_translator import OnnxTranslator

    expected = OnnxTranslator(exports["onnx"], threads=1).translate(TEXTS, SETTINGS)
    done = subprocess.run(
        [deployed, "-m", "keras_transformer", "translate", "--onnx",
         str(exports["onnx"]), *FLAGS],
        input="\n".join(TEXTS) + "\n", capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == expected


@pytest.mark.parametrize("engine", ["onnx", "ctranslate2"])
def test_the_install_serves_an_export_alone(deployed, exports, engine, tmp_path):
    from keras_transformer.serving.engines import open_engine

    here = open_engine(engine, None, SETTINGS, export_dir=exports[engine],
                       scratch=tmp_path, batch_size=8, threads=1)  # fmt: skip
    expected = [hypotheses[0][0] for hypotheses in here.translate(TEXTS, SETTINGS)]
    args = ["--engine", engine, "--export-dir", str(exports[engine]), *FLAGS]
    log = tmp_path / "serve.log"
    server = ServerProcess(args, log, timeout=120, python=str(deployed))
    try:
        assert server.translate(TEXTS) == expected
        assert server.get("/v1/info").json()["engine"] == engine
    finally:
        assert server.stop() == 0
