"""The guard's history of a venv: before each guarded change, the venv's snapshot and a
record of the change (the command, what it was allowed to change, what it did), kept in a
hidden sibling of the venv (``.venv.envguard-history/``), so a rebuild that swaps the venv
keeps it. Bounded by count and size; the oldest go first."""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from envguard.errors import UsageError
from envguard.owned import own_folder
from envguard.reading import SMALL_CAP, UNSAFE_CHARS, not_json_constant, read_text
from envguard.snapshots.store import write_atomic

MARK = ".envguard-history"
RECORD_VERSION = 1
KEEP = 20
SIZE_CAP = 256 << 20
_RECORD = re.compile(r"^(\d{4,9})\.record\.json$")
_NUMBERED = re.compile(r"^(\d{4,9})\.(?:record\.)?json$")


@dataclass(frozen=True)
class Record:
    """One guarded change (or undo): its number, when, the command, what was allowed, the
    preview's line and, once it ran, the change it made and its exit code."""

    number: int
    created: str
    command: tuple[str, ...]
    allowed: tuple[str, ...] = ()
    planned: str = ""
    change: str = ""
    exit_code: int | None = None

    @property
    def snapshot_name(self) -> str:
        return f"{self.number:04d}.json"


def folder(venv: Path) -> Path:
    """Where ``venv``'s history is kept: beside it, hidden."""
    venv = venv.absolute()
    name = venv.name if venv.name.startswith(".") else f".{venv.name}"
    return venv.parent / f"{name}{MARK}"


def opened(venv: Path, *, create: bool = False) -> Path | None:
    """The venv's history folder once it is a real folder of this user's (owned.own_folder:
    a link, a file or another user's folder is an error, never followed); None: none yet."""
    return own_folder(folder(venv), create=create)


def _made(venv: Path) -> Path:
    where = opened(venv, create=True)
    if where is None:  # removed between the mkdir and the open
        raise UsageError(f"{folder(venv)}: removed while envguard opened it")
    return where


def records(venv: Path) -> list[Record]:
    """The venv's records, newest first; UsageError naming a damaged one."""
    where = opened(venv)
    if where is None:
        return []
    with os.scandir(where) as scan:
        names = [entry.path for entry in scan if _RECORD.match(entry.name)]
    found = [_read(Path(name)) for name in names]
    return sorted(found, key=lambda r: r.number, reverse=True)


def _read(path: Path) -> Record:
    text = read_text(str(path), SMALL_CAP)
    try:
        if text is None:
            raise ValueError("cannot read it")
        raw = json.loads(text, parse_constant=not_json_constant)
        if not isinstance(raw, dict) or raw.get("schema_version") != RECORD_VERSION:
            raise ValueError("not a record this envguard reads")
        number, created, exit_code = raw["number"], raw["created"], raw.get("exit_code")
        if type(number) is not int or not isinstance(created, str) or _unsafe(created):
            raise ValueError("no number or time")
        if exit_code is not None and type(exit_code) is not int:
            raise ValueError("exit_code is not a number")
        lists = {k: raw.get(k, []) for k in ("command", "allowed")}
        if not all(
            isinstance(v, list) and all(isinstance(s, str) for s in v) for v in lists.values()
        ):
            raise ValueError("command or allowed is not a list of strings")
        lines = {k: raw.get(k, "") for k in ("planned", "change")}
        if not all(isinstance(v, str) and not _unsafe(v) for v in lines.values()):
            raise ValueError("planned or change is not one line")
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        # The hint never has the history deleted: a record this envguard cannot read may be
        # a newer envguard's, and the snapshot beside it still brings the venv back.
        match = _RECORD.match(path.name)
        beside = path.with_name(f"{match.group(1)}.json") if match else None
        way_back = (
            f"the venv as it was before that change: envguard restore {beside} --venv DIR"
            if beside is not None and beside.is_file()
            else "envguard restore SNAPSHOT --venv DIR brings back a snapshot"
        )
        raise UsageError(
            f"{path}: a damaged guard record ({exc})",
            hint=f"{way_back}; an envguard newer than this one may read it",
        ) from None
    return Record(
        number=number,
        created=created,
        command=tuple(lists["command"]),
        allowed=tuple(lists["allowed"]),
        planned=lines["planned"],
        change=lines["change"],
        exit_code=exit_code,
    )


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(s, str) and not _unsafe(s) for s in value)


def _unsafe(text: str) -> bool:
    return len(text) > 4096 or re.search("[" + UNSAFE_CHARS + "]", text) is not None


def begin(
    venv: Path,
    snapshot_text: str,
    *,
    command: tuple[str, ...],
    allowed: tuple[str, ...],
    planned: str,
) -> Record:
    """Record the venv as it is (``snapshot_text``) before ``command`` changes it."""
    where = _made(venv)
    _ignored_by_git(where)
    # Past a snapshot whose record was never written (envguard stopped between the two):
    # its number is not taken again, or every later change would be refused.
    taken = [r.number for r in records(venv)]  # a damaged record is named first
    with os.scandir(where) as scan:
        found = [_NUMBERED.match(entry.name) for entry in scan]
    number = max([*taken, *(int(m.group(1)) for m in found if m)], default=0) + 1
    record = Record(
        number=number,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        command=command,
        allowed=allowed,
        planned=planned,
    )
    write_atomic(where / record.snapshot_name, snapshot_text, force=False)
    _write(where, record, force=False)
    return record


def _ignored_by_git(where: Path) -> None:
    """A ``.gitignore`` of ``*`` in the history folder (as uv writes in a venv): a venv kept
    in a work tree keeps its history out of `git stash --include-untracked`, `git add -A`
    and `git clean -fd`. Never written through a link; one already there is left alone."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(where / ".gitignore", flags, 0o644)
    except OSError:  # there already (or not writable: the records themselves will say)
        return
    with os.fdopen(fd, "w") as fh:
        fh.write("# written by envguard guard: the undo history is not source\n*\n")


def finish(venv: Path, record: Record, *, change: str, exit_code: int) -> Record:
    """The record with what the command did."""
    done = replace(record, change=change, exit_code=exit_code)
    _write(_made(venv), done, force=True)
    return done


def _remove(where: Path, record: Record) -> None:
    for name in (record.snapshot_name, f"{record.number:04d}.record.json"):
        with contextlib.suppress(FileNotFoundError):
            (where / name).unlink()


def _write(where: Path, record: Record, *, force: bool) -> None:
    data = {"schema_version": RECORD_VERSION, **asdict(record)}
    write_atomic(
        where / f"{record.number:04d}.record.json", json.dumps(data, indent=2) + "\n", force=force
    )


def snapshot_path(venv: Path, record: Record) -> Path:
    return (opened(venv) or folder(venv)) / record.snapshot_name


def collect(venv: Path, *, keep: int = KEEP, size_cap: int = SIZE_CAP) -> list[int]:
    """Delete the oldest records past ``keep`` or past ``size_cap`` bytes in all (the
    newest is always kept); the numbers deleted."""
    where = folder(venv)
    kept = records(venv)
    dropped: list[int] = []
    total = 0
    for i, record in enumerate(kept):
        size = _size(where, record)
        total += size
        if i > 0 and (i >= keep or total > size_cap):
            _remove(where, record)
            dropped.append(record.number)
    return dropped


def _size(where: Path, record: Record) -> int:
    total = 0
    for name in (record.snapshot_name, f"{record.number:04d}.record.json"):
        with contextlib.suppress(OSError):
            total += (where / name).stat().st_size
    return total
