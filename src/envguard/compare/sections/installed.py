"""Installed files against their RECORD: edited in place, missing, added, clobbered by
another distribution; paths two distributions claim; unowned files at the top of
site-packages. What runs, not what the metadata says."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from envguard.compare.sections.base import Section
from envguard.compare.sections.packages import package_severity
from envguard.compare.severity import Severity

if TYPE_CHECKING:
    from envguard.compare.engine import Collector
    from envguard.compare.models import Change
    from envguard.snapshots.models import Clash, OnDisk, Package, Snapshot

C, W, I = Severity.critical, Severity.warning, Severity.info  # noqa: E741

# (field of OnDisk, change kind, what happened to the files)
_LISTS = (
    ("modified", "modified_in_place", "modified in place"),
    ("missing", "files_missing", "missing"),
    ("added", "files_added", "added that its RECORD does not list"),
    ("clobbered", "clobbered", "holding another distribution's bytes"),
)


# Modules Python's site imports at start-up when they exist (site.execsitecustomize), as a
# module, a package (the probe names a folder with a trailing "/") or sourceless bytecode.
_STARTUP = frozenset(
    f"{name}{form}" for name in ("sitecustomize", "usercustomize") for form in (".py", "/", ".pyc")
)


def _files(paths: list[str], what: str) -> str:
    """``1 file modified in place (a.py)``, ``4 files missing (a.py, b.py, c.py, +1 more)``."""
    count = len(paths)
    shown = ", ".join(paths[:3]) + (f", +{count - 3} more" if count > 3 else "")
    return f"{count} file{'s' if count != 1 else ''} {what} ({shown})"


def _paths(on_disk: OnDisk | None, field: str) -> tuple[str, ...]:
    return getattr(on_disk, field) if on_disk is not None else ()


def _owners(snap: Snapshot) -> dict[str, Clash]:
    return {c.path: c for c in snap.clashes or ()}


def _compare_package(
    b: Collector,
    name: str,
    ep: Package | None,
    ap: Package,
    level: Severity,
    owners: dict[str, Clash] | None,
) -> None:
    """``owners``: the live clashes by path, or None when the good side recorded its own
    (then the clash rows say who lost a path, not each loser)."""
    # Against the good side's record of the same install: what it already had is not drift.
    same = ep is not None and ep.version == ap.version and ep.fingerprint == ap.fingerprint
    before = ep.on_disk if same and ep is not None else None
    why = ": GPU stack" if level is C else ""
    unknown = same and before is None
    if unknown:
        # The same install, whose files the good side did not check (a snapshot taken
        # before they were recorded): what is found now may have been there then.
        level = min(level, W, key=lambda s: s.rank)
        why = " (the good snapshot did not record its files)"
    for field, kind, what in _LISTS:
        now = _paths(ap.on_disk, field)
        was = set(_paths(before, field))
        new = [p for p in now if p not in was]
        if field == "clobbered" and owners is None:
            continue
        if new:
            message = f"{name} {ap.version}: {_files(new, what)}"
            if field == "added" and any(p.endswith(".pyc") for p in new):
                message += "; bytecode that Python runs and no source here compiles to"
            if field == "clobbered":
                winners = {p: c.owner for p, c in (owners or {}).items()}
                message = f"{name} {ap.version}: " + "; ".join(
                    f"{p} is {winners.get(p) or 'another distribution'}'s copy" for p in new[:3]
                )
                if len(new) > 3:
                    message += f" (+{len(new) - 3} more)"
            b.add(
                kind,
                name,
                expected="as RECORD",
                actual=", ".join(new[:3]),
                # Who owned a shared path there is not known: install order decides, and a
                # rebuild of that snapshot must not fail on whichever order it took.
                severity=I if unknown and field == "clobbered" else level,
                message=message + why,
            )
    if ep is not None and same and before is not None:
        still = set(_paths(ap.on_disk, "modified"))
        back = [p for p in before.modified if p not in still]
        if back and ap.on_disk is not None:
            b.add(
                "modification_gone",
                name,
                expected=", ".join(back[:3]),
                actual="as RECORD",
                severity=W,
                message=f"{name} {ap.version}: "
                + _files(back, "modified in the good environment, now as RECORD lists them"),
            )


def compare(b: Collector, e: Snapshot, a: Snapshot) -> None:
    ep, ap = e.package_map(), a.package_map()
    owners = _owners(a) if e.clashes is None else None
    for name in sorted(ap):
        if b.policy.ignores_package(name) or ap[name].on_disk is None:
            continue
        level = package_severity(b.policy, name)
        _compare_package(b, name, ep.get(name), ap[name], level, owners)
    _compare_clashes(b, e, a)
    _compare_unowned(b, e, a)


def _compare_clashes(b: Collector, e: Snapshot, a: Snapshot) -> None:
    if a.clashes is None:
        return
    before = _owners(e)
    for path, clash in sorted(_owners(a).items()):
        claimants = " and ".join(f"{c.name} {c.version}" for c in clash.claimants)
        level = max(
            (package_severity(b.policy, c.name) for c in clash.claimants),
            key=lambda s: s.rank,
            default=W,
        )
        on_disk = f"{clash.owner}'s" if clash.owner else "none of theirs"
        was = before.get(path)
        if was is not None and was.owner != clash.owner:
            b.add(
                "owner_changed",
                path,
                expected=was.owner,
                actual=clash.owner,
                severity=C,
                message=f"{path}: the file on disk is {on_disk}, was "
                f"{was.owner + chr(39) + 's' if was.owner else 'none of theirs'}"
                f" (claimed by {claimants}: install order decides)",
            )
        elif was is None and e.clashes is not None:
            b.add(
                "clash",
                path,
                actual=clash.owner,
                severity=level,
                message=f"{path} is claimed by {claimants}; the file on disk is {on_disk}",
            )


def _compare_unowned(b: Collector, e: Snapshot, a: Snapshot) -> None:
    if a.unowned is None or e.unowned is None:
        return
    for name in sorted(set(a.unowned) - set(e.unowned)):
        runs = " (it runs at every start-up)" if name.endswith(".pth") or name in _STARTUP else ""
        b.add(
            "unowned_added",
            name,
            actual=name,
            severity=W,
            message=f"site-packages/{name} added: no installed distribution owns it{runs}",
        )
    for name in sorted(set(e.unowned) - set(a.unowned)):
        b.add(
            "unowned_removed",
            name,
            expected=name,
            severity=I,
            message=f"site-packages/{name} removed (no distribution owned it)",
        )


def identity(snap: Snapshot) -> Iterator[tuple[str, str]]:
    for pkg in snap.packages:
        if pkg.shadowed or pkg.on_disk is None:
            continue
        for field, kind, _ in _LISTS:
            paths = _paths(pkg.on_disk, field)
            if paths:
                yield f"installed {pkg.name} {kind}", ", ".join(paths)
    for path, clash in sorted(_owners(snap).items()):
        yield f"installed {path}", f"owner {clash.owner}"


def restore_hint(change: Change, snapshot: Snapshot) -> str | None:
    if change.kind == "unowned_added":
        return f"remove site-packages/{change.name} (no distribution owns it)"
    if change.kind == "modification_gone":
        return (
            f"{change.name}: the good environment had {change.expected} edited in place;"
            " envguard does not keep those bytes: apply that edit again"
        )
    return None


SECTION = Section(
    name="installed",
    title="installed files",
    compare=compare,
    identity=identity,
    restore_hint=restore_hint,
)
