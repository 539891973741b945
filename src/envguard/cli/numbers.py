"""Every number an option takes, read by the one bounded reader (envguard.reading): digits
capped, inf and nan refused, with the option's name, exit 2. click's own FLOAT takes
``inf``, ``nan`` and ``1e309``, and its INT feeds 5,000 digits to int()."""

from __future__ import annotations

import math
from typing import Any

try:  # click as typer vendors it (typer >= 0.26)
    from typer._click.core import Context, Parameter
    from typer._click.types import (
        FloatParamType,
        FloatRange,
        IntParamType,
        IntRange,
        ParamType,
    )
except ImportError:  # typer before 0.26 depends on click itself
    from click.core import Context, Parameter  # type: ignore[import-not-found,no-redef,unused-ignore,assignment]
    from click.types import (  # type: ignore[import-not-found,no-redef,unused-ignore,assignment]
        FloatParamType,
        FloatRange,
        IntParamType,
        IntRange,
        ParamType,
    )

from envguard.reading import read_number


class BoundedNumber(ParamType):
    """A finite number (an int when ``integer``), within the range the option declared."""

    def __init__(
        self,
        *,
        integer: bool,
        minimum: float | None = None,
        maximum: float | None = None,
        min_open: bool = False,
        max_open: bool = False,
    ) -> None:
        self.integer = integer
        self.name = "integer" if integer else "number"
        self.minimum, self.maximum = minimum, maximum
        self.min_open, self.max_open = min_open, max_open

    def convert(self, value: Any, param: Parameter | None, ctx: Context | None) -> Any:
        if isinstance(value, bool):
            self.fail(f"{value!r} is not a number", param, ctx)
        if isinstance(value, int | float):  # a default, or a caller's value
            if not math.isfinite(value):
                self.fail(f"{value!r} is out of range", param, ctx)
            number: float = value
        else:
            try:
                number = read_number(str(value), integer=self.integer)
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
        low, high = self.minimum, self.maximum
        if low is not None and (number < low or (self.min_open and number == low)):
            words = "not more than" if self.min_open else "less than"
            self.fail(f"{number:g} is {words} {low:g}", param, ctx)
        if high is not None and (number > high or (self.max_open and number == high)):
            words = "not less than" if self.max_open else "more than"
            self.fail(f"{number:g} is {words} {high:g}", param, ctx)
        return int(number) if self.integer else number


def bounded(kind: ParamType) -> ParamType:
    """``kind`` as a BoundedNumber when it is click's INT, FLOAT or a range of them."""
    if isinstance(kind, IntRange | FloatRange):
        return BoundedNumber(
            integer=isinstance(kind, IntRange),
            minimum=kind.min,
            maximum=kind.max,
            min_open=kind.min_open,
            max_open=kind.max_open,
        )
    if isinstance(kind, IntParamType | FloatParamType):
        return BoundedNumber(integer=isinstance(kind, IntParamType))
    return kind
