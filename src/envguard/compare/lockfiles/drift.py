"""A snapshot's pins against a lockfile's, through the packages section's rules."""

from __future__ import annotations

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from envguard.compare.engine import Collector, sort_changes
from envguard.compare.lockfiles.common import Pin
from envguard.compare.models import Drift, Severity
from envguard.compare.policy import Policy
from envguard.compare.sections.packages import package_severity, torch_version
from envguard.compare.verdict import lock_verdict, locks_verdict
from envguard.snapshots.models import Snapshot, Source


def _same_version(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def _matches(installed: str, pinned: str) -> bool:
    try:
        return SpecifierSet(f"=={pinned}").contains(installed, prereleases=True)
    except (InvalidVersion, ValueError):
        return False


SEED_PACKAGES = frozenset({"pip", "setuptools", "wheel"})


def lock_drift(
    snapshot: Snapshot,
    pins: dict[str, Pin],
    *,
    policy: Policy,
    lock: str,
    subject: str | None = None,
    notes: tuple[str, ...] = (),
    exact: bool = False,
    stale: str | None = None,
    elsewhere: dict[str, tuple[str, str]] | None = None,
) -> Drift:
    """Packages whose pin or source differs, or that are in one of snapshot and lock but not
    the other. ``subject`` says what the snapshot is ("snapshot good", "the environment at
    .venv"); each change points at the lockfile line that pins it, when there is one.
    ``exact``: the lock is installed as `uv sync` does (unless ``policy.inexact``), removing
    what it does not list, seed packages included. ``stale``: why the lock itself is out of
    date with its project, a critical change of its own. ``elsewhere``: why the lock does
    not install a package it holds (LockRead.elsewhere), said instead of "does not install"."""
    packages = snapshot.package_map()
    side = (
        "the environment" if subject and subject.startswith("the environment") else "the snapshot"
    )
    b = _located(policy, lock=lock, pins=pins)
    # An editable pin found by path (requirements.txt `-e DIR`) is matched by that path.
    editables = {p.source.path: p.name for p in packages.values() if p.source.kind == "editable"}
    pins = {
        editables.get(pin.editable, key) if pin.editable and key not in packages else key: pin
        for key, pin in pins.items()
    }
    if stale is not None:
        b.add("lock_stale", lock, severity=Severity.critical, message=stale)
    for name in sorted(packages.keys() | pins.keys()):
        if policy.ignores_package(name):
            continue
        pkg, pin = packages.get(name), pins.get(name)
        level = package_severity(policy, name)
        # torch is named with its build (2.14.1+cu130) where its distribution has none.
        installed = torch_version(snapshot, pkg) if name == "torch" and pkg else None
        if pin is None and pkg is not None:
            seed = name in SEED_PACKAGES and not policy.is_critical_package(name)
            kept = policy.inexact or (seed and not exact)
            b.add(
                "not_in_lock",
                name,
                actual=installed or pkg.version,
                # A venv's seed packages (python -m venv) stay through `pip install -r`,
                # and anything stays through `uv sync --inexact`: not drift of the lock's
                # making. `uv sync` itself is exact and removes them.
                severity=Severity.info if kept else level,
                message=f"{name} {installed or pkg.version} is installed"
                + (" (a seed package of the venv)" if seed else "")
                + _not_installed_by(lock, (elsewhere or {}).get(name))
                + (" (inexact: kept)" if policy.inexact else ""),
            )
        elif pkg is None and pin is not None:
            b.add(
                "not_installed",
                name,
                expected=pin.version or pin.url or pin.editable,
                severity=level,
                message=f"{name} is in {lock} but not in {side}",
            )
        elif pkg is not None and pin is not None:
            moved = _source_moved(pkg.source, pin, side=side, lock=lock)
            if moved is not None:
                expected, actual, message = moved
                b.add(
                    "source_differs",
                    name,
                    expected=expected,
                    actual=actual,
                    severity=level,
                    message=f"{name}: {message}",
                )
                continue
            # Either spelling of torch's version may be the one the lock pins: PyPI's
            # 2.14.1 is the build that calls itself 2.14.1+cu130.
            versions = (pkg.version, installed) if installed else (pkg.version,)
            have = installed or pkg.version
            if pin.version is not None and not any(_same_version(v, pin.version) for v in versions):
                if _matches(pkg.version, pin.version):  # ==2.11.0 admits 2.11.0+cu128
                    b.add(
                        "variant_unpinned",
                        name,
                        expected=pin.version,
                        actual=have,
                        severity=Severity.info,
                        message=f"{name}: {lock} pins {pin.version}, which admits the installed"
                        f" {have} but not its build variant",
                    )
                    continue
                b.add(
                    "pin_differs",
                    name,
                    expected=pin.version,
                    actual=have,
                    severity=level,
                    message=f"{name}: {side} has {have}, {lock} pins {pin.version}",
                )
            elif pin.specifier and not SpecifierSet(pin.specifier).contains(
                pkg.version, prereleases=True
            ):
                b.add(
                    "pin_differs",
                    name,
                    expected=pin.specifier,
                    actual=have,
                    severity=level,
                    message=f"{name}: {side} has {have}, {lock} asks {pin.specifier}",
                )
            elif (
                pin.url
                and pkg.source.kind == "vcs"
                and pkg.source.commit
                and (pinned := _pinned_commit(pin.url)) is not None
                and not pkg.source.commit.startswith(pinned)
            ):
                commit = pkg.source.commit[:12]
                b.add(
                    "pin_differs",
                    name,
                    expected=pin.url,
                    actual=commit,
                    severity=level,
                    message=f"{name}: {side} has commit {commit}, {lock} pins {pin.url}",
                )
    changes = sort_changes(b.changes)
    return Drift(
        changes=changes,
        metrics=dict(snapshot.metrics),
        expected_name=lock,
        actual_name=snapshot.name,
        subject=subject or f"snapshot {snapshot.name}",
        notes=notes,
        verdict=lock_verdict(changes, policy),
    )


def _not_installed_by(lock: str, why: tuple[str, str] | None) -> str:
    if why is None:
        return f" but {lock} does not install it"
    kind, text = why
    if kind == "platform":
        return f"; {lock} locks it only for {text}"
    return f"; it is in {lock}, but {text}"


def _source_moved(source: Source, pin: Pin, *, side: str, lock: str) -> tuple[str, str, str] | None:
    """How the installed source differs from the lock's as uv sees it: editable where the
    lock says an index or archive, an archive where it says editable, or editable from
    another folder. None when they agree (or the lock says nothing about the source)."""
    import os

    installed = source.path if source.kind == "editable" else None
    if pin.editable is not None:
        if installed is None:
            label = source.url or source.kind
            return (
                f"{source.kind} {label}" if source.url else source.kind,
                f"editable {pin.editable}",
                f"{lock} installs it editable from {pin.editable},"
                f" {side} has it installed from {label}, not editable",
            )
        if os.path.realpath(installed) != os.path.realpath(pin.editable):
            return (
                f"editable {installed}",
                f"editable {pin.editable}",
                f"{side} has it editable from {installed}, {lock} from {pin.editable}",
            )
        return None
    if installed is not None and not (pin.url and "+" in pin.url.split(":", 1)[0]):
        wanted = pin.url or pin.version or "(any version)"
        return (
            f"editable {installed}",
            wanted,
            f"{side} has it editable from {installed}, {lock} installs {wanted}",
        )
    return None


def _pinned_commit(url: str) -> str | None:
    """The commit a VCS URL pins (``...@<hex>``), lower-case; None for a branch or tag."""
    import re

    match = re.search(r"@([0-9a-fA-F]{7,40})(?:#.*)?$", url)
    return match.group(1).lower() if match else None


def _located(policy: Policy, *, lock: str, pins: dict[str, Pin]) -> Collector:
    """A collector whose changes point at the line of ``lock`` that pins their package."""
    lines = {name: pin.line for name, pin in pins.items() if pin.line is not None}
    return Collector(
        policy, section="packages", file=None if lock == "<stdin>" else lock, lines=lines
    )


def locks_drift(
    old: dict[str, Pin], new: dict[str, Pin], *, policy: Policy, labels: tuple[str, str]
) -> Drift:
    """What a lock change does: packages added, removed, moved to another version or
    source, from ``old`` to ``new`` (each evaluated for the same interpreter)."""
    from envguard.compare.sections.packages import version_change

    before, after = labels
    b = _located(policy, lock=after, pins=new)
    for name in sorted(old.keys() | new.keys()):
        if policy.ignores_package(name):
            continue
        was, now = old.get(name), new.get(name)
        level = package_severity(policy, name)
        if now is None and was is not None:
            b.add(
                "removed",
                name,
                expected=_label(was),
                severity=level,
                message=f"{name} {_label(was)} removed",
            )
        elif was is None and now is not None:
            b.add(
                "added",
                name,
                actual=_label(now),
                severity=level,
                message=f"{name} {_label(now)} added",
            )
        elif was is not None and now is not None and _label(was) != _label(now):
            if was.version and now.version and was.version != now.version:
                kind, message = version_change(name, was.version, now.version)
            else:
                kind, message = "source_changed", f"{name} {_label(was)} -> {_label(now)}"
            b.add(
                kind,
                name,
                expected=_label(was),
                actual=_label(now),
                severity=level,
                message=message,
            )
    changes = sort_changes(b.changes)
    return Drift(
        changes=changes,
        expected_name=before,
        actual_name=after,
        subject=after,
        verdict=locks_verdict(changes, policy),
    )


def _label(pin: Pin) -> str:
    if pin.editable:
        return f"editable {pin.editable}"
    if pin.url and pin.version:
        return f"{pin.version} ({pin.url})"
    return pin.version or pin.url or pin.specifier or "(any version)"
