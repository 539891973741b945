"""Restoring everything a snapshot knows: restore() with its RestoreOptions (packages, repos,
tracked files, compile caches, variables), and restore_env() for the command run after."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envguard.api._shared import snapshot_path, target_for
from envguard.api.recover import rebuild
from envguard.compare.policy import Policy, only_sections
from envguard.compare.severity import Severity
from envguard.errors import EnvguardError, StoppedError, UsageError
from envguard.inuse import REFUSE, InUse
from envguard.lifecycle import Interrupted
from envguard.recovery.remote import remote_rebuild
from envguard.snapshots import signing
from envguard.snapshots import store as snapshots
from envguard.snapshots.blobs import Blobs, store_for
from envguard.snapshots.live import measure_like
from envguard.snapshots.measure import Measure, root_path
from envguard.units import human_size

if TYPE_CHECKING:
    from envguard.probe.channel import Target
    from envguard.recovery.outcome import Item, RestoreReport
    from envguard.recovery.sources import Sources
    from envguard.snapshots.models import Snapshot


@dataclass(frozen=True, kw_only=True)
class RestoreOptions:
    """What restore() brings back, where, and how; restore_hosts() takes the same."""

    venv: str | Path | None = None  # default: .venv; with via, an absolute path there
    execute: bool = False  # False: only the plan
    python: str | None = None  # with via: the Python there
    via: str | None = None  # restore on the far side of this prefix ({host} for many hosts)
    root: str | Path | None = None  # where the checkout holding the tracked files lies now
    repos: bool = False  # also check out each repo's recorded commit
    store: str | Path | None = None  # the content store (default: .store beside the snapshot)
    env_file: str | None = None  # default: NAME.env.sh in the cwd
    sources: Sources | None = None  # uv's package sources (sources())
    skip_editables: bool = False
    base_python: str | None = None  # the new venv's interpreter (default: the snapshot's)
    no_backup: bool = False
    keep_backups: int = 1
    allow: Sequence[str | Path] = ()  # folders files and caches may also be written under
    timeout: float | None = 120.0  # seconds per call through via
    remote_uv: str | None = None  # with via: uv's path there
    in_use: InUse = REFUSE  # processes running from the venv: refuse, wait, or go on


def restore(
    good: str | Path | None = None,
    options: RestoreOptions = RestoreOptions(),
    *,
    status: Callable[[str], None] = lambda _: None,
    on_line: Callable[[str], None] | None = None,
) -> RestoreReport:
    """Bring back everything ``good`` knows, in order: packages (a verified rebuild of
    ``venv``), with ``repos`` the repos' recorded commits, tracked files (from the store or
    git), compile caches (on the exact stack only) and a variables file to source. Without
    ``execute`` only the plan; on this host, or through ``via`` on the far side. An item
    that fails is left as it was; the report says what happened to each."""
    path = snapshot_path(good)
    text = snapshots.read(path)
    target = target_for(Measure(python=options.python, via=options.via, timeout=options.timeout))
    where = (
        None if options.root is None else root_path(options.root, remote=options.via is not None)
    )
    venv_path = _restore_venv(options.venv, remote=options.via is not None)
    python_now = str(venv_path / "bin" / "python")
    if options.via:
        has_venv = bool(target.call("room", path=python_now).get("exists"))
    else:
        has_venv = (venv_path / "bin" / "python").exists()
    if not has_venv:  # no venv yet: files, caches, repos and variables are still measured
        python_now = (options.python or "python3") if options.via else sys.executable

    # The live side is measured while the models load (as diff does), from the raw JSON;
    # the file is validated in full meanwhile, and an invalid one stops the probe.
    snap, live = measure_like(
        text,
        source=str(path),
        measure=Measure(
            python=python_now,  # the user's (--venv, --python): never the snapshot's own
            via=options.via,
            allow=tuple(str(a) for a in options.allow) + ((where,) if where else ()),
            root=where,
        ),
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

    allowed = [str(a) for a in options.allow] + ([where] if where is not None else [])
    ctx = Context(
        snap=snap,
        live=live,
        target=target,
        blobs=Blobs(options.store if options.store is not None else store_for(path)),
        execute=options.execute,
        status=status,
        # Local paths are absolute here; the far side resolves its own against its cwd.
        confine={
            "cwd": None if options.via else os.getcwd(),
            "allow": allowed if options.via else [os.path.abspath(a) for a in allowed],
        },
        keep_out=[
            str(path.absolute().parent),
            os.path.abspath(options.env_file or env_file_name(snap)),
        ],
        trust=signing.trust(text),  # the bytes the models were read from
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
        target=target,
        options=options,
        notes=notes,
        status=status,
        on_line=on_line,
    )
    items.append(package_item)
    if verified is not None:
        stack = verified
    if options.repos:
        items += restore_repos(ctx, root=where)
    items += restore_files(ctx)
    items += restore_caches(ctx, stack, rebuild_pending=package_item.status == "planned")
    env_path = options.env_file or env_file_name(snap)
    if snap.env:
        items.append(
            write_env_file(ctx, env_path if options.via else str(Path(env_path).absolute()))
        )
    return Report(
        snapshot=snap.name,
        target=target.label,
        executed=options.execute,
        items=tuple(items),
        env_file=env_path if snap.env else None,
        notes=tuple(notes),
    )


def _restore_venv(venv: str | Path | None, *, remote: bool) -> Path:
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
    target: Target,
    options: RestoreOptions,
    notes: list[str],
    status: Callable[[str], None],
    on_line: Callable[[str], None] | None,
) -> tuple[Item, Snapshot | None]:
    """The packages item, and the venv as verified after a rebuild (None without one)."""
    from envguard.compare.engine import diff as compute
    from envguard.recovery.outcome import Item

    differ = [
        c
        for c in compute(
            snap, live, only_sections(Policy(), ("packages", "interpreter", "installed"))
        ).changes
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
    if not options.execute:
        return Item(
            kind="packages",
            name=str(venv),
            status="planned",
            detail=f"rebuild ({why}): build beside, verify, swap ('envguard rebuild' shows"
            " the steps)",
        ), None
    try:
        if options.via is not None:
            outcome = remote_rebuild(
                snap,
                target,  # type: ignore[arg-type]
                venv=venv,
                sources=options.sources,
                skip_editables=options.skip_editables,
                base_python=options.base_python,
                no_backup=options.no_backup,
                keep_backups=options.keep_backups,
                remote_uv=options.remote_uv,
                status=status,
            )
        else:
            outcome = rebuild(
                path,
                venv=venv,
                sources=options.sources,
                skip_editables=options.skip_editables,
                base_python=options.base_python,
                no_backup=options.no_backup,
                keep_backups=options.keep_backups,
                in_use=options.in_use,
                status=status,
                on_line=on_line,
            )
    except StoppedError as exc:
        # An interrupt is no failed item: the whole restore stops here, nothing after the
        # packages is written, and it ends as any interrupt does (the rebuild left the venv
        # untouched, or swapped it in and set the hint saying where both venvs are).
        raise Interrupted(exc.signum) from None
    except EnvguardError as exc:
        detail = exc.message + (f" ({exc.hint})" if exc.hint else "")
        return Item(kind="packages", name=str(venv), status="failed", detail=detail), None
    notes += outcome.notes
    kept = None
    if outcome.backup is not None:
        size = f", {human_size(outcome.backup_bytes)}" if outcome.backup_bytes else ""
        kept = f"{outcome.backup}{size}"
    return Item(
        kind="packages",
        name=str(venv),
        status="restored",
        detail=f"rebuilt ({why}): {outcome.packages} packages",
        verified="packages and interpreter re-measured, every installed file hashed: they match",
        kept=kept,
    ), outcome.live


def restore_env(good: str | Path | None = None) -> dict[str, str]:
    """The variables a restore sets for --then: the snapshot's, less secrets and (unless
    signed with this user's key) loaders."""
    from envguard.recovery.restore import run_env

    path = snapshot_path(good)
    text = snapshots.read(path)
    return run_env(snapshots.loads(text, source=str(path)), trust=signing.trust(text))
