"""Pure drift engine: what changed between two snapshots, ranked by how much it matters."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from packaging.version import InvalidVersion, Version

from envguard.models import Cache, Change, Drift, Package, Severity, Snapshot, Source
from envguard.policy import SECTIONS, Policy
from envguard.units import human_size

C, W, I = Severity.critical, Severity.warning, Severity.info  # noqa: E741


class _Builder:
    """Collects changes, applying the policy's overrides and ignores."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.changes: list[Change] = []

    def add(
        self,
        section: str,
        kind: str,
        name: str,
        expected: object,
        actual: object,
        default: Severity,
        message: str,
    ) -> None:
        self.changes.append(
            Change(
                section=section,
                kind=kind,
                name=name,
                expected=None if expected is None else str(expected),
                actual=None if actual is None else str(actual),
                severity=self.policy.level(section, kind, default),
                message=message,
            )
        )


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _interpreter(b: _Builder, e: Snapshot, a: Snapshot) -> None:
    ei, ai = e.interpreter, a.interpreter
    if ei.implementation != ai.implementation:
        b.add(
            "interpreter",
            "implementation",
            "implementation",
            ei.implementation,
            ai.implementation,
            C,
            f"Python implementation {ei.implementation} -> {ai.implementation}",
        )
    if ei.version != ai.version:
        minor = _minor(ei.version) != _minor(ai.version)
        b.add(
            "interpreter",
            "version",
            "python",
            ei.version,
            ai.version,
            C if minor else W,
            f"Python {ei.version} -> {ai.version}"
            + (": a different minor version, every compiled wheel differs" if minor else ""),
        )
    if ei.machine != ai.machine:
        b.add(
            "interpreter",
            "machine",
            "machine",
            ei.machine,
            ai.machine,
            C,
            f"machine {ei.machine} -> {ai.machine}",
        )
    if ei.libc != ai.libc:
        b.add("interpreter", "libc", "libc", ei.libc, ai.libc, W, f"libc {ei.libc} -> {ai.libc}")
    if ei.prefix != ai.prefix:
        b.add(
            "interpreter",
            "prefix",
            "prefix",
            ei.prefix,
            ai.prefix,
            I,
            f"a different environment path: {ei.prefix} -> {ai.prefix}",
        )


def _parse(version: str) -> Version | None:
    try:
        return Version(version)
    except InvalidVersion:
        return None


def _source_label(source: Source) -> str:
    if source.kind == "index":
        return "index"
    if source.kind == "vcs":
        return f"vcs {source.url}@{(source.commit or '?')[:12]}"
    if source.kind in ("dir", "editable"):
        return f"{source.kind} {source.path or source.url}"
    return f"url {source.url}"


def _same_source(es: Source, as_: Source) -> bool:
    return (es.kind, es.url, es.commit, es.path, es.subdirectory) == (
        as_.kind,
        as_.url,
        as_.commit,
        as_.path,
        as_.subdirectory,
    )


def _version_change(name: str, ev: str, av: str) -> tuple[str, str]:
    """(kind, message) for a package whose version string differs."""
    e, a = _parse(ev), _parse(av)
    if e is not None and a is not None:
        if e.public == a.public and e.local != a.local:
            return "variant_changed", (
                f"{name} {ev} -> {av}: same release, a different build"
                f" (+{e.local or 'none'} -> +{a.local or 'none'})"
            )
        if a > e:
            return "upgraded", f"{name} upgraded {ev} -> {av}"
        if a < e:
            return "downgraded", f"{name} downgraded {ev} -> {av}"
    return "version_changed", f"{name} {ev} -> {av}"


def _package(b: _Builder, name: str, ep: Package, ap: Package, critical: bool) -> None:
    why = ": GPU stack" if critical else ""
    if ep.version != ap.version:
        kind, message = _version_change(name, ep.version, ap.version)
        b.add("packages", kind, name, ep.version, ap.version, C if critical else W, message + why)
        return
    if not _same_source(ep.source, ap.source):
        b.add(
            "packages",
            "source_changed",
            name,
            _source_label(ep.source),
            _source_label(ap.source),
            C if critical else W,
            f"{name} {ep.version} now from {_source_label(ap.source)}"
            f" (was {_source_label(ep.source)}){why}",
        )
    elif (
        ep.source.kind != "editable"
        and ep.fingerprint
        and ap.fingerprint
        and ep.fingerprint != ap.fingerprint
    ):
        b.add(
            "packages",
            "content_changed",
            name,
            ep.fingerprint[:12],
            ap.fingerprint[:12],
            C if critical else W,
            f"{name} {ep.version}: same version, different files (a rebuilt or patched wheel){why}",
        )
    if ep.installer != ap.installer:
        b.add(
            "packages",
            "installer_changed",
            name,
            ep.installer,
            ap.installer,
            I,
            f"{name} installed by {ap.installer} (was {ep.installer})",
        )
    if ep.requested != ap.requested:
        b.add(
            "packages",
            "requested_changed",
            name,
            ep.requested,
            ap.requested,
            I,
            f"{name} {'now' if ap.requested else 'no longer'} requested directly",
        )


def _packages(b: _Builder, e: Snapshot, a: Snapshot) -> None:
    ep, ap = e.package_map(), a.package_map()
    policy = b.policy
    for name in sorted(ep.keys() | ap.keys()):
        if policy.ignores_package(name):
            continue
        critical = policy.is_critical_package(name)
        why = ": GPU stack" if critical else ""
        if name not in ap:
            b.add(
                "packages",
                "removed",
                name,
                ep[name].version,
                None,
                C if critical else W,
                f"{name} {ep[name].version} removed{why}",
            )
        elif name not in ep:
            b.add(
                "packages",
                "added",
                name,
                None,
                ap[name].version,
                C if critical else W,
                f"{name} {ap[name].version} added: not in the good environment{why}",
            )
        else:
            _package(b, name, ep[name], ap[name], critical)


def _torch(b: _Builder, e: Snapshot, a: Snapshot) -> None:
    et, at = e.torch, a.torch
    if et is None or at is None:
        return  # torch added or removed is reported under packages
    labels = {
        "cuda": "CUDA",
        "git_version": "git version",
        "hip": "HIP",
        "debug": "debug build",
        "cudnn": "cuDNN",
        "nccl": "NCCL",
        "cublas": "cuBLAS",
        "triton": "triton",
    }
    for key, label in labels.items():
        ev, av = getattr(et, key), getattr(at, key)
        if ev != av:
            b.add("torch", key, key, ev, av, C, f"torch's {label} {ev} -> {av}")


def _accelerator(b: _Builder, e: Snapshot, a: Snapshot) -> None:
    ea, aa = e.accelerator, a.accelerator
    if ea.present and not aa.present:
        b.add(
            "accelerator",
            "missing",
            "gpu",
            ea.count,
            0,
            C,
            "no GPU or NVIDIA driver found (the good run had one)",
        )
        return
    if ea.driver != aa.driver and ea.driver and aa.driver:
        b.add(
            "accelerator",
            "driver",
            "driver",
            ea.driver,
            aa.driver,
            W,
            f"NVIDIA driver {ea.driver} -> {aa.driver}",
        )
    if ea.count != aa.count:
        b.add(
            "accelerator",
            "count",
            "gpus",
            ea.count,
            aa.count,
            W,
            f"GPU count {ea.count} -> {aa.count}",
        )
    if sorted(set(ea.gpus)) != sorted(set(aa.gpus)) and ea.gpus and aa.gpus:
        b.add(
            "accelerator",
            "model",
            "gpu",
            ", ".join(sorted(set(ea.gpus))),
            ", ".join(sorted(set(aa.gpus))),
            W,
            "GPU model changed",
        )
    if ea.nvcc != aa.nvcc:
        b.add("accelerator", "nvcc", "nvcc", ea.nvcc, aa.nvcc, I, f"nvcc {ea.nvcc} -> {aa.nvcc}")


def _repos(b: _Builder, e: Snapshot, a: Snapshot) -> None:
    actual = {r.path: r for r in a.repos}
    for er in e.repos:
        ar = actual.get(er.path)
        if ar is None:
            b.add("repos", "missing", er.path, er.head, None, W, f"repo {er.path} is gone")
            continue
        if er.head != ar.head:
            b.add(
                "repos",
                "head_moved",
                er.path,
                er.head,
                ar.head,
                C,
                f"repo {er.path}: HEAD moved {(er.head or '-')[:12]} -> {(ar.head or '-')[:12]}",
            )
        if er.branch != ar.branch:
            b.add(
                "repos",
                "branch_changed",
                er.path,
                er.branch,
                ar.branch,
                I,
                f"repo {er.path}: branch {er.branch or '(detached)'} ->"
                f" {ar.branch or '(detached)'}",
            )
        if ar.dirty and not er.dirty:
            b.add(
                "repos",
                "dirty",
                er.path,
                "clean",
                "dirty",
                W,
                f"repo {er.path} has uncommitted changes (the good run was clean)",
            )
        elif ar.dirty and er.diff_sha256 != ar.diff_sha256:
            b.add(
                "repos",
                "dirty_differently",
                er.path,
                (er.diff_sha256 or "")[:12],
                (ar.diff_sha256 or "")[:12],
                W,
                f"repo {er.path}: uncommitted changes differ from the good run's",
            )
        elif er.dirty and not ar.dirty:
            b.add(
                "repos",
                "clean",
                er.path,
                "dirty",
                "clean",
                W,
                f"repo {er.path} is clean, but the good run had uncommitted changes",
            )


def _files(b: _Builder, e: Snapshot, a: Snapshot) -> None:
    actual = {f.path: f for f in a.files}
    for ef in e.files:
        af = actual.get(ef.path)
        if af is None or af.sha256 is None:
            b.add(
                "files",
                "missing",
                ef.path,
                (ef.sha256 or "")[:12],
                None,
                C,
                f"tracked file {ef.path} is missing",
            )
        elif af.sha256 != ef.sha256:
            b.add(
                "files",
                "changed",
                ef.path,
                (ef.sha256 or "")[:12],
                af.sha256[:12],
                C,
                f"tracked file {ef.path} changed ({ef.size} -> {af.size} bytes)",
            )


def _cache(b: _Builder, ec: Cache, ac: Cache | None) -> None:
    label = f"{ec.kind} cache {ec.path}"
    was = f"{human_size(ec.bytes)}, {ec.files} files"
    if ac is None or not ac.exists or (ac.files == 0 and ec.files > 0):
        if ec.bytes > 0 or ec.files > 0:
            state = "missing" if ac is None or not ac.exists else "empty"
            b.add(
                "caches",
                "cold",
                ec.path,
                was,
                state,
                W,
                f"{label} is cold ({state}; was {was}): first steps will recompile,"
                " expect a slow warm-up",
            )
        return
    if not ac.readable and ec.readable:
        b.add(
            "caches",
            "unreadable",
            ec.path,
            "readable",
            "unreadable",
            W,
            f"{label} is no longer readable",
        )
    elif ac.bytes * 2 < ec.bytes:
        b.add(
            "caches",
            "shrunk",
            ec.path,
            was,
            f"{human_size(ac.bytes)}, {ac.files} files",
            W,
            f"{label} lost more than half its size ({was} -> {human_size(ac.bytes)}):"
            " expect recompilation",
        )
    elif ac.bytes > ec.bytes:
        b.add(
            "caches",
            "grown",
            ec.path,
            human_size(ec.bytes),
            human_size(ac.bytes),
            I,
            f"{label} grew {human_size(ec.bytes)} -> {human_size(ac.bytes)}",
        )


def _caches(b: _Builder, e: Snapshot, a: Snapshot) -> None:
    actual = {(c.kind, c.path): c for c in a.caches}
    for ec in e.caches:
        _cache(b, ec, actual.get((ec.kind, ec.path)))


def _env(b: _Builder, e: Snapshot, a: Snapshot) -> None:
    for name in sorted(e.env.keys() | a.env.keys()):
        ev, av = e.env.get(name), a.env.get(name)
        if ev == av:
            continue
        level = I if name == "VIRTUAL_ENV" else W
        redacted = (ev or "").startswith("<redacted") or (av or "").startswith("<redacted")
        if ev is None:
            b.add("env", "added", name, None, av, level, f"${name} is set now ({av})")
        elif av is None:
            b.add("env", "removed", name, ev, None, level, f"${name} is no longer set (was {ev})")
        else:
            detail = "values redacted" if redacted else f"{ev} -> {av}"
            b.add("env", "changed", name, ev, av, level, f"${name} changed ({detail})")


_SECTION_CHECKS: dict[str, Callable[[_Builder, Snapshot, Snapshot], None]] = {
    "interpreter": _interpreter,
    "torch": _torch,
    "packages": _packages,
    "accelerator": _accelerator,
    "repos": _repos,
    "files": _files,
    "caches": _caches,
    "env": _env,
}


def sort_changes(changes: list[Change]) -> tuple[Change, ...]:
    """Critical first, then by section order and name: stable, deterministic output."""
    order = {s: i for i, s in enumerate(SECTIONS)}
    return tuple(
        sorted(changes, key=lambda c: (-c.severity.rank, order.get(c.section, 99), c.name, c.kind))
    )


def diff(expected: Snapshot, actual: Snapshot, policy: Policy | None = None) -> Drift:
    """Every change from ``expected`` (the good run) to ``actual``, worst first."""
    policy = policy or Policy()
    builder = _Builder(policy)
    for section, check in _SECTION_CHECKS.items():
        if section not in policy.ignore_sections:
            check(builder, expected, actual)
    return Drift(
        changes=sort_changes(builder.changes),
        metrics=dict(expected.metrics),
        expected_name=expected.name,
        actual_name=actual.name,
    )


def iter_sections(drift: Drift) -> Iterator[tuple[Severity, list[Change]]]:
    """Changes grouped by severity, critical first."""
    for level in (C, W, I):
        group = [c for c in drift.changes if c.severity is level]
        if group:
            yield level, group
