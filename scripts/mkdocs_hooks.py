"""mkdocs hooks of the documentation site (mkdocs.yml, `hooks:`).

The "Command line" page (docs/cli.md) holds a marker that becomes the
reference `keras_transformer.cli.reference` generates from the parser, so
the page cannot drift from the flags. The docs environment has no Keras
backend, and the package's `__init__` registers the model with Keras: the
parser and its settings need neither, so they are imported here without the
package's `__init__` (which also proves that `--help` starts no Keras).

The repository link in the header stays a plain link: mkdocs-material would
fetch the repository's stars and forks from the GitHub API to show beside
it, and the site loads nothing from the network (tests/test_site.py).
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

from mkdocs.plugins import event_priority

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- the command-line reference is generated here -->"


def _cli_reference() -> str:
    if "keras_transformer" not in sys.modules:
        package = types.ModuleType("keras_transformer")
        package.__path__ = [str(ROOT / "keras_transformer")]
        sys.modules["keras_transformer"] = package
    from keras_transformer.cli.reference import markdown

    return markdown()


# The notebooks the site renders (mkdocs-jupyter), from notebooks/, where they
# are run and committed: added to the site's files rather than copied into
# docs/, so there is one copy of each.
NOTEBOOKS = (
    "transformer_translation",
    "transformer_translation_jax",
    "paper_ablations",
    "parsing_table4",
)


@event_priority(50)  # Before mkdocs-jupyter's, which renders what it finds.
def on_files(files, config):
    from mkdocs.structure.files import File

    for name in NOTEBOOKS:
        files.append(
            File(
                f"notebooks/{name}.ipynb",
                src_dir=str(ROOT),
                dest_dir=config["site_dir"],
                use_directory_urls=config["use_directory_urls"],
            )
        )
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, _cli_reference())


def on_post_page(output: str, page, config) -> str:
    return output.replace(' data-md-component="source"', "")
