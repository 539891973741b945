"""Where and how to measure an environment, as one value (Measure), and the probe's request
for a new snapshot made from it (capture_request).

The command line builds a Measure once from its options (cli.program.measure); the API
takes it whole (``measure=``), and so does snapshots.live, which turns it into the request
for a live side measured as a snapshot was. A new setting is a field here, the option that
fills it, and the one place that reads it.

Nothing here imports pydantic: it is on the start-up path of `envguard snapshot` and
`envguard diff`, before the probe starts.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from envguard.errors import UsageError
from envguard.probe.interpreters import resolve_python
from envguard.snapshots.request import USER_CACHE, CaptureRequest
from envguard.tools import split_command
from envguard.units import seconds

TYPE_CHECKING = False  # typing loads once the probe runs (envguard.api.early)
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from envguard.snapshots.models import MetricValue

# Seconds a far side has to answer, for each call through --via (the --timeout default).
VIA_TIMEOUT = 120.0


@dataclass(frozen=True, kw_only=True)
class Measure:
    """Where and how to measure: --python, --via, --timeout, --allow, --root, --deep, --pid."""

    # The interpreter or venv (default: $VIRTUAL_ENV, ./.venv, python3; with via: python3
    # there). A live side measured as a snapshot was: the snapshot's, when trusted.
    python: str | Path | None = None
    # A command prefix that reaches the target (``ssh gpu01``, ``docker exec -i c``), as
    # one string (split like a shell, never run by one) or as argv words.
    via: str | tuple[str, ...] | None = None
    timeout: float | None = VIA_TIMEOUT  # seconds for each call through via
    # Folders where the files, caches and repos a snapshot names may also be read.
    allow: tuple[str, ...] = ()
    # Where the checkout holding the snapshot's tracked files lies (now, for a live side).
    root: str | Path | None = None
    deep: bool = False  # every installed file hashed against its RECORD
    pid: int | None = None  # a running trainer whose mapped GPU libraries are recorded

    @property
    def remote(self) -> bool:
        return bool(self.via)

    def prefix(self) -> tuple[str, ...]:
        """via as argv words (empty: this host)."""
        if isinstance(self.via, str):
            return split_command(self.via, option="--via") if self.via else ()
        return tuple(self.via or ())

    def checked(self) -> Measure:
        """The same, its timeout checked and --root made absolute (UsageError now, before
        anything slow, for a bad one)."""
        if self.timeout is not None:
            via_timeout(self.timeout)
        if self.root is None:
            return self
        return replace(self, root=root_path(self.root, remote=self.remote))


def via_timeout(timeout: float) -> float:
    """``timeout`` when it is a number of seconds a far side can be given (--timeout)."""
    return seconds(timeout, option="--timeout")


def root_path(root: str | Path, *, remote: bool) -> str:
    """--root as an absolute path (on the far side: as given, which must be absolute)."""
    text = os.path.expanduser(str(root))
    if remote:
        if not os.path.isabs(text):
            raise UsageError(f"--root {root}: with --via it must be an absolute path")
        return text
    if not os.path.isdir(text):
        raise UsageError(f"--root {root}: no such directory")
    return os.path.abspath(text)


def capture_request(
    measure: Measure,
    *,
    name: str | None,
    repos: Sequence[str | Path] = (),
    files: Sequence[str] = (),
    caches: Sequence[str] = (),
    metrics: Mapping[str, MetricValue] | None = None,
    note: str | None = None,
    command: Sequence[str] | None = None,
    hosts: bool = False,
) -> CaptureRequest:
    """The request a new snapshot sends to the probe: ``measure`` and what to record
    besides, checked before the probe starts. ``hosts``: a template for many hosts, its
    via holding ``{host}``."""
    if not hosts and any("{host}" in token for token in measure.prefix()):
        raise UsageError("--via contains {host}: pass --hosts to say which hosts")
    if name:
        from envguard.snapshots import store  # here: a snapshot's early probe has no name

        snap_name = store.validate_name(name)
    else:
        snap_name = time.strftime("%Y%m%d-%H%M%S", time.gmtime())  # UTC
    python, prefix = measure.python, measure.prefix()
    if prefix:
        target: Path | str = str(python) if python else "python3"
    else:
        target = resolve_python(str(python) if python else None)
    if measure.timeout is not None:
        via_timeout(measure.timeout)  # zero, negative or NaN seconds: bad usage
    request = CaptureRequest(
        python=target,
        python_label=f"--python {python}" if python and not prefix else None,
        name=snap_name,
        repos=tuple(Path(r) for r in repos),
        files=tuple(files),
        caches=tuple((USER_CACHE, c) for c in caches),
        include_cwd_repo=not prefix,
        metrics=dict(metrics or {}),
        note=note,
        command=tuple(command) if command is not None else ("python", *sys.argv),
        via=prefix,
        timeout=measure.timeout if prefix else None,
    )
    if measure.root is not None:
        request = replace(request, root=Path(root_path(measure.root, remote=bool(prefix))))
    if measure.deep:
        request = replace(request, verify="deep")
    if measure.pid is not None:
        pid = measure.pid
        if type(pid) is not int or pid < 1:
            raise UsageError(f"--pid {pid}: not a process id")
        if not prefix and not Path(f"/proc/{pid}").is_dir():
            raise UsageError(f"--pid {pid}: no such process here")
        request = replace(request, pid=pid)
    return request
