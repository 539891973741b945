"""Environment variables that change how training behaves (secrets only as hashes)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from envguard.compare.sections.base import Section
from envguard.compare.severity import Severity

if TYPE_CHECKING:
    from envguard.compare.engine import Collector
    from envguard.snapshots.models import Snapshot

# Where the venv lives is not part of what it is (the interpreter's prefix says it, at info).
PATH_VARS = frozenset({"VIRTUAL_ENV"})
# Recorded, and said at info: the installers' own settings (UV_, PIP_: where the next
# install resolves from, uv run's own depth, a cache folder set in one shell and not in
# CI), and the launcher's bookkeeping (TORCHELASTIC_: a run id and an error file new at
# every torchrun launch). None changes how the training already installed runs.
INFO_PREFIXES = ("UV_", "PIP_", "TORCHELASTIC_")


def started(snap: Snapshot) -> dict[str, str]:
    """The variables as the measured process had them when it started: what a relaunch
    starts from (and what restore writes). A snapshot taken by the Python API inside a
    training script holds, in ``env``, what torch.compile or cv2 set in that process since;
    ``env_at_start`` has their values before (None: not set then)."""
    env = dict(snap.env)
    for name, value in (snap.env_at_start or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def own_change(e: Snapshot, a: Snapshot, name: str) -> bool:
    """The sides' values of ``name`` differ only by what one side's own process changed
    after it started (Snapshot.env_at_start): a relaunch changes it again. Not where both
    processes changed it (they then differ), nor where the starts differ."""
    e_start, a_start = e.env_at_start or {}, a.env_at_start or {}
    if (name in e_start) == (name in a_start):
        return False
    return started(e).get(name) == started(a).get(name)


def _shown(value: str | None) -> str:
    return "not set" if value is None else value


def compare(b: Collector, e: Snapshot, a: Snapshot) -> None:
    e_start, a_start = e.env_at_start or {}, a.env_at_start or {}
    e_began, a_began = started(e), started(a)
    for name in sorted(e.env.keys() | a.env.keys()):
        ev, av = e.env.get(name), a.env.get(name)
        if ev == av:  # alike as measured, whatever each process started from (a launcher
            continue  # that set it, then ran envguard: its child started with it)
        es, as_ = e_began.get(name), a_began.get(name)
        info = name in PATH_VARS or name.startswith(INFO_PREFIXES)
        # Where both started alike, a difference made by one side's own process after its
        # start is made again by a relaunch: no drift. Two processes that both changed it,
        # differently, do differ (a notebook that set another value).
        own = own_change(e, a, name)
        level = Severity.info if info or own else Severity.warning
        why = ""
        if name in e_start or name in a_start:
            who = (
                "each side's"
                if name in e_start and name in a_start
                else ("the snapshot's" if name in e_start else "this side's")
            )
            if own:
                why = f"; {who} run changed it itself after it started, as a relaunch will"
            elif es == as_:
                why = "; each side's run changed it itself after it started, differently"
            else:
                why = f"; where each process started: {_shown(es)} -> {_shown(as_)}"
        if ev is None and av is not None:
            message = f"${name} is set now ({av}{why})"
            b.add("added", name, actual=av, severity=level, message=message)
        elif av is None and ev is not None:
            message = f"${name} is no longer set (was {ev}{why})"
            b.add("removed", name, expected=ev, severity=level, message=message)
        else:
            redacted = (ev or "").startswith("<redacted") or (av or "").startswith("<redacted")
            detail = "values redacted" if redacted else f"{ev} -> {av}"
            message = f"${name} changed ({detail}{why})"
            b.add("changed", name, expected=ev, actual=av, severity=level, message=message)


def identity(snap: Snapshot) -> Iterator[tuple[str, str]]:
    for name, value in snap.env.items():
        if name not in PATH_VARS:
            yield f"env {name}", value


SECTION = Section(name="env", title="environment variables", compare=compare, identity=identity)
