"""The slowest tests of one or more suites, from pytest's JUnit XML files.

Usage: python scripts/slowest_tests.py [--top N] SUITE.xml [SUITE.xml ...]

Prints each suite's total and its tests by wall time (setup, call and
teardown together, as pytest's JUnit report counts them), slowest first,
each named with its suite (the file's stem: tensorflow.xml -> tensorflow).
scripts/test.sh runs it when the suites go over their time budget.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path


def test_times(path: Path) -> list[tuple[float, str]]:
    """(seconds, test id) of every test case in one JUnit XML file."""
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError) as error:
        raise SystemExit(f"slowest_tests.py: cannot read {path}: {error}") from None
    times = []
    for case in root.iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        name = f"{module}.py::{case.get('name', '?')}"
        times.append((float(case.get("time") or 0.0), name))
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=20, help="tests to list")
    parser.add_argument("reports", nargs="+", type=Path, help="JUnit XML files")
    args = parser.parse_args(argv)
    rows = []
    for report in args.reports:
        times = test_times(report)
        total = sum(seconds for seconds, _ in times)
        print(f"{report.stem}: {len(times)} tests, {total:.0f} s")
        rows += [(seconds, report.stem, name) for seconds, name in times]
    rows.sort(reverse=True)
    for seconds, suite, name in rows[: args.top]:
        print(f"{seconds:8.1f} s  {suite:<10}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
