"""Installed distributions: added, removed, versions, build variants, sources, contents."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from envguard.compare.sections.base import Section
from envguard.compare.severity import Severity

if TYPE_CHECKING:
    from envguard.compare.engine import Collector
    from envguard.compare.policy import Policy
    from envguard.snapshots.models import Package, Snapshot, Source

C, W, I = Severity.critical, Severity.warning, Severity.info  # noqa: E741


def package_severity(policy: Policy, name: str) -> Severity:
    """Critical for the GPU stack (and the user's critical packages), else warning."""
    return C if policy.is_critical_package(name) else W


def _parse(version: str) -> Version | None:
    try:
        return Version(version)
    except (InvalidVersion, ValueError):  # ValueError: a release number too long for int()
        return None


def source_label(source: Source) -> str:
    if source.kind == "index":
        return "index"
    if source.kind == "vcs":
        return f"vcs {source.url}@{(source.commit or '?')[:12]}"
    if source.kind in ("dir", "editable"):
        return f"{source.kind} {source.path or source.url}"
    return f"url {source.url}"


def _same_source(es: Source, as_: Source) -> bool:
    fields = ("kind", "url", "commit", "path", "subdirectory")
    return all(getattr(es, f) == getattr(as_, f) for f in fields)


def version_change(name: str, ev: str, av: str) -> tuple[str, str]:
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


def _package(
    b: Collector,
    name: str,
    ep: Package,
    ap: Package,
    *,
    level: Severity,
    labels: tuple[str, str] | None = None,
) -> None:
    why = ": GPU stack" if level is C else ""
    if ep.version != ap.version or (labels is not None and labels[0] != labels[1]):
        # torch: compared as its build says (2.14.1 from PyPI is 2.14.1+cu130)
        ev, av = labels if labels is not None else (ep.version, ap.version)
        kind, message = version_change(name, ev, av)
        b.add(
            kind,
            name,
            expected=ev,
            actual=av,
            severity=level,
            message=message + why,
        )
        return
    if not _same_source(ep.source, ap.source):
        was, now = source_label(ep.source), source_label(ap.source)
        b.add(
            "source_changed",
            name,
            expected=was,
            actual=now,
            severity=level,
            message=f"{name} {ep.version} now from {now} (was {was}){why}",
        )
    elif (
        ep.source.kind != "editable"
        and ep.fingerprint
        and ap.fingerprint
        and ep.fingerprint != ap.fingerprint
    ):
        b.add(
            "content_changed",
            name,
            expected=ep.fingerprint[:12],
            actual=ap.fingerprint[:12],
            severity=level,
            message=f"{name} {ep.version}: same version, different files"
            f" (a rebuilt or patched wheel){why}",
        )
    if ep.installer != ap.installer:
        b.add(
            "installer_changed",
            name,
            expected=ep.installer,
            actual=ap.installer,
            severity=I,
            message=f"{name} installed by {ap.installer} (was {ep.installer})",
        )
    if ep.requested != ap.requested:
        b.add(
            "requested_changed",
            name,
            expected=ep.requested,
            actual=ap.requested,
            severity=I,
            message=f"{name} {'now' if ap.requested else 'no longer'} requested directly",
        )


def compare(b: Collector, e: Snapshot, a: Snapshot) -> None:
    ep, ap = e.package_map(), a.package_map()
    for name in sorted(ep.keys() | ap.keys()):
        if b.policy.ignores_package(name):
            continue
        level = package_severity(b.policy, name)
        why = ": GPU stack" if level is C else ""
        if name not in ap:
            version = ep[name].version
            b.add(
                "removed",
                name,
                expected=version,
                severity=level,
                message=f"{name} {version} removed{why}",
            )
        elif name not in ep:
            version = ap[name].version
            b.add(
                "added",
                name,
                actual=version,
                severity=level,
                message=f"{name} {version} added: not in the good environment{why}",
            )
        elif name == "torch":
            labels = (torch_version(e, ep[name]) or "", torch_version(a, ap[name]) or "")
            _package(b, name, ep[name], ap[name], level=level, labels=labels)
        else:
            _package(b, name, ep[name], ap[name], level=level)


def torch_version(snap: Snapshot, pkg: Package | None = None) -> str | None:
    """torch's version with its build: the distribution's, or torch's own version.py when
    the distribution carries no local label (PyPI's CUDA wheels: 2.14.1 is 2.14.1+cu130)."""
    pkg = pkg or snap.package_map().get("torch")
    if pkg is None:
        return None
    build = snap.torch.version if snap.torch is not None else None
    if "+" not in pkg.version and build and build.startswith(pkg.version + "+"):
        return build
    return pkg.version


def identity(snap: Snapshot) -> Iterator[tuple[str, str]]:
    for pkg in snap.packages:
        if pkg.shadowed:
            continue
        # torch as its build says: two nodes with PyPI's 2.14.1 may hold +cu128 and +cu130
        value = (torch_version(snap, pkg) or pkg.version) if pkg.name == "torch" else pkg.version
        src = pkg.source
        if src.kind == "vcs":
            value += f" @ {src.url}@{(src.commit or '')[:12]}"
        elif src.kind != "index":
            value += f" ({src.kind})"
        yield f"package {pkg.name}", value


SECTION = Section(name="packages", title="packages", compare=compare, identity=identity)
