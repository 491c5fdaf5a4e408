"""The quick start's shell blocks as one bash script, for the smoke test.

scripts/smoke_single_backend.sh runs the command-line quick start of
docs/quickstart.md as written: this prints its shell blocks, in order, as
one script (its stdout), with only these changes, each checked here:

- the blocks that make the environment (`-m venv`, `pip install`) run in
  the repository (`pip install -e "."`), with the page's `.venv` renamed to
  "$QUICKSTART_VENV" (the repository's own `.venv` is the development
  environment), and, for a backend other than the one the page installs, the
  extra and KERAS_BACKEND the page's comment offers for it; the extras must
  be that backend's and `serve`, nothing else;
- the other blocks run in "$QUICKSTART_WORK", so that `runs/demo` lands there;
- the line `keras-transformer serve ...` (it runs until stopped) becomes
  `quickstart_serve keras-transformer serve ...`: the smoke script defines
  that function (background, /readyz, one translation, SIGTERM);
- `git clone ...` and the `cd` into the clone after it are left out: the
  script runs in the clone.

Every command line of the README's copy of the quick start must be one of
the page's, so that the README shows only commands this script runs. Exits 1,
naming the page and line, when the blocks are not found or not as expected.

Usage: python3 scripts/quickstart_blocks.py [--backend jax|tensorflow|torch]
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "quickstart.md"
README = ROOT / "README.md"
SECTION = "## The command line"
SHELLS = ("bash", "sh", "shell")
BACKENDS = ("jax", "tensorflow", "torch")
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
VENV = re.compile(r"(?<![\w./-])\.venv(?![\w-])")
EXTRAS = re.compile(r"""pip install -e ["']?\.\[([\w,-]+)\]["']?""")
SERVE = re.compile(r"^keras-transformer serve\b")


class QuickStartError(Exception):
    pass


def shell_blocks(text: str, start: int = 0, end: int | None = None):
    """(first line number, code) of each shell block of text[start:end]."""
    end = len(text) if end is None else end
    blocks = []
    for match in FENCE.finditer(text, start, end):
        if match.group(1) in SHELLS:
            line = text.count("\n", 0, match.start(2)) + 1
            blocks.append((line, match.group(2)))
    return blocks


def section(text: str, heading: str, where: str) -> tuple[int, int]:
    """The span of the section under `heading`, up to the next of its level."""
    found = re.search(rf"^{re.escape(heading)}\s*$", text, re.M)
    if not found:
        raise QuickStartError(f"{where}: no section '{heading}'")
    level = heading.split()[0]
    after = re.search(rf"^{level} ", text[found.end() :], re.M)
    return found.end(), found.end() + after.start() if after else len(text)


def logical_lines(code: str) -> list[str]:
    """Commands with backslash continuations joined, comments and blank lines
    dropped, whitespace collapsed (how two copies of a command compare)."""
    joined = re.sub(r"\\\n", " ", code)
    lines = []
    for line in joined.splitlines():
        words = shlex.shlex(line, posix=False, punctuation_chars=False)
        words.whitespace_split = True
        words.commenters = "#"
        command = " ".join(words)
        if command:
            lines.append(command)
    return lines


def without_clone(code: str) -> str:
    """The block less `git clone ...` and the `cd` into the clone after it."""
    kept, after_clone = [], False
    for text in code.splitlines():
        if text.startswith("git clone ") or (after_clone and text.startswith("cd ")):
            after_clone = text.startswith("git clone ")
            continue
        after_clone = False
        kept.append(text)
    return "\n".join(kept) + "\n"


def makes_environment(code: str) -> bool:
    return "-m venv" in code or "pip install" in code


def install_blocks(blocks: list[tuple[int, str]], backend: str) -> list[str]:
    """The blocks that make the environment, checked and adapted (above)."""
    page = PAGE.relative_to(ROOT)
    code = "".join(c for _, c in blocks)
    where = f"{page} line {blocks[0][0]}" if blocks else str(page)
    if "-m venv" not in code or not VENV.search(code):
        raise QuickStartError(
            f"{where}: the quick start makes no .venv (python -m venv)"
        )
    extras = EXTRAS.findall(code)
    chosen = re.findall(r"export KERAS_BACKEND=(\w+)", code)
    if len(extras) != 1 or len(chosen) != 1:
        raise QuickStartError(
            f"{where}: the install must have one `pip install -e "
            f'".[EXTRAS]"` and one `export KERAS_BACKEND=NAME`'
        )
    page_backend, adapted = chosen[0], []
    for _, block in blocks:
        if backend != page_backend:
            offered = f"[{backend},serve]"
            if offered not in code:
                raise QuickStartError(f"{where}: the install line offers no {offered}")
            block = block.replace(f"[{extras[0]}]", offered, 1)
            block = block.replace(
                f"KERAS_BACKEND={page_backend}", f"KERAS_BACKEND={backend}"
            )
        adapted.append(VENV.sub('"$QUICKSTART_VENV"', block))
    installed = extras[0] if backend == page_backend else f"{backend},serve"
    if sorted(installed.split(",")) != sorted([backend, "serve"]):
        raise QuickStartError(
            f"{where}: the install line installs [{installed}]; the single-backend "
            f"smoke checks a [{backend},serve] install (one backend and the server)"
        )
    return adapted


def command_block(code: str, line: int) -> tuple[str, bool]:
    lines, served = [], False
    for number, text in enumerate(code.splitlines(), line):
        if SERVE.match(text):
            if text.rstrip().endswith("\\"):
                raise QuickStartError(f"{PAGE.name} line {number}: serve on one line")
            command = " ".join(logical_lines(text))
            lines.append(f"quickstart_serve {command}")
            served = True
        else:
            lines.append(text)
    return "\n".join(lines) + "\n", served


def readme_lines() -> list[tuple[int, str]]:
    text = README.read_text(encoding="utf-8")
    found = re.search(r"^## Quick start\b.*command line.*$", text, re.M | re.I)
    if not found:
        raise QuickStartError(
            "README.md: no '## Quick start: the command line' section"
        )
    start, end = section(text, found.group(0), "README.md")
    blocks = shell_blocks(text, start, end)
    if not blocks:
        raise QuickStartError(f"README.md: no shell block under '{found.group(0)}'")
    return [(line, command) for line, code in blocks for command in logical_lines(code)]


def script(backend: str) -> str:
    text = PAGE.read_text(encoding="utf-8")
    page = PAGE.relative_to(ROOT)
    start, end = section(text, SECTION, str(page))
    blocks = [
        (line, without_clone(code))
        for line, code in shell_blocks(text, start, end)
        if logical_lines(without_clone(code))
    ]
    setup = [(line, code) for line, code in blocks if makes_environment(code)]
    if not setup or not blocks or blocks[: len(setup)] != setup or len(blocks) < 2:
        raise QuickStartError(
            f"{page}: '{SECTION}' must hold shell blocks that make the environment "
            "(python -m venv, pip install), then the blocks of commands"
        )
    page_lines = {command for _, code in blocks for command in logical_lines(code)}
    for line, command in readme_lines():
        if command not in page_lines:
            raise QuickStartError(
                f"README.md line {line}+: `{command}` is not a command of {page}'s "
                "quick start (the README's copy runs only what the page runs)"
            )
    out = ["# The quick start of docs/quickstart.md (scripts/quickstart_blocks.py)"]
    codes = install_blocks(setup, backend) + [c for _, c in blocks[len(setup) :]]
    served = False
    for number, ((line, _), code) in enumerate(zip(blocks, codes), 1):
        where = f"{number} of {len(blocks)} ({page} line {line})"
        out.append(f'echo "=== quick start block {where}"')
        if number <= len(setup):
            out += ['cd "$QUICKSTART_REPO"', code]
        else:
            body, serves = command_block(code, line)
            served |= serves
            out += ['cd "$QUICKSTART_WORK"', body]
    if not served:
        raise QuickStartError(f"{page}: no `keras-transformer serve` line")
    out.append('echo "=== quick start: every block ran"')
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=BACKENDS, default="jax")
    args = parser.parse_args(argv)
    try:
        sys.stdout.write(script(args.backend))
    except QuickStartError as error:
        print(f"quickstart_blocks.py: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
