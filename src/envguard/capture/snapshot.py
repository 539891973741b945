"""Assemble a Snapshot from the probe's report, git and the user's options."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from envguard import __version__
from envguard.capture.repos import capture_repo, find_work_tree
from envguard.capture.sources import package_from_probe, torch_from_probe
from envguard.errors import UsageError
from envguard.models import (
    Accelerator,
    Cache,
    FileDigest,
    Interpreter,
    MetricValue,
    Package,
    Repo,
    Snapshot,
)
from envguard.probe.runner import run_probe
from envguard.probe.script import redact_argv


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
    repos: tuple[Path, ...] = ()
    files: tuple[str, ...] = ()
    caches: tuple[tuple[str, str], ...] = ()
    default_caches: bool = True
    include_cwd_repo: bool = True
    cwd: Path = field(default_factory=Path.cwd)
    metrics: dict[str, MetricValue] = field(default_factory=dict)
    note: str | None = None
    command: tuple[str, ...] = ()


def request_like(
    snapshot: Snapshot,
    *,
    python: Path | str,
    python_label: str | None = None,
    cwd: Path | None = None,
    via: tuple[str, ...] = (),
) -> CaptureRequest:
    """A request that measures the live side exactly as ``snapshot`` was measured."""
    return CaptureRequest(
        python=python,
        python_label=python_label,
        via=via,
        name=snapshot.name + "-live",
        repos=tuple(Path(r.path) for r in snapshot.repos),
        files=tuple(f.path for f in snapshot.files),
        caches=tuple((c.kind, c.path) for c in snapshot.caches),
        default_caches=False,
        include_cwd_repo=False,
        cwd=cwd or Path.cwd(),
        metrics=dict(snapshot.metrics),
        strict=False,
    )


def parse_metric(text: str) -> tuple[str, MetricValue]:
    """``KEY=VALUE`` from --metric; numbers become numbers."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"--metric {text!r}: expected KEY=VALUE, e.g. tok_s=21500")
    value = value.strip()
    try:
        number = float(value)
    except ValueError:
        return key.strip(), value
    if number != number or number in (float("inf"), float("-inf")):
        return key.strip(), value  # NaN and infinities are not JSON numbers
    return key.strip(), int(number) if number.is_integer() and "." not in value else number


def _editable_repos(packages: tuple[Package, ...]) -> list[Path]:
    found = []
    for pkg in packages:
        if pkg.source.kind == "editable" and pkg.source.path:
            top = find_work_tree(Path(pkg.source.path))
            if top is not None:
                found.append(top)
    return found


def _user_repos(request: CaptureRequest) -> list[Path]:
    """The work trees named by --repo; UsageError, before anything slow, for a bad one."""
    tops: list[Path] = []
    if request.via:
        return tops  # remote paths: the probe checks them on the far side
    for path in request.repos:
        full = request.cwd / path
        top = find_work_tree(full) if full.is_dir() else None
        if top is None and request.strict:
            what = "no such directory" if not full.is_dir() else "not a git work tree"
            raise UsageError(f"--repo {path}: {what}")
        if top is not None:
            tops.append(top)
    return tops


def _remote_repos(request: CaptureRequest, report: dict[str, Any]) -> tuple[Repo, ...]:
    repos = []
    for raw in report.get("repos", []):
        if raw.get("error"):
            if not request.strict:
                continue  # gone: diff reports it missing
            raise UsageError(f"--repo {raw['path']}: {raw['error']} (on the far side of --via)")
        repos.append(Repo(**{k: v for k, v in raw.items() if k != "error"}))
    return tuple(sorted(repos, key=lambda r: r.path))


def _repos(
    request: CaptureRequest, user_repos: list[Path], packages: tuple[Package, ...]
) -> tuple[Repo, ...]:
    paths = [p.resolve() for p in user_repos]
    if request.include_cwd_repo:
        top = find_work_tree(request.cwd)
        if top is not None:
            paths.append(top.resolve())
    paths.extend(p.resolve() for p in _editable_repos(packages))
    unique = sorted(set(paths))
    return tuple(capture_repo(p) for p in unique)


def _files(report: dict[str, Any], *, strict: bool) -> tuple[FileDigest, ...]:
    out = []
    for raw in report["files"]:
        if raw.get("error") and strict:
            raise UsageError(f"--file {raw['path']}: {raw['error'].lower()}")
        out.append(FileDigest(path=raw["path"], sha256=raw["sha256"], size=raw["size"]))
    return tuple(sorted(out, key=lambda f: f.path))


def _caches(report: dict[str, Any]) -> tuple[Cache, ...]:
    fields = set(Cache.model_fields)
    caches = {
        (c["kind"], c["path"]): Cache(**{k: v for k, v in c.items() if k in fields})
        for c in report["caches"]
    }
    return tuple(caches[key] for key in sorted(caches))


def probe_args(request: CaptureRequest) -> dict[str, Any]:
    """The probe's one argument: which files to hash and which caches to walk."""
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
    if request.via:  # remote paths stay as given: the far side resolves them
        args.update(
            files=list(request.files),
            caches=[{"kind": kind, "path": path} for kind, path in request.caches],
            git=True,
            repos=[str(p) for p in request.repos],
            editable_repos=True,
        )
    else:
        args["files"] = files
    return args


def capture_snapshot(request: CaptureRequest) -> Snapshot:
    """Measure everything ``request`` names and return it as a Snapshot."""
    user_repos = _user_repos(request)
    report = run_probe(
        request.python,
        probe_args(request),
        label=request.python_label,
        prefix=request.via,
        timeout=request.timeout,
    )
    return snapshot_from_report(report, request, user_repos=user_repos)


def snapshot_from_report(
    report: dict[str, Any], request: CaptureRequest, *, user_repos: list[Path]
) -> Snapshot:
    """Assemble the Snapshot: everything but git comes from the probe's report."""
    files = _files(report, strict=request.strict)
    packages = tuple(
        sorted(
            (package_from_probe(raw) for raw in report["packages"]),
            key=lambda p: (p.name, p.shadowed, p.location),
        )
    )
    by_name = {p.name: p for p in packages if not p.shadowed}
    return Snapshot(
        name=request.name,
        created=datetime.now(timezone.utc).replace(microsecond=0),
        host=report["host"],
        user=report["user"],
        envguard_version=__version__,
        command=tuple(redact_argv(list(request.command))),
        via=shlex.join(redact_argv(list(request.via))) if request.via else None,
        note=request.note,
        metrics=dict(sorted(request.metrics.items())),
        interpreter=Interpreter(**report["interpreter"]),
        packages=packages,
        torch=torch_from_probe(report["torch"], by_name),
        accelerator=Accelerator(**report["accelerator"]),
        repos=_remote_repos(request, report)
        if request.via
        else _repos(request, user_repos, packages),
        files=files,
        caches=_caches(report),
        env=dict(sorted(report["env"].items())),
        warnings=tuple(report["warnings"]),
    )
