"""Many hosts at once: snapshot_hosts() captures each through a prefix with ``{host}`` in
it, restore_hosts() restores each, fleet() compares their snapshots."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from envguard.api._shared import settings, snapshot_path
from envguard.api.capture import load
from envguard.api.restoration import RestoreOptions, restore
from envguard.errors import EnvguardError, UsageError
from envguard.lifecycle import kill_running
from envguard.owned import own_folder
from envguard.snapshots import signing, store
from envguard.snapshots.hosts import capture_hosts, host_names, prefix_for
from envguard.snapshots.measure import Measure, capture_request
from envguard.tools import split_command

if TYPE_CHECKING:
    from envguard.compare.models import FleetReport
    from envguard.recovery.outcome import RestoreReport
    from envguard.snapshots.hosts import HostResult
    from envguard.snapshots.models import MetricValue


def snapshot_hosts(
    hosts: str | Sequence[str],
    *,
    via: str | Sequence[str] | None = None,
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
    measure: Measure | None = None,
) -> list[HostResult]:
    """Capture many hosts through ``via`` (with ``{host}`` in it), writing each one's
    snapshot to ``folder/HOST.json`` (or to ``folder`` with ``{host}`` filled in, when it
    has one) as it arrives; failed hosts are results too."""
    host_list = host_names(hosts)
    request = capture_request(
        settings(measure, python=python, via=via, timeout=timeout),
        name=name,
        repos=repos,
        files=files,
        caches=caches,
        metrics=metrics,
        note=note,
        command=command,
        hosts=True,
    )
    if not request.via:
        raise UsageError("--hosts needs {host} in --via, e.g. --via 'ssh {host}'")
    target = Path(folder) if folder else store.default_path(request.name).with_suffix("")
    if not folder:  # snapshots/ and snapshots/NAME/: envguard's own, never followed
        store.default_folder()
        own_folder(target, create=True)

    def path_for(host: str) -> Path:  # host names hold no "/": checked above
        if "{host}" in str(target):  # --out 'snaps/{host}.json', as the help says
            return Path(str(target).replace("{host}", host))
        return target / f"{host}.json"

    for host in host_list:
        store.check_target(path_for(host), force=force)

    def done(result: HostResult) -> None:
        if result.snapshot is not None:
            path = path_for(result.host)
            store.write_atomic(path, store.dumps(signing.signed(result.snapshot)), force=force)
            result.path = path
        if on_done is not None:
            on_done(result)

    return capture_hosts(request, host_list, jobs=jobs, on_done=done)


def restore_hosts(
    good: str | Path | None,
    options: RestoreOptions,
    *,
    hosts: str | Sequence[str],
    jobs: int = 16,
) -> list[tuple[str, RestoreReport | str]]:
    """restore() on every host (``{host}`` in ``options.via``), at most ``jobs`` at once:
    each host's report, or the one-line error that stopped it there (``options.venv`` is a
    path on every host)."""
    import shlex
    from concurrent.futures import ThreadPoolExecutor

    host_list = host_names(hosts)
    tokens = split_command(options.via, option="--via") if options.via else ()
    if not any("{host}" in t for t in tokens):
        raise UsageError("--hosts needs {host} in --via, e.g. --via 'ssh {host}'")
    if jobs < 1:
        raise UsageError(f"--jobs {jobs}: must be at least 1")
    path = str(snapshot_path(good))  # one snapshot for all: resolved once, here

    def one(host: str) -> tuple[str, RestoreReport | str]:
        try:
            return host, restore(path, replace(options, via=shlex.join(prefix_for(tokens, host))))
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


def probe_payload(*, files: Sequence[str] = (), caches: Sequence[str] = ()) -> str:
    """The probe as one self-contained Python script, for an engine's own fan-out to run on
    every node with nothing installed there (``srun python3 -I -S p.py``): each node prints
    one JSON line, its name and its report, which fleet() reads. ``files`` and ``caches``:
    paths on the nodes to hash and to measure, as `snapshot --file/--cache` takes them."""
    from envguard.probe.payload import standalone_payload
    from envguard.snapshots.request import USER_CACHE

    return standalone_payload(
        {
            "files": list(files),
            "caches": [{"kind": USER_CACHE, "path": path} for path in caches],
            "default_caches": True,
            "git": False,
            "repos": [],
        }
    )


def fleet(
    refs: Sequence[str | Path],
    *,
    baseline: str | Path | None = None,
    hosts: str | Sequence[str] | None = None,
) -> FleetReport:
    """Compare many hosts' snapshots or probe reports (files, names, folders of them, or an
    engine's stream: clush, pdsh, srun --label, ``-`` for stdin): group identical
    environments and name the odd ones out (against ``baseline`` when given). A host that
    sent nothing usable (and each of ``hosts`` that sent nothing) is a failed row."""
    from envguard.compare.fleet import compare_nodes
    from envguard.snapshots.fanout import gather

    expected = host_names(hosts) if hosts is not None else []
    return compare_nodes(
        gather([str(r) for r in refs]),
        baseline=load(baseline) if baseline is not None else None,
        expected=expected,
    )
