"""What to capture, checked and sent to the probe before envguard's heavy imports.

Nothing here imports pydantic: the snapshot command starts the probe first, so the target
interpreter works while envguard loads its models (snapshot.capture assembles the result).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from envguard.confine import Roots, roots_for
from envguard.errors import UsageError
from envguard.probe.runner import ProbeRun
from envguard.reading import read_number
from envguard.snapshots.repos import find_work_tree

TYPE_CHECKING = False  # typing loads once the probe runs (envguard.api.early)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from envguard.snapshots.models import MetricValue


# The kind of a folder named by `snapshot --cache DIR` (the others name what fills them).
USER_CACHE = "user"


@dataclass(frozen=True)
class CaptureRequest:
    """What to measure: the interpreter plus the repos, files and caches around it."""

    python: Path | str
    name: str
    python_label: str | None = None  # how the user named it, for error messages
    via: tuple[str, ...] = ()  # a command prefix that reaches the target (ssh, docker exec)
    timeout: float | None = None
    # strict: a missing --file or --repo is the user's mistake (exit 2); not strict (a live
    # side measured like a snapshot): it is drift, recorded as missing for diff to report.
    strict: bool = True
    # confined: the files, caches and repos were named by a snapshot, so they are read only
    # under the cwd, its work tree, the target's cache folders and ``allow`` (--allow).
    confined: bool = False
    allow: tuple[str, ...] = ()
    repos: tuple[Path, ...] = ()
    files: tuple[str, ...] = ()
    # The path each of ``files`` was recorded under, when it is read elsewhere now (a live
    # side whose checkout moved); empty when they are the same.
    file_keys: tuple[str, ...] = ()
    # {path a repo is read at: the path it was recorded under} (a checkout that moved).
    repo_keys: dict[str, str] = field(default_factory=dict)
    # Files below it are recorded by their path there too (--root; work trees always are).
    root: Path | None = None
    caches: tuple[tuple[str, str], ...] = ()
    default_caches: bool = True
    include_cwd_repo: bool = True
    cwd: Path = field(default_factory=Path.cwd)
    metrics: dict[str, MetricValue] = field(default_factory=dict)
    note: str | None = None
    command: tuple[str, ...] = ()
    # Installed files against their RECORD: "quick" (the files that run: size, and a hash
    # when written after the install), "deep" (every file hashed) or "off"; "claims" (guard's
    # would-be venv): the RECORDs read for the paths two distributions claim, no file checked.
    verify: str = "quick"
    # A running process (a trainer) whose mapped GPU libraries are recorded (--pid).
    pid: int | None = None
    # guard's would-be venv: a site-packages folder holding the wheels an install would
    # bring, read ahead of the venv's own (the fingerprint cache is not used).
    overlay: Path | None = None


def parse_metric(text: str) -> tuple[str, MetricValue]:
    """``NAME=VALUE`` from --metric; numbers become numbers."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"--metric {text!r}: expected NAME=VALUE, e.g. tok_s=21500")
    value = value.strip()
    try:
        float(value)
    except ValueError:
        return key.strip(), value  # text: a label, a version
    if value.lstrip("+-").lower() in ("nan", "inf", "infinity"):
        return key.strip(), value  # a loss that went NaN is worth keeping, as text
    try:  # what else Python takes as a number goes through the one reader (1e309, digits)
        number = read_number(value)
    except ValueError as exc:
        raise UsageError(f"--metric {key.strip()}: {exc}") from None
    return key.strip(), int(number) if number.is_integer() and "." not in value else number


def _user_repos(request: CaptureRequest) -> list[Path]:
    """The work trees named by --repo; UsageError, before anything slow, for a bad one."""
    tops: list[Path] = []
    if request.via:
        return tops  # remote paths: the probe checks them on the far side
    roots = confinement(request)
    for path in request.repos:
        full = request.cwd / path
        if not roots.admits(str(full)):
            tops.append(full)  # named by a snapshot, outside: capture records it unread
            continue
        top = find_work_tree(full) if full.is_dir() else None
        if top is None and request.strict:
            what = "no such directory" if not full.is_dir() else "not a git work tree"
            raise UsageError(f"--repo {path}: {what}")
        if top is not None:
            tops.append(top)
    return tops


def confinement(request: CaptureRequest) -> Roots:
    """Where a request's snapshot-named paths may lie (all paths, for a user's request)."""
    if not request.confined:
        return Roots(None)
    return roots_for(
        {"confine": True, "allow": [str(request.cwd / a) for a in request.allow]},
        str(request.cwd),
        [],
    )


def probe_args(request: CaptureRequest, user_repos: Sequence[Path] = ()) -> dict[str, Any]:
    """The probe's one argument: which files to hash, which caches to walk, which repos."""
    files = []
    for path in request.files:
        if not os.path.isabs(os.path.expanduser(path)):
            path = str(request.cwd / path)
        files.append(path)
    caches = [
        {"kind": kind, "path": path if os.path.isabs(path) else str(request.cwd / path)}
        for kind, path in request.caches
    ]
    args: dict[str, Any] = {"caches": caches, "default_caches": request.default_caches}
    if request.verify != "quick":
        args["verify"] = request.verify
    if request.pid is not None:
        args["pid"] = request.pid
    if request.overlay is not None:
        args["overlay"] = str(request.overlay)
    if request.confined:
        # Remote paths stay as given: the far side resolves them against its own cwd.
        allow = (
            list(request.allow) if request.via else [str(request.cwd / a) for a in request.allow]
        )
        args.update(confine=True, allow=allow)
        if not request.via:
            args["cwd"] = str(request.cwd)
    # Repos are read by the probe on both sides (one implementation: git itself, run with
    # the read-only settings of envguard.confine), while this side imports its models.
    if request.via:  # remote paths stay as given: the far side resolves them
        args.update(
            files=list(request.files),
            caches=[{"kind": kind, "path": path} for kind, path in request.caches],
            git=True,
            repos=[str(p) for p in request.repos],
            editable_repos=True,
        )
    else:
        repos = [str(p) for p in user_repos]
        if request.include_cwd_repo:
            top = find_work_tree(request.cwd)
            if top is not None:
                repos.append(str(top))
        args.update(files=files, git=True, repos=repos, editable_repos=True)
    return args


@dataclass
class StartedCapture:
    """A capture whose probe is running; snapshot.capture.finish_capture completes it."""

    request: CaptureRequest
    probe: ProbeRun

    def cancel(self) -> None:
        """Stop the probe: the capture is no longer wanted."""
        self.probe.cancel()


# Probes started before the command line was parsed (envguard.prestart), on a guess of what
# the command will ask for. start_capture() takes one over when its request asks for exactly
# that probe (same interpreter, label, prefix, timeout and arguments), and stops it if not:
# a wrong guess costs CPU, never a wrong answer.
_EARLY: list[tuple[tuple[Any, ...], ProbeRun]] = []


def _probe_key(request: CaptureRequest, args: dict[str, Any]) -> tuple[Any, ...]:
    import json

    spec = json.dumps(args, sort_keys=True)
    return (str(request.python), request.python_label, request.via, request.timeout, spec)


def _run(request: CaptureRequest, args: dict[str, Any]) -> ProbeRun:
    return ProbeRun(
        request.python,
        args,
        label=request.python_label,
        prefix=request.via,
        timeout=request.timeout,
    )


def start_early(request: CaptureRequest) -> None:
    """Start ``request``'s probe now, for a start_capture() of the same request to take over
    (one never taken is stopped at exit at the latest)."""
    args = probe_args(request, _user_repos(request))
    if not _EARLY_AT_EXIT:
        import atexit

        atexit.register(stop_early)
        _EARLY_AT_EXIT.append(True)
    _EARLY.append((_probe_key(request, args), _run(request, args)))


_EARLY_AT_EXIT: list[bool] = []


def stop_early() -> None:
    """Stop the probes started early that no capture took over."""
    while _EARLY:
        _EARLY.pop()[1].cancel()


def start_capture(request: CaptureRequest) -> StartedCapture:
    """Check the request (UsageError before anything slow) and start the probe (or take
    over the one started early for exactly this request)."""
    args = probe_args(request, _user_repos(request))
    key = _probe_key(request, args)
    probe = None
    while _EARLY:
        early_key, early = _EARLY.pop()
        if probe is None and early_key == key:
            probe = early
        else:
            early.cancel()
    return StartedCapture(request=request, probe=probe or _run(request, args))
