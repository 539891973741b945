"""Human-readable quantities shared by messages and tables."""

from __future__ import annotations


def human_size(n: int) -> str:
    """``1.2 GiB`` style sizes (bytes under 1 KiB stay exact)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
