"""The documents `guard`, `history`, `undo` and `protect` print with ``--format json``: one
declaration each, from which schema/*.json (`envguard schema guard|history|undo|protect`)
is generated."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from pathlib import Path

    from envguard.compare.models import Change
    from envguard.guard.journal import Record
    from envguard.guard.protect import Protection

_CONFIG = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class GuardChange(BaseModel):
    """One change the install would make to the venv (or to the snapshot held to)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    section: str
    kind: str
    name: str
    before: str | None
    after: str | None
    severity: Literal["critical", "warning", "info"]
    message: str
    # The top-level installs that pulled this package in.
    pulled_in_by: tuple[str, ...] = ()
    # It stops the install: at --fail-on or above, to what was there, and not --allow'ed.
    blocking: bool = False


class IncomingFile(BaseModel):
    """A wheel the install would bring, read before it ran (its files, its fit)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    version: str
    # The wheel's file name (its URL less the host: an index's may carry credentials).
    file: str
    sha256: str


class GuardReport(BaseModel):
    """`envguard guard --format json` (and with --preview)."""

    model_config = _CONFIG

    schema_: Literal["envguard.guard"] = Field(default="envguard.guard", alias="schema")
    schema_version: Literal[1] = 1
    venv: str
    command: tuple[str, ...]
    # In words ("snapshot good", "the venv as it is") and the snapshot file, if one.
    against: str
    snapshot: str | None = None
    headline: str
    verdict: tuple[str, ...] = ()
    changes: tuple[GuardChange, ...] = ()
    blocking: bool
    blocked_by: tuple[str, ...] = ()
    # Only said what it would change (--preview): nothing ran, nothing was recorded.
    preview: bool
    ran: bool
    exit_code: int | None = None
    # The guard's record of the change (envguard history, envguard undo) once it ran.
    record: int | None = None
    change: str | None = None
    notes: tuple[str, ...] = ()
    # The wheels the install would bring, each read before it ran.
    files: tuple[IncomingFile, ...] = ()
    # The install takes exactly ``files``, each by its sha256 (else the command as given).
    pinned: bool = False


class HistoryRecord(BaseModel):
    """One guarded change (or undo) as recorded."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    number: int
    created: str
    command: tuple[str, ...]
    allowed: tuple[str, ...] = ()
    planned: str
    # What it changed, measured after it ran (None: envguard stopped before it measured).
    change: str | None = None
    exit_code: int | None = None


class HistoryReport(BaseModel):
    """`envguard history --format json`: newest first."""

    model_config = _CONFIG

    schema_: Literal["envguard.history"] = Field(default="envguard.history", alias="schema")
    schema_version: Literal[1] = 1
    venv: str
    records: tuple[HistoryRecord, ...]


class UndoReport(BaseModel):
    """`envguard undo --format json`."""

    model_config = _CONFIG

    schema_: Literal["envguard.undo"] = Field(default="envguard.undo", alias="schema")
    schema_version: Literal[1] = 1
    venv: str
    # The change gone back before, and the undo's own record (an undo is undone as any).
    target: HistoryRecord
    record: int
    restored: str
    packages: int
    backup: str | None = None
    backup_bytes: int | None = None
    notes: tuple[str, ...] = ()
    not_restored: tuple[str, ...] = ()


class ProtectReport(BaseModel):
    """`envguard protect [--check|--off] --format json`: the files, relative to the venv."""

    model_config = _CONFIG

    schema_: Literal["envguard.protect"] = Field(default="envguard.protect", alias="schema")
    schema_version: Literal[1] = 1
    venv: str
    action: Literal["protect", "check", "off"]
    # In place after the command (--check: as found; --off: False).
    protected: bool
    # protect: written; --check: as written; --off: removed.
    files: tuple[str, ...] = ()
    edited: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    # --check: the pinned versions (the GPU stack) the venv no longer holds.
    unpinned: tuple[str, ...] = ()
    # --check: files as an earlier envguard wrote them (protect writes them again).
    outdated: tuple[str, ...] = ()


def guard_change(change: Change, *, blocking: bool) -> GuardChange:
    return GuardChange(
        section=change.section,
        kind=change.kind,
        name=change.name,
        before=change.expected,
        after=change.actual,
        severity=change.severity.value,
        message=change.message,
        pulled_in_by=change.groups,
        blocking=blocking,
    )


def history_record(record: Record) -> HistoryRecord:
    return HistoryRecord(
        number=record.number,
        created=record.created,
        command=record.command,
        allowed=record.allowed,
        planned=record.planned,
        change=record.change or None,
        exit_code=record.exit_code,
    )


def protect_report(
    venv: Path, found: Protection | None, *, action: Literal["protect", "check", "off"]
) -> ProtectReport:
    """``found`` (None: not protected, so nothing was removed) as the document."""
    if found is None:
        return ProtectReport(venv=str(venv), action=action, protected=False)
    return ProtectReport(
        venv=str(found.venv),
        action=action,
        protected=action != "off",
        files=found.files,
        edited=found.edited,
        missing=found.missing,
        notes=found.notes,
        unpinned=found.unpinned,
        outdated=found.outdated,
    )
