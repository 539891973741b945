"""Finding the change that breaks a run: bisect() with its BisectOptions, each candidate
environment built with uv in a scratch venv and judged by the user's command."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envguard.api._shared import with_wheelhouse
from envguard.api.capture import load
from envguard.errors import ActionError, UsageError
from envguard.probe.payload import local_package
from envguard.recovery.scratch import scratch_folder
from envguard.recovery.sources import Sources
from envguard.snapshots import store as snapshots
from envguard.snapshots.blobs import Blobs, store_for
from envguard.snapshots.capture import capture_snapshot
from envguard.snapshots.live import Recorded, live_request
from envguard.snapshots.measure import Measure
from envguard.tools import find_modern_uv, user_environ

if TYPE_CHECKING:
    from envguard.recovery.bisect import BisectReport, Step, Unit
    from envguard.recovery.plan import PlanOptions
    from envguard.snapshots.models import Snapshot


@dataclass(frozen=True, kw_only=True)
class BisectOptions:
    """What bisect() runs, against what, and how far it goes."""

    run: str  # the check: good when it exits 0 (or by metric)
    bad: str | Path | None = None  # the bad snapshot (default: the live environment)
    python: str | None = None  # without bad: the live interpreter or venv
    shell: bool = False  # run through sh -c
    metric: str | None = None  # judge by NAME=value (or JSON) the command prints
    minimum: float | None = None  # good when the metric >= this
    maximum: float | None = None  # good when the metric <= this
    timeout: float = 600.0  # seconds per run (then: skip)
    max_steps: int = 30  # at most this many builds
    keep: bool = False  # keep the scratch venv (its path is in the report)
    resume: bool = False  # reuse the results logged by an earlier run
    repo: str | Path | None = None  # the code axis: the environment at its commit, commits since
    sources: Sources | None = None  # uv's package sources (sources())


def bisect(
    good: str | Path,
    options: BisectOptions,
    *,
    on_step: Callable[[Step], None] = lambda _: None,
    on_units: Callable[[list[Unit]], None] = lambda _: None,
) -> BisectReport:
    """Which changes from ``good`` to ``bad`` (a snapshot, or the live environment at
    ``python``) turn the command ``run`` from good to bad: each candidate built with uv in
    a scratch venv (never the user's), judged by ``run``'s exit status or ``metric``
    (``minimum``/``maximum``). When the good environment runs bad with today's code, with
    ``repo`` the environment and the commits are tested apart and each cause is named."""
    import shutil

    from envguard.recovery.bisect import (
        Session,
        candidate,
        check_from,
        log_folder,
        log_path,
        units,
    )
    from envguard.recovery.bisect import bisect as search
    from envguard.recovery.execute import run_step
    from envguard.recovery.plan import PlanOptions, RunStep, plan, python_request

    check = check_from(
        options.run,
        shell=options.shell,
        timeout=options.timeout,
        metric=options.metric,
        minimum=options.minimum,
        maximum=options.maximum,
    )

    good_path = snapshots.resolve(str(good))
    good_snap = snapshots.load(good_path)
    blobs = Blobs(store_for(good_path))
    if options.bad is not None and options.python is not None:
        raise UsageError("--bad and --python: give one (a bad snapshot, or the live side)")
    if options.bad is not None:
        bad_snap = load(options.bad)
    else:  # the live side, measured as the good one was (its files, repos, caches too)
        bad_snap = capture_snapshot(
            live_request(
                Recorded.of(good_snap), Measure(python=options.python), source=str(good_path)
            )
        )
    uv = find_modern_uv()
    where = with_wheelhouse(options.sources or Sources())
    root = scratch_folder("bisect")
    venv = root / "venv"

    def plan_options(snap: Snapshot) -> PlanOptions:
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
        the_plan = plan(snap, plan_options(snap))
        (root / "plan").mkdir(exist_ok=True)
        for f in the_plan.files:
            Path(f.path).write_text(f.content, encoding="utf-8")
        for step in the_plan.steps:
            if isinstance(step, RunStep):
                run_step(step)

    def warm(kind: str, into: Path) -> None:
        """The good run's kept ``kind`` cache, unpacked from the store into ``into``."""

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
        plan(good_snap, plan_options(good_snap))
        drift = units(good_snap, bad_snap)
        plan(candidate(good_snap, bad_snap, drift), plan_options(bad_snap))
        log = log_path(good_snap, bad_snap, check)
        with log_folder(log.parent):  # a planted link is refused before anything is built
            pass
        on_units(drift)
        request = python_request(good_snap, plan_options(good_snap))
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
            log=log,
            resume=options.resume,
            on_step=on_step,
            warm=warm,
        )
        report = search(
            session,
            max_steps=options.max_steps,
            repo=Path(options.repo).absolute() if options.repo else None,
        )
        report.scratch = str(venv) if options.keep else None
        return report
    finally:
        if not options.keep:  # --keep: the scratch venv stays (its path is in the report)
            shutil.rmtree(root, ignore_errors=True)
