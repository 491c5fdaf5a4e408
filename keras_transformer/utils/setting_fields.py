"""Dataclass fields that carry their own help text, range and choices.

The convention `TrainOptions` and `SearchSettings` share: each field's
metadata holds what the command line needs to make its flag (`cli`'s
`_add_option`; `tokens_per_batch` is `--tokens-per-batch`) and what
`check_setting` needs to validate it, with a message that names the field
and its flag. Light to import: nothing but the standard library.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any


def setting(
    default,
    help: str,
    *,
    minimum=None,
    maximum=None,
    strict: bool = False,
    choices=None,
    flag: bool = True,
    metavar: str | None = None,
    shown_default: str | None = None,
):
    """A field with what the CLI and validation need.

    `strict`: the value must exceed `minimum` (a zero would mean no work);
    `maximum`: an inclusive upper bound; `flag=False`: no command-line flag;
    `metavar`: the flag's value in the help; `shown_default`: the help's
    "(default: ...)" where the value alone does not say it (None: float32).
    A `tuple[str, ...]` field is a flag of one value or more, repeatable.
    A dict or dataclass default is copied for every instance.
    """
    metadata = {
        "help": help,
        "minimum": minimum,
        "maximum": maximum,
        "strict": strict,
        "choices": choices,
        "flag": flag,
        "metavar": metavar,
        "shown_default": shown_default,
    }
    if isinstance(default, dict) or dataclasses.is_dataclass(default):
        return dataclasses.field(default_factory=type(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def shared_setting(settings, name: str):
    """The field `name` of the dataclass `settings`, for another dataclass
    that offers the same setting: its default, help, range and choices stay
    declared once."""
    (field,) = (f for f in dataclasses.fields(settings) if f.name == name)
    return dataclasses.field(default=field.default, metadata=field.metadata)


def flag_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def check_setting(field: dataclasses.Field, value: Any) -> None:
    """Raise ValueError, naming the field and its flag, for a value of the
    wrong type, not among the choices, not finite or out of range."""
    meta = field.metadata
    minimum, maximum, choices = meta["minimum"], meta["maximum"], meta["choices"]
    where = f"{field.name} ({flag_name(field.name)})"
    if field.type == "bool" and not isinstance(value, bool):
        raise ValueError(f"{where} must be True or False. Received: {value!r}")
    optional = field.type.endswith("| None")
    if (
        choices is not None
        and value not in choices
        and not (optional and value is None)
    ):
        raise ValueError(
            f"{where} must be one of {', '.join(map(str, choices))}. "
            f"Received: {value!r}"
        )
    if minimum is None or value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{where} must be a number. Received: {value!r}")
    if field.type in ("int", "int | None") and not isinstance(value, numbers.Integral):
        raise ValueError(f"{where} must be an integer. Received: {value!r}")
    # NaN compares false with every bound, so it needs its own check.
    if not math.isfinite(value):
        raise ValueError(f"{where} must be a finite number. Received: {value!r}")
    if value < minimum or (meta["strict"] and value == minimum):
        bound = f"> {minimum}" if meta["strict"] else f">= {minimum}"
        raise ValueError(f"{where} must be {bound}. Received: {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(
            f"{where} must be <= {_bound_text(maximum)}. Received: {value!r}"
        )


def range_text(field: dataclasses.Field) -> str:
    """The values `check_setting` accepts, in words: "> 0", ">= 1 and <= 8",
    or the choices; "" where any value of the type goes."""
    meta = field.metadata
    if meta["choices"] is not None:
        return "one of " + ", ".join(map(str, meta["choices"]))
    if meta["minimum"] is None:
        return ""
    text = f"{'>' if meta['strict'] else '>='} {meta['minimum']}"
    if meta["maximum"] is not None:
        text += f" and <= {_bound_text(meta['maximum'])}"
    return text


def _bound_text(maximum: int) -> str:
    """4294967295 -> '4294967295 (< 2**32)': the range as people know it."""
    if isinstance(maximum, int) and maximum > 255 and (maximum + 1) & maximum == 0:
        return f"{maximum} (< 2**{maximum.bit_length()})"
    return str(maximum)
