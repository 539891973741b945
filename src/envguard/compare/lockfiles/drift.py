"""A snapshot's pins against a lockfile's, through the packages section's rules."""

from __future__ import annotations

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from envguard.compare.engine import Collector, sort_changes
from envguard.compare.lockfiles.common import Pin
from envguard.compare.models import Drift, Severity
from envguard.compare.policy import Policy
from envguard.compare.sections.packages import package_severity
from envguard.snapshots.models import Snapshot


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


def lock_drift(snapshot: Snapshot, pins: dict[str, Pin], *, policy: Policy, lock: str) -> Drift:
    """Packages whose pin differs, or that are in one of snapshot and lock but not the other."""
    packages = snapshot.package_map()
    b = Collector(policy, section="packages")
    # An editable pin found by path (requirements.txt `-e DIR`) is matched by that path.
    editables = {p.source.path: p.name for p in packages.values() if p.source.kind == "editable"}
    pins = {
        editables.get(pin.editable, key) if pin.editable and key not in packages else key: pin
        for key, pin in pins.items()
    }
    for name in sorted(packages.keys() | pins.keys()):
        if policy.ignores_package(name):
            continue
        pkg, pin = packages.get(name), pins.get(name)
        level = package_severity(policy, name)
        if pin is None and pkg is not None:
            b.add(
                "not_in_lock",
                name,
                expected=pkg.version,
                severity=level,
                message=f"{name} {pkg.version} is installed but not in {lock}",
            )
        elif pkg is None and pin is not None:
            b.add(
                "not_installed",
                name,
                actual=pin.version or pin.url or pin.editable,
                severity=level,
                message=f"{name} is in {lock} but not in the snapshot",
            )
        elif pkg is not None and pin is not None:
            if pin.version is not None and not _same_version(pkg.version, pin.version):
                if _matches(pkg.version, pin.version):  # ==2.11.0 admits 2.11.0+cu128
                    b.add(
                        "variant_unpinned",
                        name,
                        expected=pkg.version,
                        actual=pin.version,
                        severity=Severity.info,
                        message=f"{name}: {lock} pins {pin.version}, which admits the installed"
                        f" {pkg.version} but not its build variant",
                    )
                    continue
                b.add(
                    "pin_differs",
                    name,
                    expected=pkg.version,
                    actual=pin.version,
                    severity=level,
                    message=f"{name}: snapshot has {pkg.version}, {lock} pins {pin.version}",
                )
            elif pin.specifier and not SpecifierSet(pin.specifier).contains(
                pkg.version, prereleases=True
            ):
                b.add(
                    "pin_differs",
                    name,
                    expected=pkg.version,
                    actual=pin.specifier,
                    severity=level,
                    message=f"{name}: snapshot has {pkg.version}, {lock} asks {pin.specifier}",
                )
            elif (
                pin.url
                and pkg.source.kind == "vcs"
                and pkg.source.commit
                and (pkg.source.commit not in pin.url)
            ):
                commit = pkg.source.commit[:12]
                b.add(
                    "pin_differs",
                    name,
                    expected=commit,
                    actual=pin.url,
                    severity=level,
                    message=f"{name}: snapshot has commit {commit}, {lock} pins {pin.url}",
                )
    return Drift(
        changes=sort_changes(b.changes),
        metrics=dict(snapshot.metrics),
        expected_name=snapshot.name,
        actual_name=lock,
    )
