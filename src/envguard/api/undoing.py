"""The guarded changes of a venv: history() of them, undo() one; protect() a venv so that
its later pip and uv installs go through guard() by themselves (api/guarding.py)."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from envguard import inuse
from envguard.api.capture import snapshot_document, start_document
from envguard.api.compare import load_policy
from envguard.api.guarding import _venv_path
from envguard.errors import StoppedError, UsageError
from envguard.guard import journal
from envguard.inuse import REFUSE, InUse
from envguard.snapshots import document, store
from envguard.snapshots.capture import finish_document

if TYPE_CHECKING:
    from envguard.guard.journal import Record
    from envguard.guard.protect import Protection
    from envguard.guard.report import HistoryReport, ProtectReport, UndoReport
    from envguard.recovery.outcome import Outcome
    from envguard.recovery.sources import Sources
    from envguard.snapshots.document import Document


def history(*, venv: str | Path | None = None) -> list[Record]:
    """The guarded changes of ``venv``, newest first."""
    return journal.records(_venv_path(venv))


def history_report(*, venv: str | Path | None = None) -> HistoryReport:
    """history() as `envguard history --format json` prints it."""
    from envguard.guard.report import HistoryReport, history_record

    where = _venv_path(venv)
    return HistoryReport(
        venv=str(where), records=tuple(history_record(r) for r in journal.records(where))
    )


@dataclass
class Undone:
    """What undo() brought back, and the rebuild that did it."""

    record: Record  # the undo's own
    target: Record  # the change it went back before
    restored: str
    outcome: Outcome

    def report(self) -> UndoReport:
        """What undo() did as `envguard undo --format json` prints it."""
        from envguard.guard.report import UndoReport, history_record

        outcome = self.outcome
        return UndoReport(
            venv=str(outcome.venv),
            target=history_record(self.target),
            record=self.record.number,
            restored=self.restored,
            packages=outcome.packages,
            backup=str(outcome.backup) if outcome.backup is not None else None,
            backup_bytes=outcome.backup_bytes,
            notes=tuple(outcome.notes),
            not_restored=tuple(outcome.not_restored),
        )


def undo(
    steps: int = 1,
    *,
    venv: str | Path | None = None,
    sources: Sources | None = None,
    in_place: bool = False,
    keep_backups: int = 1,
    in_use: InUse = REFUSE,
    status: Callable[[str], None] = lambda _: None,
    on_line: Callable[[str], None] | None = None,
) -> Undone:
    """Bring ``venv`` back to where it was before its ``steps``-th newest guarded change,
    through the atomic rebuild (``in_place``: `uv pip sync` into the venv, faster and not
    atomic); the state it leaves is recorded first (an undo is undone as any change)."""
    from envguard.api.recover import rebuild
    from envguard.compare.engine import diff as compute
    from envguard.guard.preview import headline

    where = _venv_path(venv)
    found = journal.records(where)
    if not found:  # an install nobody guarded: a snapshot is the way back
        raise UsageError(
            f"nothing to undo: {where} has no guarded change recorded",
            hint=f"envguard restore SNAPSHOT --venv {shlex.quote(str(where))} brings back a"
            " snapshot (envguard list names them); envguard guard -- ... records the next"
            " install",
        )
    if steps < 1 or steps > len(found):
        raise UsageError(
            f"undo {steps}: the venv has {len(found)} guarded change"
            f"{'s' if len(found) != 1 else ''} recorded",
            hint="envguard history lists them",
        )
    target = found[steps - 1]
    # Before anything is recorded: an --in-place undo records the venv before its sync.
    inuse.check(where, in_use, action="the undo")
    path = journal.snapshot_path(where, target)
    # The venv as it is now, for the record that makes the undo undoable: probed while the
    # snapshot is read and the new venv is built, and taken before the swap.
    started = start_document(python=where / "bin" / "python", name="guard")
    begun: list[tuple[Record, Document]] = []

    def record_it() -> None:
        if not begun:
            doc = finish_document(started)
            entry = journal.begin(
                where,
                store.dumps(doc),
                command=("envguard", "undo", str(steps)),
                allowed=(),
                planned=f"back to before #{target.number}",
            )
            begun.append((entry, doc))

    try:
        good = store.load(path)  # validated before anything runs
        if in_place:  # the sync changes the venv itself: recorded first
            record_it()
        outcome = rebuild(
            path,
            venv=where,
            in_place=in_place,
            sources=sources,
            keep_backups=keep_backups,
            in_use=in_use,
            status=status,
            on_line=on_line,
            before_swap=record_it,
        )
    except (StoppedError, KeyboardInterrupt):  # the swap may have happened: kept
        started.cancel()
        if begun:
            journal.finish(
                where, begun[0][0], change="interrupted; see envguard diff", exit_code=130
            )
        raise
    except BaseException:
        started.cancel()
        if begun:  # past the point of the swap: whether it happened, diff says
            journal.finish(where, begun[0][0], change="failed; see envguard diff", exit_code=1)
        raise
    record, doc = begun[0]
    try:
        restored = headline(compute(document.typed(doc), good, load_policy()), lead="")
        done = journal.finish(where, record, change=restored, exit_code=0)
    except KeyboardInterrupt:  # swapped in already: the record is kept, and finished
        journal.finish(where, record, change="interrupted; see envguard diff", exit_code=130)
        raise
    journal.collect(where)
    return Undone(record=done, target=target, restored=restored, outcome=outcome)


def protect(*, venv: str | Path | None = None) -> Protection:
    """Route later `pip install|uninstall`, `python -m pip ...` and (with the venv active)
    `uv pip install|uninstall|sync` and `uv add|remove|sync` in ``venv`` through `envguard
    guard`; pin the GPU stack as installed in the venv's pip.conf (a pip from another
    interpreter, `pip --python VENV`, reads it too)."""
    from envguard.guard import protect as protection_files

    where = _venv_path(venv)
    doc = snapshot_document(python=where / "bin" / "python", name="protect")
    installed = [(str(p["name"]), str(p["version"])) for p in doc["packages"]]
    return protection_files.protect_installed(where, installed, rules=load_policy())


def unprotect(*, venv: str | Path | None = None) -> Protection | None:
    """Remove every trace of protect() from ``venv``: what was removed (None: nothing was
    protected)."""
    from envguard.guard import protect as protection_files

    return protection_files.unprotect(_venv_path(venv))


def protection(*, venv: str | Path | None = None) -> Protection | None:
    """``venv``'s protection, each file checked against what protect() wrote (an edit by
    hand is in ``edited``); None when it is not protected."""
    from envguard.guard import protect as protection_files

    return protection_files.status(_venv_path(venv))


def protection_report(
    action: Literal["protect", "check", "off"], *, venv: str | Path | None = None
) -> ProtectReport:
    """protect() (``action`` "protect"), protection() ("check") or unprotect() ("off") as
    `envguard protect --format json` prints it."""
    from envguard.guard.report import protect_report

    where = _venv_path(venv)
    if action == "protect":
        found: Protection | None = protect(venv=where)
    elif action == "off":
        found = unprotect(venv=where)
    else:
        found = protection(venv=where)
    return protect_report(where, found, action=action)
