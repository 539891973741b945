"""Where uv may find packages (rebuild, restore, export): plain data, no pydantic, so the
command line builds it before the probe starts."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sources:
    """Where uv may find packages: the user's pass-through options."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    offline: bool = False
    no_index: bool = False
    torch_index: str | None = None  # None: download.pytorch.org (skipped with --no-index)
    # Wheel file names in the local --find-links folders (listed by the caller: the plan does
    # no I/O). When they hold every torch-variant pin, that step uses them alone.
    wheelhouse: tuple[str, ...] = ()
