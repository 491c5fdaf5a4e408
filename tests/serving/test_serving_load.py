"""`benchmarks/serving_load.py --write`: the tables of a section of
docs/benchmarks.md are replaced between the section's markers, and its prose
is kept (a copy of the page in a temporary directory; no server, no Keras)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

# Neutral: Markdown editing and a script's --help, no Keras at all.
pytestmark = pytest.mark.backend_neutral

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "serving_load.py"


def _load():
    spec = importlib.util.spec_from_file_location("serving_load", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


serving_load = _load()
BEGIN, END = serving_load.WRITE_BEGIN, serving_load.WRITE_END

PAGE = f"""# Benchmarks

## HTTP serving

Intro prose.

### HTTP serving: operations

How it was measured (prose above the tables).

{BEGIN}

| engine | old |
| --- | --- |
| keras | 1 |

{END}

- **Start to ready.** A finding (prose below the tables).

### HTTP serving: batching flags

Prose of a section without markers.

| engine | older |
| --- | --- |

## Data

The next part.
"""

NEW = "machine line\n\n| engine | new |\n| --- | --- |\n| keras | 2 |"


def test_write_replaces_only_the_tables_between_the_markers(tmp_path):
    docs = tmp_path / "benchmarks.md"
    docs.write_text(PAGE, encoding="utf-8")
    done = serving_load.write_tables("HTTP serving: operations", NEW, docs)
    assert "prose kept" in done
    text = docs.read_text(encoding="utf-8")
    assert text == PAGE.replace("| engine | old |\n| --- | --- |\n| keras | 1 |", NEW)
    again = serving_load.write_tables("HTTP serving: operations", NEW, docs)
    assert "prose kept" in again and docs.read_text(encoding="utf-8") == text


def test_a_section_without_markers_gets_them_at_its_end(tmp_path):
    docs = tmp_path / "benchmarks.md"
    docs.write_text(PAGE, encoding="utf-8")
    done = serving_load.write_tables("HTTP serving: batching flags", NEW, docs)
    assert "had no markers" in done
    text = docs.read_text(encoding="utf-8")
    before, after = text.split("### HTTP serving: batching flags\n")
    assert before == PAGE.split("### HTTP serving: batching flags\n")[0]
    assert after == (
        "\nProse of a section without markers.\n\n| engine | older |\n| --- | --- |"
        f"\n\n{BEGIN}\n\n{NEW}\n\n{END}\n\n## Data\n\nThe next part.\n"
    )
    # The next --write finds the markers it left.
    serving_load.write_tables("HTTP serving: batching flags", "x", docs)
    assert docs.read_text(encoding="utf-8") == text.replace(NEW, "x")


def test_a_missing_section_is_appended(tmp_path):
    docs = tmp_path / "benchmarks.md"
    docs.write_text(PAGE, encoding="utf-8")
    assert "added" in serving_load.write_tables(
        "HTTP serving: start to ready", NEW, docs
    )
    text = docs.read_text(encoding="utf-8")
    assert text == (
        PAGE + f"\n### HTTP serving: start to ready\n\n{BEGIN}\n\n{NEW}\n\n{END}\n"
    )


def test_the_help_says_what_write_keeps():
    shown = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    flat = " ".join(shown.split())
    assert "between its marker lines, keeping the section's prose" in flat
    assert "--ready-only" in flat and "--backends" in flat


def test_a_section_is_written_on_the_benchmark_page_that_holds_it():
    """The figures are split by topic over docs/benchmarks.md and
    docs/benchmarks-*.md: --write finds the page of its section."""
    common = sys.modules["_common"]  # Imported by the script.
    page = common.benchmark_page("HTTP serving: operations")
    assert page == ROOT / "docs" / "benchmarks-http-operations.md"
    assert "\n### HTTP serving: operations\n" in page.read_text(encoding="utf-8")
    assert common.benchmark_page("A section no page has") == common.DOCS
