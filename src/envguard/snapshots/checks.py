"""The hand-written pieces of the generated fast paths (snapshots/shape.py): the checks a
type annotation cannot spell (one line of text, a real time) and the pydantic-free twins of
the models' validators. Each answers True only where the model would take the value
unchanged; False sends the value to the model, which then decides.

The generator (envguard.dev) maps every validator of snapshots/models.py to a pair here
(VALIDATOR_HOOKS) and refuses to generate while one is missing.
"""

from __future__ import annotations

import re

from envguard.reading import UNSAFE_CHARS
from envguard.redact import redact_env

TYPE_CHECKING = False  # typing is not loaded for a command's start

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime
    from typing import Any

_UNSAFE = re.compile("[" + UNSAFE_CHARS + "]")
# pydantic takes a lone surrogate in a plain str field but refuses it where a pattern or a
# length applies (it cannot make that text UTF-8): those fields are vouched for without one.
_SURROGATE = re.compile("[\ud800-\udfff]")
_INF = float("inf")
# What created_now() writes: UTC, seconds or microseconds (ASCII digits: \d takes any
# script's, which a snapshot file may hold and datetime does not read).
_CREATED = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{6})?Z")

# The pattern the models' one-line types (Line, Requirement) carry.
LINE_PATTERN = "^[^" + UNSAFE_CHARS + "]*$"


def line(value: object) -> bool:
    """One line of text (the models' ``Line`` pattern)."""
    return type(value) is str and (
        value.isprintable() or not (_UNSAFE.search(value) or _SURROGATE.search(value))
    )


def bounded(value: object, most: int) -> bool:
    """A string of at most ``most`` characters (a model's ``max_length``)."""
    return type(value) is str and len(value) <= most and _no_surrogate(value)


def matches(value: object, pattern: re.Pattern[str], most: int | None = None) -> bool:
    """A string the model's ``pattern`` (and ``max_length``) accept."""
    return (
        type(value) is str
        and (most is None or len(value) <= most)
        and pattern.search(value) is not None
        and _no_surrogate(value)
    )


def _no_surrogate(value: str) -> bool:
    # (a printable string holds none: each check's common case told at C speed)
    return value.isprintable() or not _SURROGATE.search(value)


def strs(items: object) -> bool:
    return type(items) is list and all(type(s) is str for s in items)


def finite_float(value: object) -> bool:
    """A float the model keeps as it is: not NaN or infinite (an int would become 5.0)."""
    return type(value) is float and value == value and value not in (_INF, -_INF)


def number(value: object) -> bool:
    """int | float | str as a metric: no bool, no NaN or infinity."""
    return type(value) in (int, str) or finite_float(value)


def created(value: object) -> bool:
    """A time as created_now() writes it, and a real one (not the 31st of February, as
    datetime.fromisoformat tells it; told here without datetime, which a snapshot's
    writing does not otherwise load)."""
    if type(value) is not str or not _CREATED.fullmatch(value):
        return False
    year, month, day = int(value[:4]), int(value[5:7]), int(value[8:10])
    hour, minute, second = int(value[11:13]), int(value[14:16]), int(value[17:19])
    if not (year >= 1 and 1 <= month <= 12 and hour < 24 and minute < 60 and second < 60):
        return False
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    return 1 <= day <= (29 if leap and month == 2 else _DAYS[month - 1])


_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def created_value(value: str) -> datetime:
    """The datetime pydantic's validation makes of ``created`` (UTC as its own TzInfo)."""
    from datetime import datetime

    from pydantic_core import TzInfo

    return datetime.fromisoformat(value[:-1]).replace(tzinfo=TzInfo(0))


def env_redacted(env: object) -> bool:
    # The model redacts (redact_env sorts, digests secrets): taken as is only when it is so.
    return (
        type(env) is dict
        and all(type(k) is str and type(v) is str for k, v in env.items())
        and redact_env(env) == env
    )


def env_value(env: dict[str, str]) -> dict[str, str]:
    return dict(sorted(env.items()))  # as the model's redact_env sorts it


# The most variables Snapshot.env_at_start holds.
MAX_AT_START = 200


def start_values(start: dict[str, str | None]) -> dict[str, str | None]:
    """Snapshot.env_at_start as the model keeps it: sorted, each value redacted as ``env``'s
    are (a secret as its digest), None (not set at the start) kept; ValueError for more
    than MAX_AT_START names or a name that is not one line."""
    if len(start) > MAX_AT_START:
        raise ValueError(f"more than {MAX_AT_START} variables")
    for name in start:
        if not line(name):
            raise ValueError(f"a variable name that is not one line: {ascii(name)[:60]}")
    values = redact_env({k: v for k, v in start.items() if v is not None})
    return {k: values.get(k) for k in sorted(start)}


def start_redacted(start: object) -> bool:
    # Taken as is only when the model would keep it so (start_values).
    if start is None:
        return True
    if type(start) is not dict or not all(
        type(k) is str and (v is None or type(v) is str) for k, v in start.items()
    ):
        return False
    try:
        return start_values(start) == start and list(start) == sorted(start)
    except ValueError:
        return False


def start_value(start: dict[str, str | None] | None) -> dict[str, str | None] | None:
    return start


def one_entry_per_package(doc: dict[str, Any]) -> bool:
    # The model refuses two entries for one package: it then says so.
    seen: set[str] = set()
    for p in doc["packages"]:
        if not p["shadowed"]:
            if p["name"] in seen:
                return False
            seen.add(p["name"])
    return True


# A validator of snapshots/models.py -> (its check here, the value it makes or None when
# it keeps the value as it is). Field validators get the field's value, model validators
# the whole object.
VALIDATOR_HOOKS: dict[str, tuple[Callable[..., bool], Callable[..., Any] | None]] = {
    "_no_secret_values": (env_redacted, env_value),
    "_start_redacted": (start_redacted, start_value),
    "_one_entry_per_package": (one_entry_per_package, None),
}

# Serializers of snapshots/models.py whose value document.from_report() and stored()
# write themselves (Snapshot._written_now: schema_minor is always this envguard's).
SERIALIZERS_ALLOWED = frozenset({"_written_now"})
