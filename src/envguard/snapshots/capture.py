"""Assemble a Snapshot from the probe's validated report, git and the user's options."""

from __future__ import annotations

import shlex
from datetime import datetime, timezone

from pydantic import ValidationError

from envguard import __version__
from envguard.confine import OUTSIDE
from envguard.errors import ProbeError, UsageError, field_path
from envguard.probe.report import ProbeReport, ReportFile, ReportRepo
from envguard.redact import redact_argv, redact_metrics, redact_text, redact_url
from envguard.snapshots.models import (
    Accelerator,
    Cache,
    FileDigest,
    Interpreter,
    Repo,
    Snapshot,
)
from envguard.snapshots.request import (
    CaptureRequest,
    StartedCapture,
    start_capture,
)
from envguard.snapshots.sources import package_from_probe, torch_from_probe


def _probed_repos(request: CaptureRequest, raw: list[ReportRepo]) -> tuple[Repo, ...]:
    repos = []
    for repo in raw:
        if repo.get("error"):
            if str(repo["error"]).startswith(OUTSIDE):
                repos.append(Repo(path=repo["path"], error=repo["error"]))
                continue
            if not request.strict:
                continue  # gone: diff reports it missing
            where = " (on the far side of --via)" if request.via else ""
            raise UsageError(f"--repo {repo['path']}: {repo.get('error')}{where}")
        fields = {k: v for k, v in repo.items() if k != "error"}
        fields["path"] = request.repo_keys.get(repo["path"], repo["path"])
        repos.append(Repo(**fields))
    return tuple(sorted(repos, key=lambda r: r.path))


def _files(
    raw: list[ReportFile], request: CaptureRequest, tops: list[str]
) -> tuple[FileDigest, ...]:
    """The probe's hashes as FileDigests, each placed in its work tree (or --root); a live
    file read where its checkout lies now keeps the path it was recorded under."""
    keys = request.file_keys if len(request.file_keys) == len(raw) else (None,) * len(raw)
    out = []
    for f, key in zip(raw, keys, strict=True):
        error = f["error"]
        if error and request.strict:
            raise UsageError(f"--file {f['path']}: {error.lower()}")
        root, rel = place(f["path"], tops)
        out.append(
            FileDigest(
                path=key or f["path"],
                sha256=f["sha256"],
                size=f["size"],
                root=root,
                rel=rel,
                read_from=f["path"] if key and key != f["path"] else None,
                error=error,
            )
        )
    return tuple(sorted(out, key=lambda f: f.path))


def place(path: str, tops: list[str]) -> tuple[str | None, str | None]:
    """(the deepest of ``tops`` holding ``path``, the path below it) or (None, None)."""
    for top in sorted(tops, key=len, reverse=True):
        head = top.rstrip("/") + "/"
        if path.startswith(head) and len(path) > len(head):
            return top, path[len(head) :]
    return None, None


def capture_snapshot(request: CaptureRequest) -> Snapshot:
    """Measure everything ``request`` names and return it as a Snapshot."""
    return finish_capture(start_capture(request))


def finish_capture(started: StartedCapture) -> Snapshot:
    """Wait for a started capture's probe and assemble its Snapshot."""
    report = started.probe.result()
    try:
        return snapshot_from_report(report, started.request)
    except ValidationError as exc:  # a report that validated but does not fit a snapshot
        first = exc.errors()[0]
        where = field_path(first["loc"])
        raise ProbeError(
            f"{started.probe.label}: the probe's report does not fit a snapshot at {where}:"
            f" {first['msg']}"
        ) from None


def snapshot_from_report(report: ProbeReport, request: CaptureRequest) -> Snapshot:
    """Assemble the Snapshot from the probe's report (repos included, on this host too)."""
    packages = tuple(
        sorted(
            (package_from_probe(raw) for raw in report["packages"]),
            key=lambda p: (p.name, p.shadowed, p.location),
        )
    )
    by_name = {p.name: p for p in packages if not p.shadowed}
    cache_fields = set(Cache.model_fields)
    caches = {
        (c["kind"], redact_url(c["path"])): Cache(
            **{k: v for k, v in c.items() if k in cache_fields and k != "path"},
            path=redact_url(c["path"]),
        )
        for c in report["caches"]
    }
    return Snapshot(
        name=request.name,
        created=datetime.now(timezone.utc),  # to the microsecond: `log` orders by it
        # What a (possibly forged) report says is redacted here as well as on the far side.
        host=redact_text(report["host"]),
        user=report["user"],
        envguard_version=__version__,
        command=tuple(redact_argv(list(request.command))),
        via=shlex.join(redact_argv(list(request.via))) if request.via else None,
        note=None if request.note is None else redact_text(request.note),
        metrics=redact_metrics(request.metrics),
        interpreter=Interpreter(**report["interpreter"]),
        packages=packages,
        torch=torch_from_probe(report["torch"], by_name),
        accelerator=Accelerator(**report["accelerator"]),
        repos=_probed_repos(request, report["repos"]),
        files=_files(
            report["files"],
            request,
            ([str(request.root)] if request.root is not None else [])
            + [r["path"] for r in report["repos"] if not r.get("error")],
        ),
        caches=tuple(caches[key] for key in sorted(caches)),
        env=report["env"],  # redacted by the model, whatever the far side did
        warnings=tuple(redact_text(w) for w in report["warnings"]),
    )
