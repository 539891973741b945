"""envguard's operations as typed Python functions: what the CLI, the tests and your own
scripts call.

Each function takes plain arguments and returns a model (Snapshot, Drift, Plan, Outcome,
FleetReport; snapshot_document() the JSON document a snapshot file holds); none prints and
none exits. Failures raise EnvguardError (``.message``,
``.hint``, ``.exit_code``). Heavy modules (pydantic, rich, git) load inside the functions,
so importing this module stays cheap.

    import envguard

    snap = envguard.snapshot(name="good", metrics={"tok_s": 21500})
    envguard.save(snap)
    drift = envguard.diff("good")          # the live environment against the snapshot
    if drift.reaches(envguard.Severity.warning): ...
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from envguard.compare.models import Drift, FleetReport
    from envguard.compare.policy import Policy
    from envguard.compare.selection import Selection
    from envguard.probe.channel import Target
    from envguard.recovery.bisect import BisectReport, Step, Unit
    from envguard.recovery.outcome import Item, Outcome, RestoreReport
    from envguard.recovery.plan import Plan, Sources
    from envguard.snapshots.document import Document
    from envguard.snapshots.history import Entry
    from envguard.snapshots.hosts import HostResult
    from envguard.snapshots.models import MetricValue, Snapshot
    from envguard.snapshots.request import CaptureRequest, StartedCapture
    from envguard.snapshots.store import Listed


def _request(
    *,
    python: str | Path | None,
    name: str | None,
    repos: Sequence[str | Path],
    files: Sequence[str],
    caches: Sequence[str],
    metrics: Mapping[str, MetricValue] | None,
    note: str | None,
    via: str | Sequence[str] | None,
    timeout: float | None,
    command: Sequence[str] | None,
) -> CaptureRequest:
    from datetime import datetime, timezone

    from envguard.errors import UsageError
    from envguard.probe.interpreters import resolve_python
    from envguard.snapshots import store
    from envguard.snapshots.request import CaptureRequest
    from envguard.tools import split_command

    snap_name = (
        store.validate_name(name) if name else datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    )
    prefix = (
        split_command(via, option="--via") if isinstance(via, str) else tuple(via) if via else ()
    )
    if prefix:
        target: Path | str = str(python) if python else "python3"
    else:
        target = resolve_python(str(python) if python else None)
    if not prefix and timeout is not None and timeout <= 0:
        raise UsageError(f"--timeout {timeout:g}: must be positive")
    return CaptureRequest(
        python=target,
        python_label=f"--python {python}" if python and not prefix else None,
        name=snap_name,
        repos=tuple(Path(r) for r in repos),
        files=tuple(files),
        caches=tuple(("user", c) for c in caches),
        include_cwd_repo=not prefix,
        metrics=dict(metrics or {}),
        note=note,
        command=tuple(command) if command is not None else ("python", *sys.argv),
        via=prefix,
        timeout=timeout if prefix else None,
    )


def snapshot(
    *,
    python: str | Path | None = None,
    name: str | None = None,
    repos: Sequence[str | Path] = (),
    files: Sequence[str] = (),
    caches: Sequence[str] = (),
    metrics: Mapping[str, MetricValue] | None = None,
    note: str | None = None,
    via: str | Sequence[str] | None = None,
    timeout: float | None = 120.0,
    command: Sequence[str] | None = None,
    root: str | Path | None = None,
) -> Snapshot:
    """Measure an environment: the interpreter (default: $VIRTUAL_ENV, ./.venv, python3),
    its packages, torch's build, the GPU, git repos, files, caches and environment."""
    started = _start_snapshot(**locals())
    # The probe runs while the models (pydantic) load: that import is most of the start-up.
    from envguard.snapshots.capture import finish_capture

    return finish_capture(started)


def snapshot_document(
    *,
    python: str | Path | None = None,
    name: str | None = None,
    repos: Sequence[str | Path] = (),
    files: Sequence[str] = (),
    caches: Sequence[str] = (),
    metrics: Mapping[str, MetricValue] | None = None,
    note: str | None = None,
    via: str | Sequence[str] | None = None,
    timeout: float | None = 120.0,
    command: Sequence[str] | None = None,
    root: str | Path | None = None,
) -> Document:
    """snapshot(), as the JSON document its file holds (``Snapshot.model_validate`` of it
    is snapshot()'s result): checked as the model checks it, without loading pydantic
    where the check can vouch for it. What `envguard snapshot` writes."""
    started = _start_snapshot(**locals())
    from envguard.snapshots.capture import finish_document

    return finish_document(started)


def prestart(
    command: Literal["snapshot", "diff"],
    *,
    good: str | None = None,
    python: str | None = None,
) -> None:
    """Start the probe that ``snapshot(python=python)`` or ``diff(good, python=python)``
    (local, nothing else named) is about to need, so that it runs while the caller loads
    what it needs (the command line: typer). That call takes the probe over when it asks
    for exactly the same one, and stops it otherwise. Nothing is reported here: a problem
    (no such snapshot, no interpreter) is the call's to report."""
    from envguard.errors import EnvguardError

    try:
        if command == "snapshot":
            from envguard.snapshots.request import start_early

            start_early(
                _request(
                    python=python,
                    name=None,
                    repos=(),
                    files=(),
                    caches=(),
                    metrics=None,
                    note=None,
                    via=None,
                    timeout=None,
                    command=(),
                )
            )
        else:
            from envguard.snapshots import store
            from envguard.snapshots.live import PRESTART_BYTES, prestart_like

            path = store.resolve(good) if good is not None else newest()
            if path.stat().st_size <= PRESTART_BYTES:  # a huge one: not parsed twice
                prestart_like(store.read(path), source=str(path), python=python)
    except (EnvguardError, OSError, ValueError):
        return


def _start_snapshot(
    *,
    python: str | Path | None,
    name: str | None,
    repos: Sequence[str | Path],
    files: Sequence[str],
    caches: Sequence[str],
    metrics: Mapping[str, MetricValue] | None,
    note: str | None,
    via: str | Sequence[str] | None,
    timeout: float | None,
    command: Sequence[str] | None,
    root: str | Path | None,
) -> StartedCapture:
    from envguard.errors import UsageError
    from envguard.snapshots.request import start_capture

    request = _request(
        python=python,
        name=name,
        repos=repos,
        files=files,
        caches=caches,
        metrics=metrics,
        note=note,
        via=via,
        timeout=timeout,
        command=command,
    )
    if any("{host}" in token for token in request.via):
        raise UsageError("--via contains {host}: pass --hosts to say which hosts")
    if root is not None:
        from dataclasses import replace

        request = replace(request, root=Path(_root(root, remote=bool(request.via))))
    return start_capture(request)


def snapshot_hosts(
    hosts: str | Sequence[str],
    *,
    via: str | Sequence[str],
    folder: str | Path | None = None,
    python: str | None = None,
    name: str | None = None,
    repos: Sequence[str | Path] = (),
    files: Sequence[str] = (),
    caches: Sequence[str] = (),
    metrics: Mapping[str, MetricValue] | None = None,
    note: str | None = None,
    jobs: int = 16,
    timeout: float = 120.0,
    force: bool = False,
    command: Sequence[str] | None = None,
    on_done: Callable[[HostResult], None] | None = None,
) -> list[HostResult]:
    """Capture many hosts through ``via`` (with ``{host}`` in it), writing each one's
    snapshot to ``folder/HOST.json`` (or to ``folder`` with ``{host}`` filled in, when it
    has one) as it arrives; failed hosts are results too."""
    from envguard.snapshots import store
    from envguard.snapshots.hosts import capture_hosts, host_names

    host_list = host_names(hosts)
    request = _request(
        python=python,
        name=name,
        repos=repos,
        files=files,
        caches=caches,
        metrics=metrics,
        note=note,
        via=via,
        timeout=timeout,
        command=command,
    )
    target = Path(folder) if folder else store.default_path(request.name).with_suffix("")

    def path_for(host: str) -> Path:  # host names hold no "/": checked above
        if "{host}" in str(target):  # --out 'snaps/{host}.json', as the help says
            return Path(str(target).replace("{host}", host))
        return target / f"{host}.json"

    for host in host_list:
        store.check_target(path_for(host), force=force)

    def done(result: HostResult) -> None:
        if result.snapshot is not None:
            path = path_for(result.host)
            store.write_atomic(path, store.dumps(result.snapshot), force=force)
            result.path = path
        if on_done is not None:
            on_done(result)

    return capture_hosts(request, host_list, jobs=jobs, on_done=done)


def save(
    snap: Snapshot | Document,
    path: str | Path | None = None,
    *,
    force: bool = False,
    unique: bool = False,
) -> Path:
    """Write ``snap`` (a Snapshot, or snapshot_document()'s document) atomically (default:
    snapshots/NAME.json; ``{host}`` in the path is the snapshot's host); never overwrites
    without ``force``. Returns the path written. ``unique`` (a default, timestamped name):
    a name taken meanwhile gets -2, -3, ... instead of an error, so two snapshots in one
    second never collide."""
    from envguard.snapshots import store

    name, host = (snap["name"], snap["host"]) if isinstance(snap, dict) else (snap.name, snap.host)
    if path is None and unique and not force:
        for n in range(1, 1000):
            named = snap if n == 1 else store.renamed(snap, f"{name}-{n}")
            try:
                return save(named, force=False)
            except store.TargetExists:
                continue
    target = store.default_path(name) if path is None else Path(path)
    if "{host}" in str(target):
        from envguard.snapshots.hosts import check_host

        target = Path(str(target).replace("{host}", check_host(host, source="the snapshot's host")))
    store.write_atomic(target, store.dumps(snap), force=force)
    return target


def keep(
    snap: Snapshot,
    *,
    store: str | Path,
    files: bool = False,
    caches: bool = False,
    via: str | Sequence[str] | None = None,
    python: str | None = None,
    timeout: float | None = 120.0,
) -> Snapshot:
    """``snap`` with its tracked files' contents (``files``) and its compile caches
    (``caches``, as gzip tarballs) kept in the content store ``store``; read where ``snap``
    was taken: pass the same ``via`` (a prefix stored in a snapshot is never run)."""
    from envguard.snapshots.blobs import Blobs
    from envguard.snapshots.keep import keep_caches, keep_files

    blobs = Blobs(store)
    target = _target(via, python=python, timeout=timeout)
    warnings: list[str] = []
    if files:
        snap, warnings = keep_files(snap, blobs, target)
    if caches:
        snap = keep_caches(snap, blobs, target)
    if warnings:
        snap = snap.model_copy(update={"warnings": (*snap.warnings, *warnings)})
    return snap


def _target(
    via: str | Sequence[str] | None, *, python: str | None, timeout: float | None
) -> Target:
    from envguard.probe.channel import RemoteTarget, Target
    from envguard.tools import split_command

    if not via:
        return Target()
    prefix = split_command(via, option="--via") if isinstance(via, str) else tuple(via)
    return RemoteTarget(prefix, python or "python3", timeout=timeout)


def default_path(name: str) -> Path:
    """Where a snapshot named ``name`` is saved by default: snapshots/NAME.json."""
    from envguard.snapshots import store

    return store.default_path(store.validate_name(name))


def check_writable(path: str | Path, *, force: bool = False) -> None:
    """UsageError now, before a slow capture, if ``path`` exists and ``force`` is not set."""
    from envguard.snapshots import store

    store.check_target(Path(path), force=force)


def load(ref: str | Path) -> Snapshot:
    """A snapshot by path or by name in snapshots/, validated in full."""
    from envguard.snapshots import store

    return store.load(ref)


def newest() -> Path:
    """The snapshot file in snapshots/ whose run was recorded last."""
    from envguard.snapshots import store

    return store.newest()


def list_snapshots() -> list[Listed]:
    """Every snapshot in snapshots/, newest run first; unreadable ones last, with why."""
    from envguard.snapshots import store

    return store.listing()


def log(*, root: Path | None = None) -> list[Entry]:
    """The snapshots in snapshots/, oldest first, with their metrics and what changed since
    the one before (unreadable files last, with why)."""
    from envguard.snapshots import store
    from envguard.snapshots.history import history

    return history(store.list_snapshots(root=root))


def load_policy(
    *, fail_on: str | None = None, only: Sequence[str] = (), start: Path | None = None
) -> Policy:
    """The nearest pyproject.toml's [tool.envguard] policy, with --fail-on and --only."""
    from dataclasses import replace

    from envguard.compare import policy as rules

    found = rules.load_policy(start)
    if only:
        found = rules.only_sections(found, only)
    if fail_on is not None:
        found = replace(found, fail_on=rules.parse_fail_on(fail_on))
    return found


def _load(ref: str | Path | Snapshot) -> Snapshot:
    from envguard.snapshots.models import Snapshot

    return ref if isinstance(ref, Snapshot) else load(ref)


def diff(
    good: str | Path | Snapshot | None = None,
    against: str | Path | Snapshot | None = None,
    *,
    python: str | None = None,
    via: str | None = None,
    policy: Policy | None = None,
    allow: Sequence[str | Path] = (),
    root: str | Path | None = None,
) -> Drift:
    """What drifted from ``good`` (default: the newest snapshot) to ``against``, or to the
    live environment measured as ``good`` was (``python``/``via`` say where). The files,
    caches and repos the snapshot names are read only under the working directory, its git
    work tree, the target's compile cache folders and ``allow``. ``root``: where the
    checkout holding the snapshot's tracked files lies now (default: where it was, else
    the work tree around the working directory)."""
    allowed = tuple(str(a) for a in allow)
    where = None if root is None else _root(root, remote=via is not None)
    # Nothing heavy (pydantic) is imported before the probe starts: it works meanwhile.
    from envguard.snapshots import store

    if against is not None or (good is not None and not isinstance(good, (str, Path))):
        from envguard.compare.engine import diff as compute

        rules = policy if policy is not None else load_policy()
        if against is not None:
            return compute(_load(good if good is not None else newest()), _load(against), rules)
        from envguard.snapshots.capture import capture_snapshot
        from envguard.snapshots.live import Recorded, live_request

        assert good is not None  # a Snapshot: measure the live side as it was measured
        snap = _load(good)
        live = capture_snapshot(
            live_request(Recorded.of(snap), python=python, via=via, allow=allowed, root=where)
        )
        return compute(snap, live, rules)
    from envguard.snapshots.live import measure_like

    path = store.resolve(str(good)) if good is not None else newest()
    expected, live = measure_like(
        store.read(path), source=str(path), python=python, via=via, allow=allowed, root=where
    )
    from envguard.compare.engine import diff as compute

    return compute(expected, live, policy if policy is not None else load_policy())


def _root(root: str | Path, *, remote: bool) -> str:
    """--root as an absolute path (on the far side: as given, which must be absolute)."""
    from envguard.errors import UsageError

    text = os.path.expanduser(str(root))
    if remote:
        if not os.path.isabs(text):
            raise UsageError(f"--root {root}: with --via it must be an absolute path")
        return text
    if not os.path.isdir(text):
        raise UsageError(f"--root {root}: no such directory")
    return os.path.abspath(text)


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
) -> Drift:
    """The CI gate. With ``lock`` (uv.lock, pylock.toml, requirements.txt, ``-`` for stdin):
    the snapshot ``good`` (default: the newest) against it, or with ``python``/``via`` and
    no ``good`` the live environment against it, with no snapshot at all. Without ``lock``:
    the snapshot against another snapshot or the live environment, as diff() does."""
    if lock is None:
        return diff(good, against, python=python, via=via, policy=policy, allow=allow, root=root)
    from envguard.compare.lockfiles import OutsideLock, lock_drift, read_lock

    rules = policy if policy is not None else load_policy()
    if good is None and (python is not None or via is not None):
        subject_snap = snapshot(python=python, via=via)
        where = f" at {python}" if python else f" behind --via {via}"
        subject = f"the environment{where}"
    else:
        subject_snap = _load(good if good is not None else newest())
        subject = f"snapshot {subject_snap.name}"
    label = "<stdin>" if str(lock) == "-" else str(lock)
    try:
        read = read_lock(lock, subject_snap, selection=selection)
    except OutsideLock as exc:
        return _outside(exc.message, subject_snap, subject=subject, lock=label, policy=rules)
    return lock_drift(
        subject_snap, read.pins, policy=rules, lock=label, subject=subject, notes=read.notes
    )


def find_lock(start: str | Path | None = None) -> Path:
    """The project's lockfile: beside the nearest pyproject.toml at or above ``start`` (the
    cwd), the first of uv.lock, pylock.toml, pylock.*.toml, requirements.txt."""
    from envguard.errors import UsageError

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
) -> Drift:
    """What changing lockfile ``old`` to ``new`` does to the installed set (either may be
    ``-``, stdin), both evaluated for one interpreter: the snapshot ``good``'s, the one at
    ``python`` (or behind ``via``), else this machine's (a lock may require another
    Python than envguard's own)."""
    from envguard.compare.lockfiles import locks_drift, read_lock
    from envguard.errors import UsageError

    if str(old) == "-" and str(new) == "-":
        raise UsageError("--lock -: only one of the two lockfiles can come from stdin")
    labels = tuple("<stdin>" if str(p) == "-" else str(p) for p in (old, new))
    subject = (
        load(good)
        if good is not None
        else snapshot(python=python, via=via)
        if python is not None or via is not None
        else None
    )
    before = read_lock(old, subject, selection=selection)
    after = read_lock(new, subject, selection=selection)
    drift = locks_drift(
        before.pins,
        after.pins,
        policy=policy if policy is not None else load_policy(),
        labels=(labels[0], labels[1]),
    )
    return drift.model_copy(update={"notes": before.notes + after.notes})


def sources(
    *,
    index_url: str | None = None,
    extra_index_urls: Sequence[str] = (),
    find_links: Sequence[str] = (),
    offline: bool = False,
    no_index: bool = False,
    torch_index: str | None = None,
) -> Sources:
    """uv's package sources for rebuild and export (local --find-links made absolute)."""
    from envguard.recovery.sources import Sources

    for link in find_links:
        if "://" not in link and not Path(link).expanduser().is_dir():
            from envguard.errors import UsageError

            raise UsageError(f"--find-links {link}: no such directory")
    return Sources(
        index_url=index_url,
        extra_index_urls=tuple(extra_index_urls),
        find_links=tuple(str(Path(f).absolute()) if "://" not in f else f for f in find_links),
        offline=offline,
        no_index=no_index,
        torch_index=torch_index,
    )


def _with_wheelhouse(sources: Sources) -> Sources:
    """``sources`` with the wheel file names of its local --find-links folders."""
    from dataclasses import replace

    names: list[str] = []
    for link in sources.find_links:
        folder = Path(link[7:] if link.startswith("file://") else link).expanduser()
        if "://" in link and not link.startswith("file://"):
            continue  # a remote page: uv reads it, envguard does not
        try:
            with os.scandir(folder) as scan:
                names += [e.name for e in scan if e.name.endswith(".whl")]
        except OSError:
            continue
    return replace(sources, wheelhouse=tuple(sorted(names)))


def _planned(
    good: str | Path | None,
    *,
    venv: str | Path,
    in_place: bool,
    sources: Sources | None,
    skip_editables: bool,
    base_python: str | None,
) -> tuple[Snapshot, Plan]:
    from envguard.errors import UsageError
    from envguard.recovery.execute import build_paths
    from envguard.recovery.plan import PlanOptions, Sources, plan
    from envguard.snapshots import store
    from envguard.tools import find_modern_uv

    path = store.resolve(str(good)) if good is not None else newest()
    snap = store.load(path)
    target = Path(venv).expanduser().absolute()
    if in_place and not target.is_dir():
        raise UsageError(f"--venv {venv}: no such venv to sync in place")
    build, workdir = build_paths(target)
    options = PlanOptions(
        venv=target,
        snapshot_ref=str(path),
        sources=_with_wheelhouse(sources or Sources()),
        uv=find_modern_uv(),
        envguard=(sys.executable, "-m", "envguard"),
        in_place=in_place,
        build=None if in_place else build,
        workdir=workdir,
        skip_editables=skip_editables,
        base_python=base_python,
    )
    return snap, plan(snap, options)


def plan_rebuild(
    good: str | Path | None = None,
    *,
    venv: str | Path = ".venv",
    in_place: bool = False,
    sources: Sources | None = None,
    skip_editables: bool = False,
    base_python: str | None = None,
) -> Plan:
    """The steps that recreate ``good``'s packages in ``venv`` (nothing is changed)."""
    return _planned(
        good,
        venv=venv,
        in_place=in_place,
        sources=sources,
        skip_editables=skip_editables,
        base_python=base_python,
    )[1]


def rebuild(
    good: str | Path | None = None,
    *,
    venv: str | Path = ".venv",
    in_place: bool = False,
    sources: Sources | None = None,
    skip_editables: bool = False,
    base_python: str | None = None,
    no_backup: bool = False,
    keep_backups: int = 1,
    status: Callable[[str], None] = lambda _: None,
    on_line: Callable[[str], None] | None = None,
) -> Outcome:
    """Recreate ``good``'s packages in ``venv``: build beside it, verify, swap atomically.
    The working venv is untouched unless every step succeeded. At most ``keep_backups``
    old venvs are kept (the newest); the build is refused when the disk lacks the room."""
    from envguard.recovery.execute import check_target, execute, not_restored, remove_stale

    snap, the_plan = _planned(
        good,
        venv=venv,
        in_place=in_place,
        sources=sources,
        skip_editables=skip_editables,
        base_python=base_python,
    )
    target = Path(the_plan.venv)
    check_target(target, label=f"--venv {venv}")
    cleaned = remove_stale(target)
    skipped = frozenset(s.split(" ", 1)[0] for s in the_plan.skipped)
    outcome = execute(
        the_plan,
        snap,
        no_backup=no_backup,
        keep_backups=keep_backups,
        ignore=skipped,
        status=status,
        on_line=on_line,
    )
    outcome.notes[:0] = cleaned
    if outcome.live is not None:
        outcome.not_restored = not_restored(snap, outcome.live)
    return outcome


def restore(
    good: str | Path | None = None,
    *,
    venv: str | Path | None = None,
    execute: bool = False,
    python: str | None = None,
    via: str | None = None,
    root: str | Path | None = None,
    repos: bool = False,
    store: str | Path | None = None,
    env_file: str | None = None,
    sources: Sources | None = None,
    skip_editables: bool = False,
    base_python: str | None = None,
    no_backup: bool = False,
    keep_backups: int = 1,
    allow: Sequence[str | Path] = (),
    timeout: float | None = 120.0,
    remote_uv: str | None = None,
    status: Callable[[str], None] = lambda _: None,
    on_line: Callable[[str], None] | None = None,
) -> RestoreReport:
    """Bring back everything ``good`` knows, in order: packages (a verified rebuild of
    ``venv``), with ``repos`` the repos' recorded commits, tracked files (from the store or
    git), compile caches (on the exact stack only) and a variables file to source. Without
    ``execute`` only the plan; on this host, or through ``via`` on the far side. An item
    that fails is left as it was; the report says what happened to each."""
    from envguard.snapshots import store as snapshots
    from envguard.snapshots.live import measure_like

    path = _snapshot_path(good)
    text = snapshots.read(path)
    target = _target(via, python=python, timeout=timeout)
    where = None if root is None else _root(root, remote=via is not None)
    venv_path = _restore_venv(venv, remote=via is not None)
    python_now = str(venv_path / "bin" / "python")
    if via:
        has_venv = bool(target.call("room", path=python_now).get("exists"))
    else:
        has_venv = (venv_path / "bin" / "python").exists()
    if not has_venv:  # no venv yet: files, caches, repos and variables are still measured
        python_now = (python or "python3") if via else sys.executable

    # The live side is measured while the models load (as diff does), from the raw JSON;
    # the file is validated in full meanwhile, and an invalid one stops the probe.
    snap, live = measure_like(
        text,
        source=str(path),
        python=python_now,  # the user's (--venv, --python): never the snapshot's own
        via=via,
        allow=tuple(str(a) for a in allow) + ((where,) if where else ()),
        root=where,
    )
    from envguard.recovery.outcome import RestoreReport as Report
    from envguard.recovery.restore import (
        Context,
        env_file_name,
        restore_caches,
        restore_files,
        restore_repos,
        write_env_file,
    )
    from envguard.snapshots.blobs import Blobs, store_for

    allowed = [str(a) for a in allow] + ([where] if where is not None else [])
    ctx = Context(
        snap=snap,
        live=live,
        target=target,
        blobs=Blobs(store if store is not None else store_for(path)),
        execute=execute,
        status=status,
        # Local paths are absolute here; the far side resolves its own against its cwd.
        confine={
            "cwd": None if via else os.getcwd(),
            "allow": allowed if via else [os.path.abspath(a) for a in allowed],
        },
        keep_out=[str(path.absolute().parent), os.path.abspath(env_file or env_file_name(snap))],
    )
    items: list[Item] = []
    notes: list[str] = []
    stack = live
    package_item, verified = _restore_packages(
        snap,
        live,
        path=path,
        venv=venv_path,
        has_venv=has_venv,
        execute=execute,
        via=via,
        target=target,
        sources=sources,
        skip_editables=skip_editables,
        base_python=base_python,
        no_backup=no_backup,
        keep_backups=keep_backups,
        remote_uv=remote_uv,
        notes=notes,
        status=status,
        on_line=on_line,
    )
    items.append(package_item)
    if verified is not None:
        stack = verified
    if repos:
        items += restore_repos(ctx, root=where)
    items += restore_files(ctx)
    items += restore_caches(ctx, stack, rebuild_pending=package_item.status == "planned")
    env_path = env_file or env_file_name(snap)
    if snap.env:
        items.append(write_env_file(ctx, env_path if via else str(Path(env_path).absolute())))
    return Report(
        snapshot=snap.name,
        target=target.label,
        executed=execute,
        items=tuple(items),
        env_file=env_path if snap.env else None,
        notes=tuple(notes),
    )


def restore_hosts(
    good: str | Path | None,
    *,
    hosts: str | Sequence[str],
    via: str,
    jobs: int = 16,
    **options: Any,
) -> list[tuple[str, RestoreReport | str]]:
    """restore() on every host (``{host}`` in ``via``), at most ``jobs`` at once: each
    host's report, or the one-line error that stopped it there. ``options`` are restore()'s
    (``venv`` is a path on every host)."""
    import shlex
    from concurrent.futures import ThreadPoolExecutor

    from envguard.errors import EnvguardError, UsageError
    from envguard.lifecycle import kill_running
    from envguard.snapshots.hosts import host_names, prefix_for
    from envguard.tools import split_command

    host_list = host_names(hosts)
    tokens = split_command(via, option="--via")
    if not any("{host}" in t for t in tokens):
        raise UsageError("--hosts needs {host} in --via, e.g. --via 'ssh {host}'")
    if jobs < 1:
        raise UsageError(f"--jobs {jobs}: must be at least 1")
    path = str(_snapshot_path(good))  # one snapshot for all: resolved once, here

    def one(host: str) -> tuple[str, RestoreReport | str]:
        try:
            return host, restore(path, via=shlex.join(prefix_for(tokens, host)), **options)
        except EnvguardError as exc:
            return host, exc.message

    pool = ThreadPoolExecutor(max_workers=min(jobs, len(host_list)))
    try:
        return list(pool.map(one, host_list))
    except BaseException:  # Ctrl-C: start nothing more, stop what runs
        pool.shutdown(wait=False, cancel_futures=True)
        kill_running()
        raise
    finally:
        pool.shutdown(wait=True)


def _snapshot_path(good: str | Path | None) -> Path:
    from envguard.snapshots import store

    return store.resolve(str(good)) if good is not None else newest()


def _restore_venv(venv: str | Path | None, *, remote: bool) -> Path:
    from envguard.errors import UsageError

    if venv is None:
        if not remote:
            return Path(".venv").absolute()
        # Not the snapshot's prefix: a snapshot is untrusted, and this venv is replaced.
        raise UsageError("--venv: say which venv to restore on the far side (an absolute path)")
    import re

    if remote and not (os.path.isabs(str(venv)) and re.match(r"^[A-Za-z0-9_./+-]+$", str(venv))):
        raise UsageError(
            f"--venv {venv}: with --via it must be an absolute plain path (letters, digits,"
            " . _ + - /): its python runs through the prefix unquoted"
        )
    return Path(venv) if remote else Path(venv).expanduser().absolute()


def _restore_packages(
    snap: Snapshot,
    live: Snapshot,
    *,
    path: Path,
    venv: Path,
    has_venv: bool,
    execute: bool,
    via: str | None,
    target: Target,
    sources: Sources | None,
    skip_editables: bool,
    base_python: str | None,
    no_backup: bool,
    keep_backups: int,
    remote_uv: str | None,
    notes: list[str],
    status: Callable[[str], None],
    on_line: Callable[[str], None] | None,
) -> tuple[Item, Snapshot | None]:
    """The packages item, and the venv as verified after a rebuild (None without one)."""
    from envguard.compare.engine import diff as compute
    from envguard.compare.policy import Policy, only_sections
    from envguard.compare.severity import Severity
    from envguard.errors import EnvguardError
    from envguard.recovery.outcome import Item

    differ = [
        c
        for c in compute(snap, live, only_sections(Policy(), ("packages", "interpreter"))).changes
        if c.severity.rank > Severity.info.rank
    ]
    if not differ and has_venv:
        return Item(
            kind="packages",
            name=str(venv),
            status="already",
            detail=f"{len(snap.packages)} packages and the interpreter match",
            verified="fingerprints of every package",
        ), None
    why = f"{len(differ)} differences" if has_venv else "no venv there yet"
    if not execute:
        return Item(
            kind="packages",
            name=str(venv),
            status="planned",
            detail=f"rebuild ({why}): build beside, verify, swap ('envguard rebuild' shows"
            " the steps)",
        ), None
    try:
        if via is not None:
            from envguard.recovery.remote import remote_rebuild

            outcome = remote_rebuild(
                snap,
                target,  # type: ignore[arg-type]
                venv=venv,
                sources=sources,
                skip_editables=skip_editables,
                base_python=base_python,
                no_backup=no_backup,
                keep_backups=keep_backups,
                remote_uv=remote_uv,
                status=status,
            )
        else:
            outcome = rebuild(
                path,
                venv=venv,
                sources=sources,
                skip_editables=skip_editables,
                base_python=base_python,
                no_backup=no_backup,
                keep_backups=keep_backups,
                status=status,
                on_line=on_line,
            )
    except EnvguardError as exc:
        detail = exc.message + (f" ({exc.hint})" if exc.hint else "")
        return Item(kind="packages", name=str(venv), status="failed", detail=detail), None
    notes += outcome.notes
    kept = None
    if outcome.backup is not None:
        from envguard.units import human_size

        size = f", {human_size(outcome.backup_bytes)}" if outcome.backup_bytes else ""
        kept = f"{outcome.backup}{size}"
    return Item(
        kind="packages",
        name=str(venv),
        status="restored",
        detail=f"rebuilt ({why}): {outcome.packages} packages",
        verified="packages and interpreter re-measured: fingerprints match",
        kept=kept,
    ), outcome.live


def bisect(
    good: str | Path,
    *,
    run: str,
    bad: str | Path | None = None,
    python: str | None = None,
    shell: bool = False,
    metric: str | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    timeout: float = 600.0,
    max_steps: int = 30,
    keep: bool = False,
    resume: bool = False,
    repo: str | Path | None = None,
    sources: Sources | None = None,
    on_step: Callable[[Step], None] = lambda _: None,
    on_units: Callable[[list[Unit]], None] = lambda _: None,
) -> BisectReport:
    """Which changes from ``good`` to ``bad`` (a snapshot, or the live environment at
    ``python``) turn the command ``run`` from good to bad: each candidate built with uv in
    a scratch venv (never the user's), judged by ``run``'s exit status or ``metric``
    (``minimum``/``maximum``). Or: the good environment is bad too, so it is not the cause."""
    import shutil
    import tempfile

    from envguard.recovery.bisect import Session, candidate, check_from, log_path, units
    from envguard.recovery.bisect import bisect as search
    from envguard.recovery.execute import run_step
    from envguard.recovery.plan import PlanOptions, RunStep, plan, python_request
    from envguard.recovery.sources import Sources as Plain
    from envguard.tools import find_modern_uv, user_environ

    check = check_from(
        run, shell=shell, timeout=timeout, metric=metric, minimum=minimum, maximum=maximum
    )
    from envguard.snapshots import store as snapshots
    from envguard.snapshots.blobs import Blobs, store_for

    good_path = snapshots.resolve(str(good))
    good_snap = snapshots.load(good_path)
    blobs = Blobs(store_for(good_path))
    if bad is not None and python is not None:
        from envguard.errors import UsageError

        raise UsageError("--bad and --python: give one (a bad snapshot, or the live side)")
    if bad is not None:
        bad_snap = load(bad)
    else:  # the live side, measured as the good one was (its files, repos, caches too)
        from envguard.snapshots.capture import capture_snapshot
        from envguard.snapshots.live import Recorded, live_request

        bad_snap = capture_snapshot(live_request(Recorded.of(good_snap), python=python, via=None))
    uv = find_modern_uv()
    where = _with_wheelhouse(sources or Plain())
    root = Path(tempfile.mkdtemp(prefix="envguard-bisect-"))
    venv = root / "venv"

    def options(snap: Snapshot) -> PlanOptions:
        return PlanOptions(
            venv=venv,
            snapshot_ref=snap.name,
            sources=where,
            uv=uv,
            in_place=True,
            workdir=root / "plan",
            skip_editables=True,
            check_paths=False,
        )

    def build(snap: Snapshot, into: Path) -> None:
        the_plan = plan(snap, options(snap))
        (root / "plan").mkdir(exist_ok=True)
        for f in the_plan.files:
            Path(f.path).write_text(f.content, encoding="utf-8")
        for step in the_plan.steps:
            if isinstance(step, RunStep):
                run_step(step)

    def warm(kind: str, into: Path) -> None:
        """The good run's kept ``kind`` cache, unpacked from the store into ``into``."""
        from envguard.errors import ActionError
        from envguard.probe.payload import local_package

        kept = next(c.archive for c in good_snap.caches if c.kind == kind and c.archive)
        answer = local_package().apply.extract(
            {
                "staged": str(blobs.path(kept.sha256)),
                "dest": str(into),
                "sha256": kept.sha256,
                "files": kept.files,
                "bytes": kept.bytes,
                "stamp": "bisect",
            }
        )
        if not answer.get("ok"):
            raise ActionError(f"the good run's {kind} cache: {answer.get('error')}")

    try:
        # Both endpoints planned before anything is built: a snapshot whose pins cannot be
        # installed (a local path, a bad URL) is refused now, not after the first run.
        plan(good_snap, options(good_snap))
        drift = units(good_snap, bad_snap)
        plan(candidate(good_snap, bad_snap, drift), options(bad_snap))
        on_units(drift)
        request = python_request(good_snap, options(good_snap))
        run_step(
            RunStep(
                kind="venv",
                purpose=f"create the scratch venv with Python {request}",
                argv=(uv, "venv", "--quiet", "--python", request, str(venv)),
            )
        )
        session = Session(
            good_snap,
            bad_snap,
            check,
            scratch=venv,
            build=build,
            env=user_environ(),
            cwd=Path.cwd(),
            log=log_path(good_snap, bad_snap, check),
            resume=resume,
            on_step=on_step,
            warm=warm,
        )
        report = search(session, max_steps=max_steps, repo=Path(repo).absolute() if repo else None)
        report.scratch = str(venv) if keep else None
        return report
    finally:
        if not keep:  # --keep: the scratch venv stays (its path is in the report)
            shutil.rmtree(root, ignore_errors=True)


def export(
    good: str | Path,
    *,
    format: Literal["requirements", "pylock"] = "requirements",
    sources: Sources | None = None,
    skip_editables: bool = False,
    output: str | Path | None = None,
    force: bool = False,
) -> str:
    """``good`` as a pinned requirements.txt or a PEP 751 pylock.toml (uv resolves the
    latter's hashes and indexes); written atomically to ``output`` when given."""
    from envguard.recovery.export import pylock_text, requirements_export
    from envguard.recovery.plan import Sources
    from envguard.snapshots import store

    snap = load(good)
    if output is not None:
        store.check_target(Path(output), force=force)
    if format == "requirements":
        text = requirements_export(snap, sources or Sources(), skip_editables=skip_editables)
    else:
        from envguard.tools import find_modern_uv

        text = pylock_text(
            snap, sources or Sources(), uv=find_modern_uv(), skip_editables=skip_editables
        )
    if output is not None:
        store.write_atomic(Path(output), text, force=force)
    return text


def fleet(refs: Sequence[str | Path], *, baseline: str | Path | None = None) -> FleetReport:
    """Compare many hosts' snapshots (files, names or folders of them): group identical
    environments and name the odd ones out (against ``baseline`` when given)."""
    from envguard.compare.fleet import compare_files
    from envguard.snapshots import store

    paths = store.expand([str(r) for r in refs])
    return compare_files(paths, baseline=load(baseline) if baseline is not None else None)


def run_then(
    argv: Sequence[str], venv: str | Path, *, env: Mapping[str, str] | None = None
) -> None:
    """Run a command with ``venv`` active (after a rebuild) and ``env`` set; ActionError
    when it fails."""
    from envguard.recovery.execute import run_then as run

    run(tuple(argv), Path(venv), env=env or {})


def restore_env(good: str | Path | None = None) -> dict[str, str]:
    """The variables a restore sets for --then: the snapshot's, less secrets and loaders."""
    from envguard.recovery.restore import run_env

    return run_env(_load(good if good is not None else newest()))
