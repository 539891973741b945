"""TOML read with the one bounded number reader (envguard.reading.read_number): lockfiles,
pyproject.toml and [tool.envguard]. Host-only (tomli before Python 3.11): the probe's
shared reading.py stays standard-library for Python 3.8."""

from __future__ import annotations

import re
import sys
from typing import Any

from envguard.reading import MAX_DIGITS, read_number

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# Where a TOML value starts (after "=", "[", "," or "{", or at a line's start inside an
# array), a number of more digits than read_number takes (underscores count: TOML allows
# them between digits). tomllib has no hook for ints: a match is refused before it parses.
_TOML_LONG = r"(?m)(?:^|[=,\[{])[ \t]*[+-]?[0-9][0-9_]{" + str(MAX_DIGITS) + ",}"


def toml_loads(text: str) -> dict[str, Any]:
    """TOML whose every number went through read_number (ValueError otherwise): floats by
    tomllib's hook (inf and nan are valid TOML, and no number envguard reads), ints by a
    scan first."""
    found = re.search(_TOML_LONG, text)
    if found is not None:
        digits = sum(c.isdigit() for c in found.group())
        raise ValueError(f"a number of {digits} digits or more (at most {MAX_DIGITS})")
    data: dict[str, Any] = tomllib.loads(text, parse_float=_toml_float)
    return data


def _toml_float(text: str) -> float:
    return read_number(text.replace("_", ""))
