"""The Python snippets of the README and of the documentation (docs/*.md)
run as written.

Backend-neutral (tests/conftest.py): the snippets are examples of library
code that is the same on every backend, run here so that they stay runnable
as written; they are not the per-backend checks of what they call, which
run in every suite: fit on text pairs, validation data, generate and presets
in tests/task/test_seq2seq_lm.py, the forward pass of `build_transformer`
in tests/test_model.py, `training`'s splits, tokenizer, batches and model
in tests/training/test_job.py, `Translator` in
tests/decoding/test_translator.py. They run in one suite (torch's).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.backend_neutral

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _snippets() -> list[tuple[str, str]]:
    """(where, code) of every ```python block, `where` naming page and block."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        blocks = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
        name = page.relative_to(ROOT).as_posix()
        found += [(f"{name} snippet {i + 1}", code) for i, code in enumerate(blocks)]
    return found


ALL_SNIPPETS = _snippets()
# These need an exported model: tests/export/test_savedmodel.py runs them.
SERVING_SNIPPETS = [code for _, code in ALL_SNIPPETS if "tf.saved_model.load" in code]
CTRANSLATE2_SNIPPETS = [
    code for _, code in ALL_SNIPPETS if "import ctranslate2" in code
]
# These need MarianMT checkpoints and exports on disk:
# tests/export/test_huggingface.py runs them.
HUGGINGFACE_SNIPPETS = [
    code for where, code in ALL_SNIPPETS if where.startswith("docs/huggingface.md")
]
# A block repeated word for word (the README's quick start is also the
# quick start page's) runs once, under its first place.
SNIPPETS = list(
    {
        code: (where, code)
        for where, code in reversed(ALL_SNIPPETS)
        if code not in SERVING_SNIPPETS + CTRANSLATE2_SNIPPETS + HUGGINGFACE_SNIPPETS
    }.values()
)[::-1]


def test_readme_and_docs_have_python_snippets():
    readme = [where for where, _ in SNIPPETS if where.startswith("README.md")]
    assert readme, "the README's Python quick start is a snippet that runs"
    assert len(SNIPPETS) >= 3


def test_readme_is_one_screen_and_its_links_resolve():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200, "the manual is the docs site"
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if "://" not in t]
    assert local, "the README points into the documentation"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README links to missing files: {missing}"


@pytest.mark.slow
@pytest.mark.parametrize("where, code", SNIPPETS, ids=[w for w, _ in SNIPPETS])
def test_snippet_runs(where, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # Whatever a snippet writes lands here.
    exec(compile(code, where, "exec"), {"__name__": "__docs__"})
