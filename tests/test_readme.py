"""The README's Python snippets run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
ALL_SNIPPETS = re.findall(
    r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S
)
# The serving snippet needs an exported model; tests/export/test_savedmodel.py runs it.
SERVING_SNIPPETS = [s for s in ALL_SNIPPETS if "tf.saved_model.load" in s]
CTRANSLATE2_SNIPPETS = [s for s in ALL_SNIPPETS if "import ctranslate2" in s]
# Those need an exported model: tests/export/test_savedmodel.py runs them.
SNIPPETS = [s for s in ALL_SNIPPETS if s not in SERVING_SNIPPETS + CTRANSLATE2_SNIPPETS]


def test_readme_has_python_snippets():
    assert len(SNIPPETS) >= 2


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_readme_snippet_runs(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # Whatever a snippet writes lands here.
    code = compile(SNIPPETS[index], f"README.md snippet {index + 1}", "exec")
    exec(code, {"__name__": "__readme__"})
