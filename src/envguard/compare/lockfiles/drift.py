"""A snapshot's pins against a lockfile's, through the packages section's rules."""

from __future__ import annotations

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from envguard.compare.engine import Collector, sort_changes
from envguard.compare.lockfiles.common import LockRead, Pin
from envguard.compare.models import ChangeGroup, Drift, Severity
from envguard.compare.policy import Policy
from envguard.compare.sections.fit import facts as fit_facts
from envguard.compare.sections.packages import package_severity, torch_version
from envguard.compare.sections.siblings import facts as sibling_facts
from envguard.compare.verdict import lock_verdict, locks_verdict
from envguard.redact import redact_text, redact_url
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
    # What the files say cannot load is drift whatever the lock pins: no lock knows it.
    unfit = Collector(policy, section="fit")
    fit_facts(unfit, snapshot)
    split = Collector(policy, section="siblings")
    sibling_facts(split, snapshot)
    changes = sort_changes([*b.changes, *unfit.changes, *split.changes])
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
    if pin.kind is not None and pin.url and not _same_place(source, pin.url, kind=pin.kind):
        # `uv sync --check` reinstalls a direct source that came from anywhere else (the
        # index, another file or URL): PEP 610's url is where it came from.
        what = "folder" if pin.kind == "directory" else "archive"
        label = source.url if source.kind in ("url", "dir") and source.url else source.kind
        return (
            pin.url,
            f"{source.kind} {label}" if source.url else source.kind,
            f"{lock} installs it from the {what} {pin.url}, {side} has it from {label}",
        )
    return None


def _same_place(source: Source, url: str, *, kind: str) -> bool:
    """Whether an installed ``source`` came from the lock's archive or folder ``url``:
    ``file:`` URLs compared as resolved paths, others as written (credentials left out)."""
    import os

    from envguard.snapshots.document import file_url_path

    if source.kind != ("dir" if kind == "directory" else "url") or source.url is None:
        return False
    here = file_url_path(url)
    if here is not None:
        return source.path is not None and os.path.realpath(source.path) == os.path.realpath(here)
    return source.url == redact_url(url)


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


def locks_drift(old: LockRead, new: LockRead, *, policy: Policy, labels: tuple[str, str]) -> Drift:
    """What a lock change does: packages added, removed, moved to another version or
    source, from ``old`` to ``new`` (each read for the same interpreter, or both for every
    environment of their Python range). Each change names its extras, groups and markers
    (``scope``); a package neither lock installs for the selection (only in an unselected
    group, locked only for another platform than the interpreter's) is reported at info,
    saying so; what an added or upgraded package pulled in is folded under it."""
    from envguard.compare.causes import CAUSED_KINDS, fold
    from envguard.compare.sections.packages import version_change

    before, after = labels
    b = _located(policy, lock=after, pins={**new.aside, **new.pins})
    scopes: dict[str, tuple[str, ...]] = {}
    for name in sorted(old.pins.keys() | new.pins.keys() | old.aside.keys() | new.aside.keys()):
        if policy.ignores_package(name):
            continue
        was, now = old.pins.get(name), new.pins.get(name)
        outside = was is None and now is None
        if outside:  # in neither selection: said, not failed
            was, now, level = old.aside.get(name), new.aside.get(name), Severity.info
            why = _aside_why(new if now is not None else old, name)
        else:
            level, why = package_severity(policy, name), ""
            if was is None and name in old.aside:
                why = f" (was {_aside_why(old, name).strip(' ()')})"
            elif now is None and name in new.aside:
                why = f" (now {_aside_why(new, name).strip(' ()')})"
        shown = now if now is not None else was
        scopes[name] = shown.scope if shown is not None else ()
        # A package neither side installs here is said with why, its scope being that why.
        where = why if outside else _scope_text(scopes[name]) + why
        if now is None and was is not None:
            b.add(
                "removed",
                name,
                expected=_label(was),
                severity=level,
                message=f"{name} {_label(was)} removed{where}",
            )
        elif was is None and now is not None:
            b.add(
                "added",
                name,
                actual=_label(now),
                severity=level,
                message=f"{name} {_label(now)} added{where}",
            )
        elif was is not None and now is not None and _label(was) != _label(now):
            if _single(was.version) and _single(now.version) and was.version != now.version:
                assert was.version is not None and now.version is not None
                kind, message = version_change(name, was.version, now.version)
            else:
                kind, message = "source_changed", f"{name} {_label(was)} -> {_label(now)}"
            b.add(
                kind,
                name,
                expected=_label(was),
                actual=_label(now),
                severity=level,
                message=message + where,
            )
    changes = list(b.changes)
    # What an added or upgraded package pulled in, by the new lock's edges; what a removed
    # one had pulled in, by the old lock's.
    forward = {c.name for c in changes if c.kind in CAUSED_KINDS}
    gone = {c.name for c in changes if c.kind == "removed"}
    causes = fold(new.requires, forward, present=forward) + fold(old.requires, gone, present=gone)
    member_of: dict[str, list[str]] = {}
    for cause in causes:
        for name in (cause.root, *cause.members):
            member_of.setdefault(name, []).append(cause.root)
    # Redacted as the Collector redacts every other field: a marker from a lockfile may
    # quote anything.
    changes = [
        c.model_copy(
            update={
                "groups": tuple(redact_text(r) for r in member_of.get(c.name, ())),
                "scope": tuple(redact_text(s) for s in scopes.get(c.name, ())),
            }
        )
        for c in changes
    ]
    ordered = sort_changes(changes)
    return Drift(
        changes=ordered,
        expected_name=before,
        actual_name=after,
        subject=after,
        verdict=locks_verdict(ordered, policy, causes),
        groups=tuple(
            ChangeGroup(root=redact_text(c.root), members=tuple(redact_text(m) for m in c.members))
            for c in causes
        ),
    )


def _single(version: str | None) -> bool:
    return version is not None and " or " not in version


def _scope_text(scope: tuple[str, ...]) -> str:
    """`` [group dev]``, `` [extra cpu; sys_platform == 'win32']``: where the lock installs
    a package when not everywhere by default."""
    return f" [{'; '.join(scope)}]" if scope else ""


def _aside_why(read: LockRead, name: str) -> str:
    """Why ``read``'s lock does not install ``name`` for the selection and interpreter."""
    kind, text = read.elsewhere.get(name, ("selection", "not selected"))
    if kind == "platform":
        return f" (locked only for {text})"
    return f" ({text.split(':', 1)[0]})"


def _label(pin: Pin) -> str:
    if pin.editable:
        return f"editable {pin.editable}"
    if pin.url and pin.version:
        return f"{pin.version} ({pin.url})"
    return pin.version or pin.url or pin.specifier or "(any version)"
