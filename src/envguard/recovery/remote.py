"""A rebuild on the far side of --via: the same plan as a local rebuild, its files and
steps sent through the prefix (recovery/target.py), verified by the probe run there on the
build, swapped there. Nothing but Python and uv is needed on the target."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envguard.errors import ActionError

if TYPE_CHECKING:
    from envguard.probe.channel import RemoteTarget
    from envguard.recovery.outcome import Outcome
    from envguard.recovery.plan import Sources
    from envguard.snapshots.models import Snapshot


def find_remote_uv(target: RemoteTarget, given: str | None) -> list[str]:
    """How uv runs there: --remote-uv, uv on its PATH, or python -m uv."""
    found = target.call("find_uv", given=given)
    if not found.get("uv"):
        where = f"--remote-uv {given} does not run there" if given else "no uv there"
        raise ActionError(
            f"{target.label}: {where}",
            hint="install uv on the target (its PATH, or python -m pip install uv), or pass"
            " --remote-uv PATH",
        )
    return [str(a) for a in found["uv"]]


def remote_rebuild(
    snap: Snapshot,
    target: RemoteTarget,
    *,
    venv: Path,
    sources: Sources | None,
    skip_editables: bool,
    base_python: str | None,
    no_backup: bool,
    keep_backups: int,
    remote_uv: str | None,
    status: Callable[[str], None],
) -> Outcome:
    """Rebuild ``snap``'s packages at ``venv`` on the target: build beside, verify, swap."""
    from envguard.compare.engine import diff as compute
    from envguard.compare.policy import Policy, only_sections
    from envguard.compare.severity import Severity
    from envguard.recovery.execute import cache_hint, step_failure
    from envguard.recovery.outcome import Outcome
    from envguard.recovery.plan import PlanOptions, RunStep, Sources, SwapStep, VerifyStep, plan
    from envguard.snapshots.capture import capture_snapshot
    from envguard.snapshots.live import Recorded, request_like

    uv = find_remote_uv(target, remote_uv)
    space = _check(target.call("room", path=str(venv.parent), measure=str(venv)))
    if space.get("bytes") and space["bytes"] > 0 and space["free"] < space["bytes"]:
        from envguard.units import human_size

        raise ActionError(
            f"{venv.parent} ({target.label}): {human_size(space['free'])} free, the new venv"
            f" needs about {human_size(space['bytes'])}",
            hint="free some room there (old envguard backups: --keep-backups 0)",
        )
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
    hidden = venv.name if venv.name.startswith(".") else f".{venv.name}"
    build = venv.parent / f"{hidden}.envguard-build-{stamp}"
    workdir = venv.parent / f"{hidden}.envguard-plan-{stamp}"
    given = sources or Sources()
    wheels = _check(target.call("list_wheels", folders=list(given.find_links)))["wheels"]
    options = PlanOptions(
        venv=venv,
        snapshot_ref=snap.name,
        sources=replace(given, wheelhouse=tuple(str(w) for w in wheels)),
        uv="uv",
        build=build,
        workdir=workdir,
        skip_editables=skip_editables,
        base_python=base_python,
        check_paths=False,  # editable paths are the far side's
    )
    the_plan = plan(snap, options)
    outcome = Outcome(venv=venv, snapshot=snap.name, packages=the_plan.packages)
    swapped = False
    try:
        _check(target.call("begin_build", build=str(build), plan=str(workdir)))
        for f in the_plan.files:
            data = f.content.encode()
            staged = target.send_bytes(data, f.path)
            sha = hashlib.sha256(data).hexdigest()
            _check(target.call("install_file", staged=staged, dest=f.path, sha256=sha, stamp=stamp))
        total = len(the_plan.steps)
        for i, step in enumerate(the_plan.steps, 1):
            status(f"[{i}/{total}] {step.purpose} ({target.label})")
            if isinstance(step, RunStep):
                argv = [*uv, *step.argv[1:]] if step.argv[0] == "uv" else list(step.argv)
                ran = _check(target.call("run", argv=argv, unset=list(step.unset_env)))
                if ran.get("code") != 0:
                    tail = [str(line) for line in ran.get("tail") or []]
                    raise step_failure(step, int(ran["code"]), tail, where=" there")
            elif isinstance(step, VerifyStep):
                request = request_like(Recorded.of(snap), python=step.python, via=target.prefix)
                outcome.live = capture_snapshot(request)
                drift = compute(
                    snap,
                    outcome.live,
                    only_sections(Policy(), ("packages", "interpreter", "installed")),
                )
                outcome.verified = drift
                bad = [c for c in drift.changes if c.severity.rank > Severity.info.rank]
                if bad:
                    raise ActionError(
                        f"step '{step.purpose}' failed: {len(bad)} differences,"
                        f" first: {bad[0].message}",
                        hint=cache_hint(bad, there=f" on {target.label}"),
                    )
            elif isinstance(step, SwapStep):
                done = _check(
                    target.call(
                        "swap",
                        build=step.build,
                        venv=step.venv,
                        stamp=stamp,
                        no_backup=no_backup or keep_backups < 1,
                        keep=keep_backups,
                    )
                )
                swapped = True
                outcome.backup = Path(done["backup"]) if done.get("backup") else None
                size = done.get("backup_bytes")
                outcome.backup_bytes = size if isinstance(size, int) and size >= 0 else None
                outcome.notes += [f"removed an older backup ({p})" for p in done["removed"]]
    except ActionError as exc:
        exc.hint = f"{venv} was not touched" + (f"; {exc.hint}" if exc.hint else "")
        raise
    finally:
        target.call("discard", paths=[str(workdir)] + ([] if swapped else [str(build)]))
    return outcome


def _check(answer: dict[str, Any]) -> dict[str, Any]:
    if not answer.get("ok"):
        raise ActionError(str(answer.get("error")))
    return answer
