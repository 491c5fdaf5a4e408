"""scripts/quickstart_blocks.py: the quick start's shell blocks, as the
single-backend smoke runs them (scripts/smoke_single_backend.sh runs the
script it prints; these check what it accepts and refuses, in milliseconds).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.backend_neutral

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location(
    "quickstart_blocks", ROOT / "scripts" / "quickstart_blocks.py"
)
blocks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(blocks)

INSTALL = """```bash
python -m venv .venv && . .venv/bin/activate
pip install -e ".[jax,serve]" && export KERAS_BACKEND=jax  # or [torch,serve]
```
"""
COMMANDS = """```bash
keras-transformer train --run-dir runs/demo \\
    --max-steps ${QUICKSTART_STEPS:-2400}
keras-transformer serve --run-dir runs/demo   # http://127.0.0.1:8080/
```
"""
README = """# x

## Quick start: the command line

```bash
keras-transformer train --run-dir runs/demo --max-steps ${QUICKSTART_STEPS:-2400}
```

## Next
"""


def page(*parts: str) -> str:
    return (
        "# Quick start\n\n## The command line\n\n" + "\n".join(parts) + "\n## Python\n"
    )


@pytest.fixture
def files(tmp_path, monkeypatch):
    def write(text: str, readme: str = README) -> None:
        (tmp_path / "docs").mkdir(exist_ok=True)
        (tmp_path / "docs" / "quickstart.md").write_text(text)
        (tmp_path / "README.md").write_text(readme)

    monkeypatch.setattr(blocks, "ROOT", tmp_path)
    monkeypatch.setattr(blocks, "PAGE", tmp_path / "docs" / "quickstart.md")
    monkeypatch.setattr(blocks, "README", tmp_path / "README.md")
    return write


def test_the_real_page_gives_a_script_with_serve_in_the_background():
    script = blocks.script("jax")
    assert 'python -m venv "$QUICKSTART_VENV"' in script
    assert 'pip install -e ".[jax,serve]"' in script
    assert "\nquickstart_serve keras-transformer serve --run-dir runs/demo\n" in script
    assert script.index('cd "$QUICKSTART_REPO"') < script.index('cd "$QUICKSTART_WORK"')
    assert "QUICKSTART_STEPS" in script


def test_blocks_in_order_clone_left_out_other_backend_offered(files):
    clone = "```bash\ngit clone https://example.org/x.git\ncd x\n```\n"
    files(page(clone, INSTALL, COMMANDS))
    script = blocks.script("torch")
    assert "git clone" not in script and "cd x" not in script
    assert 'pip install -e ".[torch,serve]" && export KERAS_BACKEND=torch' in script
    assert "block 1 of 2" in script and "block 2 of 2" in script
    assert "--max-steps ${QUICKSTART_STEPS:-2400}" in script


@pytest.mark.parametrize(
    "text, readme, message",
    [
        (page(INSTALL), README, "then the blocks of commands"),
        (page(COMMANDS), README, "then the blocks of commands"),
        (page(INSTALL.replace("jax,serve", "jax"), COMMANDS), README, "installs [jax]"),
        (page(INSTALL, COMMANDS.replace("serve", "summary")), README, "no `keras"),
        (page(INSTALL, COMMANDS), README.replace("2400", "24"), "README.md line"),
        (
            page(INSTALL, COMMANDS).replace("## The command", "## A"),
            README,
            "no section",
        ),
    ],
)
def test_refused_clearly(files, text, readme, message):
    files(text, readme)
    with pytest.raises(blocks.QuickStartError, match=message.replace("[", r"\[")):
        blocks.script("jax")


def test_no_other_backend_offered(files):
    files(page(INSTALL, COMMANDS))
    with pytest.raises(blocks.QuickStartError, match=r"offers no \[tensorflow,serve\]"):
        blocks.script("tensorflow")
