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


# Said of a variable set on one side only, where the process that measured a side set or
# unset it itself after it started (Snapshot.env_in_process: envguard's API called inside a
# training script, after torch.compile set TORCHINDUCTOR_CACHE_DIR or cv2 its
# LD_LIBRARY_PATH): a relaunch of that program sets it again, so it is no drift. A value
# that differs between the sides is drift whoever set it.
IN_PROCESS = "; the measuring process set it itself after it started"


def compare(b: Collector, e: Snapshot, a: Snapshot) -> None:
    own = set(e.env_in_process or ()) | set(a.env_in_process or ())
    for name in sorted(e.env.keys() | a.env.keys()):
        ev, av = e.env.get(name), a.env.get(name)
        if ev == av:
            continue
        info = name in PATH_VARS or name.startswith(INFO_PREFIXES)
        why = IN_PROCESS if (ev is None or av is None) and name in own else ""
        level = Severity.info if info or why else Severity.warning
        if ev is None:
            b.add(
                "added",
                name,
                actual=av,
                severity=level,
                message=f"${name} is set now ({av}{why})",
            )
        elif av is None:
            b.add(
                "removed",
                name,
                expected=ev,
                severity=level,
                message=f"${name} is no longer set (was {ev}{why})",
            )
        else:
            redacted = ev.startswith("<redacted") or av.startswith("<redacted")
            detail = "values redacted" if redacted else f"{ev} -> {av}"
            b.add(
                "changed",
                name,
                expected=ev,
                actual=av,
                severity=level,
                message=f"${name} changed ({detail})",
            )


def identity(snap: Snapshot) -> Iterator[tuple[str, str]]:
    for name, value in snap.env.items():
        if name not in PATH_VARS:
            yield f"env {name}", value


SECTION = Section(name="env", title="environment variables", compare=compare, identity=identity)
