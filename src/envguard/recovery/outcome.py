"""What a rebuild did: a plain record for the caller and the renderers."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envguard.compare.models import Drift
    from envguard.snapshots.models import Snapshot


@dataclass
class Outcome:
    """What a rebuild did: where the new and old venvs are, and what it verified."""

    venv: Path
    snapshot: str = ""
    packages: int = 0
    backup: Path | None = None
    backup_bytes: int | None = None  # how much room the kept old venv takes
    verified: Drift | None = None
    live: Snapshot | None = None  # the rebuilt venv as verification measured it
    notes: list[str] = field(default_factory=list)
    not_restored: list[str] = field(default_factory=list)  # repos, files, caches
