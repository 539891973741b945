"""Assemble a Snapshot from the probe's report, git and the user's options."""

from __future__ import annotations

import shlex
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from envguard import __version__
from envguard.capture import request
from envguard.capture.repos import capture_repo, find_work_tree
from envguard.capture.request import CaptureRequest, Recorded, StartedCapture, start_capture
from envguard.capture.sources import package_from_probe, torch_from_probe
from envguard.errors import UsageError
from envguard.models import (
    Accelerator,
    Cache,
    FileDigest,
    Interpreter,
    Package,
    Repo,
    Snapshot,
)
from envguard.probe.script import redact_argv


def request_like(
    snapshot: Snapshot,
    *,
    python: Path | str,
    python_label: str | None = None,
    cwd: Path | None = None,
    via: tuple[str, ...] = (),
) -> CaptureRequest:
    """A request that measures the live side exactly as ``snapshot`` was measured."""
    return request.request_like(
        Recorded.of(snapshot), python=python, python_label=python_label, cwd=cwd, via=via
    )


def _editable_repos(packages: tuple[Package, ...]) -> list[Path]:
    found = []
    for pkg in packages:
        if pkg.source.kind == "editable" and pkg.source.path:
            top = find_work_tree(Path(pkg.source.path))
            if top is not None:
                found.append(top)
    return found


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


def capture_snapshot(request: CaptureRequest) -> Snapshot:
    """Measure everything ``request`` names and return it as a Snapshot."""
    return finish_capture(start_capture(request))


def finish_capture(started: StartedCapture) -> Snapshot:
    """Wait for a started capture's probe and assemble its Snapshot."""
    report = started.probe.result()
    return snapshot_from_report(report, started.request, user_repos=started.user_repos)


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
