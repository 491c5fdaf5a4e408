"""The command line's reference in Markdown, generated from its parser.

The documentation site's "Command line" page is this text: every command and
flag with its default, accepted values and help, read from the parser that
`--help` prints, which is itself made from the settings dataclasses. So the
reference cannot drift from the flags. Light: it starts no Keras.
"""

from __future__ import annotations

import argparse
import html

from keras_transformer.cli.parser import COMMANDS, DESCRIPTION, build_parser
from keras_transformer.utils.setting_fields import range_text

_HEADER = "| flag | default | accepts | what it does |"


def markdown() -> str:
    """The reference: the command's summary, then a section per command."""
    parser = build_parser()
    commands = next(
        action
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    parts = ["```text", DESCRIPTION.strip(), "```", ""]
    for name, (summary, description, _) in COMMANDS.items():
        parts += _command(name, summary, description, commands.choices[name])
    return "\n".join(parts)


def _command(
    name: str, summary: str, description: str | None, parser: argparse.ArgumentParser
) -> list[str]:
    lines = [f"## `keras-transformer {name}`", "", summary[0].upper() + summary[1:]]
    if description:
        lines += ["", "```text", description.strip(), "```"]
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if a.dest != "help"]
        if not actions:
            continue
        title = "positional arguments" if not actions[0].option_strings else "flags"
        if group.title not in ("options", "optional arguments", "positional arguments"):
            title = f"flags: {group.title}"
        lines += ["", f"**{title[0].upper() + title[1:]}**", ""]
        lines += [_HEADER, "| --- | --- | --- | --- |"]
        lines += [_row(action) for action in actions]
    return [*lines, ""]


def _row(action: argparse.Action) -> str:
    flag = ", ".join(action.option_strings) or action.dest
    if action.nargs in ("*", "+"):
        flag += " ..."
    # Markdown tables hold HTML: "OUT.backup-<time>" would be a <time> tag.
    help_text = html.escape(action.help or "", quote=False).replace("|", "\\|")
    # The default is its own column: drop the "(default: ...)" help repeats.
    help_text = help_text.split(" (default: ")[0]
    required = " (required)" if action.required else ""
    return (
        f"| `{flag}`{required} | {_default(action)} | {_accepts(action)} "
        f"| {help_text} |"
    )


def _default(action: argparse.Action) -> str:
    if isinstance(action, argparse._StoreTrueAction):
        return "off"
    if getattr(action, "default_text", None):  # A default that depends on a flag.
        return action.default_text
    if action.default is None or action.default == []:
        return "—"
    if isinstance(action.default, list):
        return " ".join(f"`{value}`" for value in action.default)
    return f"`{action.default}`"


def _accepts(action: argparse.Action) -> str:
    if isinstance(action, argparse._StoreTrueAction):
        return "a switch"
    setting = getattr(action, "setting", None)
    if setting is not None and range_text(setting):
        return range_text(setting)
    if action.choices is not None:
        return "one of " + ", ".join(f"`{c}`" for c in action.choices)
    bounds = getattr(action.type, "bounds", None)
    if bounds is not None:
        minimum, maximum = bounds
        return f">= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
    if action.metavar == "KEY=VALUE":
        return "KEY=VALUE"
    return "text"
