"""The package's import graph, and its longest functions and modules.

Usage: python scripts/import_graph.py [--package DIR] [--list] [--order]

Prints, from the source alone (nothing is imported):
- modules, import edges and levels (the longest chain of imports), counting
  every `import` in a module, at its top or inside a function;
- the same with each folder of the package as one family (data/, layers/,
  decoding/, ...) and each top-level module as its own;
- import circles, and imports of an enclosing package's own `__init__`
  (a module reaching up to its family's face), both of which should be none;
- family loops, and imports that go up `FAMILY_ORDER` (none either:
  tests/test_layout.py fails on one);
- the longest functions (lines of code: no docstring, comment or blank line)
  and the longest modules.
`--list` adds each module's level and what it imports; `--order` prints
the order as docs/architecture.md shows it ("Who may import whom").
"""

from __future__ import annotations

import argparse
import ast
import collections
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The families (folders, with a trailing slash) and top-level modules of
# the package from the bottom up: each may import what is on lower rows
# only, never a row above nor a neighbour on its own row. Written once: the
# layout test checks every import against it, and docs/architecture.md
# shows it as `--order` prints it. A new folder or top-level module takes
# a row here before its first import is accepted.
FAMILY_ORDER: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("they import nothing of ours", ("utils/", "config", "schedules")),
    ("the model's parts", ("layers/", "losses", "registry")),
    ("what counts and draws them", ("metrics", "plots")),
    ("trees: a format library, no Keras", ("parsing/",)),
    ("corpora, tokenizers, the token store", ("data/",)),
    ("runs and presets on disk", ("run/",)),
    ("the model", ("model",)),
    ("from a model to text", ("decoding/",)),
    ("training; exports", ("training/", "export/")),
    ("the Keras task; the HTTP server", ("task/", "serving/")),
    ("the command line", ("cli/",)),
    ("the package's face and `python -m`", ("__init__", "__main__")),
)  # fmt: skip


def modules(package: Path) -> dict[str, Path]:
    """Dotted module name -> file, a package under its own name."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported(node: ast.AST, package: str) -> list[str]:
    """The dotted names an import statement names (relative ones resolved)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(parts + ([base] if base else []))
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def import_edges(found: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package modules it imports (the most specific that exist)."""
    top = next(iter(found)).split(".")[0]
    edges: dict[str, set[str]] = collections.defaultdict(set)
    for name, path in found.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = _imported(node, package)
            if isinstance(node, ast.ImportFrom) and len(names) > 1:
                base = names[-1]
                # `from pkg import sub` imports the submodule; else pkg itself.
                names = [n for n in names[:-1] if n in found] or [base]
            for target in names:
                while target and target not in found:
                    target = target.rpartition(".")[0]
                if target.split(".")[0] == top and target and target != name:
                    edges[name].add(target)
    return edges


def levels(edges: dict[str, set[str]], nodes) -> dict[str, int]:
    """Each node's level: 1 + the highest level of what it imports."""
    level: dict[str, int] = {}

    def visit(node: str, path: tuple[str, ...]) -> int:
        if node not in level:
            level[node] = 1  # A circle ends here rather than recursing.
            below = [visit(n, (*path, node)) for n in edges.get(node, ())]
            level[node] = 1 + max(below, default=0)
        return level[node]

    for node in nodes:
        visit(node, ())
    return level


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Import circles, each as the modules on it."""
    state: dict[str, int] = {}
    found = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for other in sorted(edges.get(node, ())):
            if state.get(other) == 1:
                found.append([*stack[stack.index(other) :], other])
            elif other not in state:
                visit(other, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [])
    return found


def upward_imports(edges: dict[str, set[str]], found) -> list[tuple[str, str]]:
    """(module, package) where a module imports the `__init__` of a package
    that encloses it."""
    return [
        (name, target)
        for name, targets in edges.items()
        for target in targets
        if found[target].name == "__init__.py" and name.startswith(target + ".")
    ]


def families(edges: dict[str, set[str]], found) -> dict[str, set[str]]:
    """The graph with each folder of the package as one node."""
    package = next(iter(found))

    def family(name: str) -> str:
        parts = name.split(".")
        if len(parts) > 1 and (found[package].parent / parts[1]).is_dir():
            return f"{parts[1]}/"
        return name

    grouped: dict[str, set[str]] = {family(n): set() for n in found}
    for name, targets in edges.items():
        grouped[family(name)] |= {family(t) for t in targets} - {family(name)}
    return grouped


def family_name(node: str) -> str:
    """`families`' node as FAMILY_ORDER spells it (`config`, `data/`, the
    root package as `__init__`)."""
    if node.endswith("/"):
        return node
    parts = node.split(".")
    return "__init__" if len(parts) == 1 else parts[-1]


def family_rows() -> dict[str, int]:
    """Each family's row in FAMILY_ORDER, from 0 at the bottom."""
    return {name: row for row, (_, names) in enumerate(FAMILY_ORDER) for name in names}


def against_the_order(grouped: dict[str, set[str]]) -> list[str]:
    """Each family import that is not down FAMILY_ORDER (up, or sideways on
    one row), and each family the order does not place, in words."""
    rows = family_rows()
    found = []
    for node, targets in sorted(grouped.items()):
        name = family_name(node)
        if name not in rows:
            found.append(f"{name} has no row in FAMILY_ORDER (scripts/import_graph.py)")
            continue
        for target in sorted(targets):
            other = family_name(target)
            if other in rows and rows[other] >= rows[name]:
                where = "up" if rows[other] > rows[name] else "sideways"
                found.append(f"{name} imports {other} ({where} FAMILY_ORDER)")
    return found


def order_text() -> str:
    """FAMILY_ORDER from the top down, as docs/architecture.md shows it."""
    width = max(len(", ".join(names)) for _, names in FAMILY_ORDER)
    lines = [
        f"{', '.join(names):<{width}}  {role}" for role, names in reversed(FAMILY_ORDER)
    ]
    return "\n".join(lines) + "\n"


def code_lines(lines: list[str], node: ast.AST) -> int:
    """A function's lines without its docstring, comments and blank lines."""
    first = node.body[0]
    docstring = set()
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        docstring = set(range(first.lineno, first.end_lineno + 1))
    return sum(
        1
        for number in range(node.lineno, node.end_lineno + 1)
        if number not in docstring
        and lines[number - 1].strip()
        and not lines[number - 1].strip().startswith("#")
    )


def function_lengths(found: dict[str, Path]) -> list[tuple[int, str]]:
    """(lines of code, "file:line name") of every function, longest first."""
    rows = []
    top = next(iter(found.values())).parent.parent
    for path in found.values():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                where = f"{path.relative_to(top)}:{node.lineno} {node.name}"
                rows.append((code_lines(lines, node), where))
    return sorted(rows, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", default=str(ROOT / "keras_transformer"))
    parser.add_argument("--list", action="store_true", help="each module's imports")
    parser.add_argument("--order", action="store_true", help="print FAMILY_ORDER")
    args = parser.parse_args()
    if args.order:
        print(order_text(), end="")
        return
    found = modules(Path(args.package).resolve())
    edges = import_edges(found)
    level = levels(edges, found)
    print(
        f"modules {len(found)}, import edges {sum(map(len, edges.values()))}, "
        f"levels {max(level.values())}"
    )
    grouped = families(edges, found)
    grouped_level = levels(grouped, grouped)
    print(
        f"families and top-level modules {len(grouped)}, import edges "
        f"{sum(map(len, grouped.values()))}, levels {max(grouped_level.values())}"
    )
    print(f"import circles: {circles(edges) or 'none'}")
    print(f"family loops: {circles(grouped) or 'none'}")
    print(f"imports against FAMILY_ORDER: {against_the_order(grouped) or 'none'}")
    print(f"imports of an enclosing package: {upward_imports(edges, found) or 'none'}")
    print("longest functions (lines of code):")
    for count, where in function_lengths(found)[:8]:
        print(f"  {count:4d}  {where}")
    sizes = sorted(
        (len(p.read_text(encoding="utf-8").splitlines()), n) for n, p in found.items()
    )
    print("longest modules (lines):")
    for count, name in reversed(sizes[-5:]):
        print(f"  {count:4d}  {name}")
    if args.list:
        for name in sorted(found, key=lambda n: (-level[n], n)):
            print(f"{level[name]:2d} {name}: {', '.join(sorted(edges.get(name, ())))}")


if __name__ == "__main__":
    main()
