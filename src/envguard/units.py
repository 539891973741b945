"""Human-readable quantities shared by messages and tables."""

from __future__ import annotations

import math

from envguard.errors import UsageError


def human_size(n: int) -> str:
    """``1.2 GiB`` style sizes (bytes under 1 KiB stay exact)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def seconds(value: float, *, option: str, most: float = math.inf) -> float:
    """``value`` when it is a number of seconds an option may give: more than 0, at most
    ``most``, finite (``inf``, ``1e309`` and ``nan`` pass typer's range checks and ended
    in a traceback or a deadline of "nan s"); UsageError otherwise."""
    if not (0 < value <= most and math.isfinite(value)):  # NaN fails every comparison
        bound = "" if math.isinf(most) else f" and at most {most:g}"
        raise UsageError(f"{option} {value:g}: seconds, more than 0{bound}")
    return value
