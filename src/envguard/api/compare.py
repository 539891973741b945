"""Comparing environments: diff() against a snapshot, check() against a lockfile,
diff_locks() between two lockfiles, under load_policy()'s rules."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from envguard.api._shared import load_snapshot, settings
from envguard.api.capture import load, newest, snapshot
from envguard.compare import identical
from envguard.compare import policy as rules
from envguard.compare.identical import Clean
from envguard.errors import UsageError
from envguard.snapshots import clean as known_clean
from envguard.snapshots import document, store
from envguard.snapshots.live import Recorded, documents_like, live_request
from envguard.snapshots.measure import VIA_TIMEOUT, Measure, via_timeout

if TYPE_CHECKING:
    from envguard.compare.models import Drift
    from envguard.compare.policy import Policy
    from envguard.compare.selection import Selection
    from envguard.snapshots.document import Document
    from envguard.snapshots.models import Snapshot


def load_policy(
    *, fail_on: str | None = None, only: Sequence[str] = (), start: Path | None = None
) -> Policy:
    """The nearest pyproject.toml's [tool.envguard] policy, with --fail-on and --only."""
    from dataclasses import replace

    found = rules.load_policy(start)
    if only:
        found = rules.only_sections(found, only)
    if fail_on is not None:
        found = replace(found, fail_on=rules.parse_fail_on(fail_on))
    return found


def diff(
    good: str | Path | Snapshot | None = None,
    against: str | Path | Snapshot | None = None,
    *,
    python: str | None = None,
    via: str | None = None,
    policy: Policy | None = None,
    allow: Sequence[str | Path] = (),
    root: str | Path | None = None,
    timeout: float = VIA_TIMEOUT,
    deep: bool = False,
    measure: Measure | None = None,
    meanwhile: Callable[[], object] | None = None,
) -> Drift:
    """What drifted from ``good`` (default: the newest snapshot) to ``against``, or to the
    live environment measured as ``good`` was (``python``/``via`` say where; ``timeout``:
    seconds for each call through ``via``). The files, caches and repos the snapshot names
    are read only under the working directory, its git work tree, the target's compile
    cache folders and ``allow``. ``root``: where the checkout holding the snapshot's tracked
    files lies now (default: where it was, else the work tree around the working
    directory). ``deep``: every installed file of the live side hashed against its RECORD
    (by default the files that run are checked by size, and hashed when written after
    their install). ``measure`` holds these in one value (give it or them). ``meanwhile``
    runs while a live side's probe works (the caller loads what it needs next)."""
    found = diff_result(
        good,
        against,
        policy=policy,
        measure=settings(
            measure, python=python, via=via, timeout=timeout, allow=allow, root=root, deep=deep
        ),
        meanwhile=meanwhile,
    )
    return found.drift() if isinstance(found, Clean) else found


def diff_result(
    good: str | Path | Snapshot | None = None,
    against: str | Path | Snapshot | None = None,
    *,
    policy: Policy | None = None,
    measure: Measure | None = None,
    meanwhile: Callable[[], object] | None = None,
) -> Drift | Clean:
    """diff(), where a clean live side may come back as a compare.identical.Clean, which
    loads no model (the command line says it so): the engine found the same two documents
    clean before, under the same policy and code (snapshots.clean)."""
    where = settings(measure).checked()  # a bad --timeout or --root: said before anything
    chosen = policy if policy is not None else load_policy()
    # Nothing heavy (pydantic) is imported before the probe starts: it works meanwhile.
    if against is not None or (good is not None and not isinstance(good, (str, Path))):
        from envguard.compare.engine import diff as compute

        if against is not None:
            first = load_snapshot(good if good is not None else newest())
            return compute(first, load_snapshot(against), chosen)
        from envguard.snapshots.capture import capture_snapshot

        assert good is not None  # a Snapshot: measure the live side as it was measured
        snap = load_snapshot(good)
        live = capture_snapshot(live_request(Recorded.of(snap), where))
        return compute(snap, live, chosen)

    keys: list[str] = []  # the snapshot's key, once its document is known (identical)

    def next_steps(expected: Document | Snapshot) -> None:
        code = known_clean.comparison_code() if isinstance(expected, dict) else None
        if code is not None and isinstance(expected, dict):
            keys.append(identical.snapshot_key(expected, chosen, code))
        if not (keys and known_clean.known_snapshot(keys[0])):
            from envguard.compare import engine  # noqa: F401  # loaded beside the probe
        if meanwhile is not None:
            meanwhile()

    path = store.resolve(str(good)) if good is not None else newest()
    expected, measured, started = documents_like(
        store.read(path), source=str(path), measure=where, meanwhile=next_steps
    )
    seen = identical.live_key(measured) if keys else None
    if seen is not None and known_clean.known(keys[0], seen) and document.fits(measured):
        assert isinstance(expected, dict)
        return Clean(expected.get("name"), measured.get("name"), expected.get("metrics") or {})
    from envguard.compare.engine import diff as compute
    from envguard.snapshots.capture import live_model

    snap = document.built(expected) if isinstance(expected, dict) else expected
    drift = compute(snap, live_model(measured, started), chosen)
    if seen is not None and not drift.changes and not drift.notes:  # (Clean has no notes)
        known_clean.remember(keys[0], seen)
    return drift


def check(
    good: str | Path | Snapshot | None = None,
    *,
    lock: str | Path | None = None,
    against: str | Path | Snapshot | None = None,
    python: str | None = None,
    via: str | None = None,
    policy: Policy | None = None,
    allow: Sequence[str | Path] = (),
    selection: Selection | None = None,
    root: str | Path | None = None,
    timeout: float = VIA_TIMEOUT,
    measure: Measure | None = None,
) -> Drift:
    """The CI gate. With ``lock`` (uv.lock, pylock.toml, requirements.txt, ``-`` for stdin):
    the snapshot ``good`` (default: the newest) against it, or with ``python``/``via`` and
    no ``good`` the live environment against it, with no snapshot at all. Without ``lock``:
    the snapshot against another snapshot or the live environment, as diff() does.
    ``timeout``: seconds for each call through ``via``; ``measure`` holds these in one
    value (give it or them)."""
    where = settings(measure, python=python, via=via, timeout=timeout, allow=allow, root=root)
    if lock is None:
        return diff(good, against, policy=policy, measure=where)
    from envguard.compare.lockfiles import OutsideLock, lock_drift, read_lock

    rules = policy if policy is not None else load_policy()
    if good is None and (where.python is not None or where.via is not None):
        subject_snap = _live_subject(where)
        at = f" at {where.python}" if where.python else f" behind --via {where.via}"
        subject = f"the environment{at}"
    else:
        subject_snap = load_snapshot(good if good is not None else newest())
        subject = f"snapshot {subject_snap.name}"
    label = "<stdin>" if str(lock) == "-" else str(lock)
    try:
        read = read_lock(lock, subject_snap, selection=selection, freshness=True)
    except OutsideLock as exc:
        return _outside(exc.message, subject_snap, subject=subject, lock=label, policy=rules)
    return lock_drift(
        subject_snap,
        read.pins,
        policy=rules,
        lock=label,
        subject=subject,
        notes=read.notes,
        exact=read.exact,
        stale=read.stale,
        elsewhere=read.elsewhere,
    )


def _live_subject(measure: Measure) -> Snapshot:
    """The live environment a lockfile is read for: measured where ``measure`` says (its
    interpreter, through its via, within its timeout), nothing else recorded."""
    timeout = VIA_TIMEOUT if measure.timeout is None else via_timeout(measure.timeout)
    return snapshot(measure=Measure(python=measure.python, via=measure.via, timeout=timeout))


def find_lock(start: str | Path | None = None) -> Path:
    """The project's lockfile: beside the nearest pyproject.toml at or above ``start`` (the
    cwd), the first of uv.lock, pylock.toml, pylock.*.toml, requirements.txt."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "pyproject.toml").is_file():
            candidates = [folder / "uv.lock", folder / "pylock.toml"]
            candidates += [*sorted(folder.glob("pylock.*.toml")), folder / "requirements.txt"]
            for candidate in candidates:
                if candidate.is_file():  # shown as the user would type it, from here
                    return Path(os.path.relpath(candidate)) if folder == here else candidate
            raise UsageError(
                f"{folder}: no uv.lock, pylock.toml or requirements.txt beside pyproject.toml",
                hint="pass --lock FILE",
            )
    raise UsageError(f"no pyproject.toml at or above {here}", hint="pass --lock FILE")


def _outside(why: str, snap: Snapshot, *, subject: str, lock: str, policy: Policy) -> Drift:
    """The interpreter is outside what the lock covers: one critical change, not an error."""
    from envguard.compare.engine import Collector
    from envguard.compare.models import Drift, Severity

    b = Collector(policy, section="interpreter")
    b.add(
        "outside_lock",
        "python",
        actual=snap.interpreter.version,
        severity=Severity.critical,
        message=why,
    )
    return Drift(
        changes=tuple(b.changes),
        expected_name=lock,
        actual_name=snap.name,
        subject=subject,
        metrics=dict(snap.metrics),
        verdict=(why,),
    )


def diff_locks(
    old: str | Path,
    new: str | Path,
    *,
    policy: Policy | None = None,
    selection: Selection | None = None,
    root: str | Path | None = None,
    good: str | Path | None = None,
    python: str | None = None,
    via: str | None = None,
    timeout: float = VIA_TIMEOUT,
    measure: Measure | None = None,
) -> Drift:
    """What changing lockfile ``old`` to ``new`` does to the installed set (either may be
    ``-``, stdin), both evaluated for one interpreter: the snapshot ``good``'s, the one at
    ``python`` (or behind ``via``), else this machine's (a lock may require another
    Python than envguard's own)."""
    from envguard.compare.lockfiles import locks_drift, read_lock

    if str(old) == "-" and str(new) == "-":
        raise UsageError("--lock -: only one of the two lockfiles can come from stdin")
    labels = tuple("<stdin>" if str(p) == "-" else str(p) for p in (old, new))
    where = settings(measure, python=python, via=via, timeout=timeout)
    subject = (
        load(good)
        if good is not None
        else _live_subject(where)
        if where.python is not None or where.via is not None
        else None
    )
    # Without an interpreter named, a lock change is read for every environment of each
    # lock's own Python range, not for the one running envguard.
    # A group or extra that only one side defines (the change adds it) is read without on
    # the other, with a note.
    before = read_lock(old, subject, selection=selection, everywhere=True, lenient=True)
    after = read_lock(new, subject, selection=selection, everywhere=True, lenient=True)
    drift = locks_drift(
        before,
        after,
        policy=policy if policy is not None else load_policy(),
        labels=(labels[0], labels[1]),
    )
    return drift.model_copy(update={"notes": before.notes + after.notes})
