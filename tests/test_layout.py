"""The package's shape: no import circle, every import down the family
order, no module reaching up to its own family's face, a role line at the
top of every module, and a command line whose `--help` starts neither Keras
nor a backend."""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.backend_neutral

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "keras_transformer"
_spec = importlib.util.spec_from_file_location(
    "import_graph", ROOT / "scripts" / "import_graph.py"
)
import_graph = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(import_graph)

MODULES = import_graph.modules(PACKAGE)
EDGES = import_graph.import_edges(MODULES)
FAMILIES = import_graph.families(EDGES, MODULES)


def test_the_graph_sees_the_imports_it_should():
    # A check of the checker: known edges are found, lazy ones included.
    assert EDGES["keras_transformer.registry"] == {
        "keras_transformer.utils.optional_imports"
    }
    assert (
        "keras_transformer.decoding.search"
        in EDGES["keras_transformer.decoding.generator"]
    )
    assert (
        "keras_transformer.training.distribution"
        in EDGES["keras_transformer.cli.commands"]
    )  # Imported inside a function.


def test_no_import_circle():
    assert import_graph.circles(EDGES) == []


def test_no_family_loop():
    assert import_graph.circles(FAMILIES) == []


def test_every_import_goes_down_the_family_order():
    # Function-level imports included: a lazy import up the order is a
    # loop all the same, only later.
    assert import_graph.against_the_order(FAMILIES) == []


def test_the_order_check_names_an_import_up_or_sideways_and_an_unplaced_family():
    planted = {  # `families`' nodes: folders, then top-level modules.
        "decoding/": {"keras_transformer.model", "run/"},  # Down: allowed.
        "keras_transformer.config": {"decoding/"},
        "training/": {"export/", "utils/"},
        "keras_transformer.newcomer": {"utils/"},
    }
    assert import_graph.against_the_order(planted) == [
        "config imports decoding/ (up FAMILY_ORDER)",
        "newcomer has no row in FAMILY_ORDER (scripts/import_graph.py)",
        "training/ imports export/ (sideways FAMILY_ORDER)",
    ]


def test_the_architecture_page_shows_the_family_order():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert f"```text\n{import_graph.order_text()}```" in page, (
        "docs/architecture.md, 'Who may import whom': paste "
        "`python scripts/import_graph.py --order`"
    )


def test_no_module_imports_its_own_family_face():
    assert import_graph.upward_imports(EDGES, MODULES) == []


def test_the_model_core_stays_at_the_top_level():
    # `.keras` files and checkpoints name these modules' classes.
    for name in ("config", "model", "losses", "metrics", "schedules"):
        assert (PACKAGE / f"{name}.py").is_file(), name
    assert (PACKAGE / "layers" / "__init__.py").is_file()


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_opens_with_its_role_in_one_line(name):
    doc = ast.get_docstring(ast.parse(MODULES[name].read_text(encoding="utf-8")))
    assert doc, f"{MODULES[name]} has no opening docstring"
    first = doc.splitlines()[0]
    assert first.endswith((".", ":")) and len(first) <= 88, first


HEAVY = ("keras", "tensorflow", "jax", "torch")
COMMANDS = ("train", "prepare", "translate", "evaluate", "average", "export")
COMMANDS += ("serve", "summary")


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_starts_no_keras_and_no_backend(command):
    argv = ["--help"] if command is None else [command, "--help"]
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['keras-transformer', *{argv!r}]\n"
        "try:\n"
        "    runpy.run_module('keras_transformer', run_name='__main__')\n"
        "except SystemExit as stop:\n"
        "    assert stop.code == 0, stop.code\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "usage: keras-transformer" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "[]"
