"""What a rebuild did: a plain record for the caller and the renderers."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

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


@dataclass(frozen=True)
class Warmup:
    """What a `restore --warm` command took: its wall seconds and exit code (None: it was
    stopped at the timeout)."""

    argv: tuple[str, ...]
    seconds: float
    code: int | None
    timeout: float


Status = Literal["planned", "restored", "already", "refused", "failed", "skipped"]
Kind = Literal["packages", "repo", "file", "cache", "env"]


class Item(BaseModel):
    """One thing restore looked at: what it is, what happened, how it was verified."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Kind
    name: str
    status: Status
    detail: str
    verified: str | None = None  # how it was checked, in words
    sha256: str | None = None  # a written file's content, hashed again after the write
    md5: str | None = None
    kept: str | None = None  # where the displaced version (or the stash) is


class RestoreReport(BaseModel):
    """`envguard restore --format json`."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    schema_: Literal["envguard.restore"] = Field(default="envguard.restore", alias="schema")
    schema_version: Literal[1] = 1
    snapshot: str
    target: str
    executed: bool
    items: tuple[Item, ...]
    env_file: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Nothing failed or was refused."""
        return not any(i.status in ("failed", "refused") for i in self.items)
