"""Rebuilding a snapshot's packages and writing them out: sources(), plan_rebuild(),
rebuild() with their RebuildOptions, export(), and run_then() for the command run after a
rebuild."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from envguard import inuse
from envguard.api._shared import with_wheelhouse
from envguard.api.capture import load, newest
from envguard.api.compare import load_policy
from envguard.errors import EnvguardError, StoppedError, UsageError
from envguard.guard import protect as protection
from envguard.inuse import REFUSE, InUse
from envguard.lifecycle import signals_deferred
from envguard.recovery.sources import Sources
from envguard.snapshots import store
from envguard.tools import find_modern_uv

if TYPE_CHECKING:
    from envguard.recovery.outcome import Outcome, Warmup
    from envguard.recovery.plan import Plan
    from envguard.snapshots.models import Snapshot


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
    for link in find_links:
        if "://" not in link and not Path(link).expanduser().is_dir():
            raise UsageError(f"--find-links {link}: no such directory")
    return Sources(
        index_url=index_url,
        extra_index_urls=tuple(extra_index_urls),
        find_links=tuple(str(Path(f).absolute()) if "://" not in f else f for f in find_links),
        offline=offline,
        no_index=no_index,
        torch_index=torch_index,
    )


@dataclass(frozen=True, kw_only=True)
class RebuildOptions:
    """How rebuild() and plan_rebuild() recreate a snapshot's packages: built once by the
    command line (rebuild's options) and passed whole."""

    venv: str | Path = ".venv"  # the venv to recreate
    in_place: bool = False  # uv pip sync straight into it (fastest, not atomic)
    sources: Sources | None = None  # uv's package sources (sources())
    skip_editables: bool = False  # leave out editable installs whose path is gone
    base_python: str | None = None  # the new venv's interpreter (default: the snapshot's)
    no_backup: bool = False  # delete the old venv after the swap
    keep_backups: int = 1  # at most this many old venvs kept (the newest)


def _rebuild_options(options: RebuildOptions | None, **keywords: Any) -> RebuildOptions:
    """``options``, or one made from the keywords rebuild() and plan_rebuild() took before
    it (still accepted); both at once is a UsageError."""
    flat = RebuildOptions(**keywords)
    if options is None:
        return flat
    if flat != RebuildOptions():
        raise UsageError("give options= or the keywords it holds (venv=, sources=, ...), not both")
    return options


def _planned(good: str | Path | None, options: RebuildOptions) -> tuple[Snapshot, Plan, _Damage]:
    from envguard.recovery.execute import build_paths
    from envguard.recovery.plan import PlanOptions, plan

    venv, in_place = options.venv, options.in_place
    path = store.resolve(str(good)) if good is not None else newest()
    snap = store.load(path)
    target = Path(venv).expanduser().absolute()
    if in_place and not target.is_dir():
        raise UsageError(f"--venv {venv}: no such venv to sync in place")
    build, workdir = build_paths(target)
    try:
        damage = _damaged(snap, target)
    except EnvguardError as exc:
        if in_place:
            raise
        # A fresh build replaces a venv that may not even start (what a rebuild is for):
        # its edits cannot be read, so nothing is known to be in uv's cache.
        damage = _Damage(notes=(f"the old venv's installed files were not read ({exc.message})",))
    planning = PlanOptions(
        venv=target,
        snapshot_ref=str(path),
        sources=with_wheelhouse(options.sources or Sources()),
        uv=find_modern_uv(),
        envguard=(sys.executable, "-m", "envguard"),
        in_place=in_place,
        build=None if in_place else build,
        workdir=workdir,
        skip_editables=options.skip_editables,
        base_python=options.base_python,
        reinstall=damage.reinstall if in_place else (),
        from_wheels=damage.from_wheels,
    )
    planned = plan(snap, planning)
    if damage.notes:
        planned = planned.model_copy(update={"warnings": planned.warnings + damage.notes})
    return snap, planned, damage


@dataclass(frozen=True)
class _Damage:
    """What a venv's installed files say the rebuild must put back, and how."""

    # Missing files or another package's bytes: a reinstall from uv's cache brings them back.
    reinstall: tuple[str, ...] = ()
    # Edited files: uv's unpacked cache may hold the edit (its installs are hardlinks), so
    # these come from their wheels, not from the cache.
    from_wheels: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def _damaged(snap: Snapshot, venv: Path) -> _Damage:
    """The packages of ``venv`` at the snapshot's version whose installed files are not
    what they installed (a sync keeps them, as their version matches; a fresh venv built
    from uv's cache would link the edited bytes again)."""
    from envguard.recovery.plan import check_name
    from envguard.snapshots.capture import capture_snapshot
    from envguard.snapshots.live import Recorded, request_like

    python = venv / "bin" / "python"
    if not python.exists():
        return _Damage()
    live = capture_snapshot(request_like(Recorded.of(snap), python=python)).package_map()
    reinstall, from_wheels, notes = [], [], []
    for name, pkg in sorted(snap.package_map().items()):
        now = live.get(name)
        if now is None or now.version != pkg.version or now.on_disk is None:
            continue
        found, good = now.on_disk, pkg.on_disk
        kept = (good.modified, good.missing, good.clobbered) if good is not None else ((),) * 3
        if (found.modified, found.missing, found.clobbered) == kept:
            continue  # the good run's own edits, or nothing
        key = check_name(name, f"package {name!r}")
        if found.modified:
            from_wheels.append(key)
            note = _cache_note(now.display_name, Path(now.location), found.modified)
            if note is not None:
                notes.append(note)
        elif found.missing or found.clobbered:
            reinstall.append(key)
    return _Damage(tuple(reinstall), tuple(from_wheels), tuple(notes))


def _cache_note(name: str, site: Path, modified: tuple[str, ...]) -> str | None:
    """Said when an edited file has other links: uv installs by hardlinking its unpacked
    cache, so the edit is in that cache and in every venv linked to it."""
    from envguard.recovery.plan import safe_label

    linked = []
    for rel in modified:
        with contextlib.suppress(OSError):
            links = (site / rel).lstat().st_nlink
            if links > 1:
                linked.append((rel, links))
    if not linked:
        return None
    rel, links = linked[0]
    more = f" and {len(linked) - 1} more" if len(linked) > 1 else ""
    return (
        f"{safe_label(name)}: the edit of {safe_label(rel)}{more} is in uv's cache too (the"
        f" file has {links} links: uv's unpacked wheel and every venv built from it); this"
        f" rebuild takes {safe_label(name)} from its wheel. Venvs already linked keep the"
        f" edit; `uv cache clean {safe_label(name)}` drops the entry for later installs"
        " (that cache is shared by every venv uv built with it)"
    )


def plan_rebuild(
    good: str | Path | None = None,
    *,
    venv: str | Path = ".venv",
    in_place: bool = False,
    sources: Sources | None = None,
    skip_editables: bool = False,
    base_python: str | None = None,
    options: RebuildOptions | None = None,
) -> Plan:
    """The steps that recreate ``good``'s packages in ``venv`` (nothing is changed);
    ``options`` holds the keywords in one value (give it or them)."""
    chosen = _rebuild_options(
        options, venv=venv, in_place=in_place, sources=sources,
        skip_editables=skip_editables, base_python=base_python,
    )  # fmt: skip
    return _planned(good, chosen)[1]


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
    in_use: InUse = REFUSE,
    status: Callable[[str], None] = lambda _: None,
    on_line: Callable[[str], None] | None = None,
    before_swap: Callable[[], None] | None = None,
    options: RebuildOptions | None = None,
) -> Outcome:
    """Recreate ``good``'s packages in ``venv``: build beside it, verify, swap atomically.
    The working venv is untouched unless every step succeeded. At most ``keep_backups``
    old venvs are kept (the newest); the build is refused when the disk lacks the room.
    ``before_swap`` runs once the new venv is verified, before the swap. Refused while
    processes run from the venv (``in_use``: or wait, or go on), looked for before anything
    is built and again right before the swap. ``options`` holds venv, in_place, sources,
    skip_editables, base_python, no_backup and keep_backups in one value (give it or them)."""
    from envguard.recovery.execute import check_target, execute, not_restored, remove_stale

    chosen = _rebuild_options(
        options, venv=venv, in_place=in_place, sources=sources,
        skip_editables=skip_editables, base_python=base_python, no_backup=no_backup,
        keep_backups=keep_backups,
    )  # fmt: skip
    venv, in_place = chosen.venv, chosen.in_place
    snap, the_plan, damage = _planned(good, chosen)
    target = Path(the_plan.venv)
    check_target(target, label=f"--venv {venv}")
    inuse.check(target, in_use, action="the rebuild")
    protected = protection.status(target) is not None

    def swapping() -> None:  # a job started during the build is seen as well
        inuse.check(target, in_use, action="the rebuild")
        if before_swap is not None:
            before_swap()

    cleaned = remove_stale(target)
    skipped = frozenset(s.split(" ", 1)[0] for s in the_plan.skipped)
    try:
        outcome = execute(
            the_plan,
            snap,
            no_backup=chosen.no_backup,
            keep_backups=chosen.keep_backups,
            ignore=skipped,
            status=status,
            on_line=on_line,
            before_swap=swapping,
        )
        outcome.notes[:0] = [*cleaned, *damage.notes]
        if protected:
            # Before anything else: an interrupt from here on finds the new venv protected.
            with signals_deferred():
                _protect_again(outcome, snap, target, in_place=in_place)
        if outcome.live is not None:
            outcome.not_restored = not_restored(snap, outcome.live)
    except (StoppedError, KeyboardInterrupt):
        # Stopped right after the swap (or after the rebuild returned): the new venv (no
        # manifest of its own yet) is protected before the interrupt is reported, as it
        # would have been.
        if protected and not in_place and protection.status(target) is None:
            with signals_deferred():
                installed = [(p.name, p.version) for p in snap.packages]
                protection.protect_installed(target, installed, rules=load_policy())
        raise
    return outcome


def _protect_again(outcome: Outcome, snap: Snapshot, target: Path, *, in_place: bool) -> None:
    live = outcome.live.packages if outcome.live is not None else snap.packages
    installed = [(p.name, p.version) for p in live]
    if in_place:  # its protection stayed: the GPU stack pinned as it is now
        rules = load_policy()
        protection.refresh(target, protection.gpu_pins(installed, rules=rules))
    else:  # the new venv is protected as the old one was
        protection.protect_installed(target, installed, rules=load_policy())
        outcome.notes.append("protected again (envguard protect): as the old venv was")


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

    snap = load(good)
    if output is not None:
        store.check_target(Path(output), force=force)
    if format == "requirements":
        text = requirements_export(snap, sources or Sources(), skip_editables=skip_editables)
    else:
        text = pylock_text(
            snap, sources or Sources(), uv=find_modern_uv(), skip_editables=skip_editables
        )
    if output is not None:
        store.write_atomic(Path(output), text, force=force)
    return text


def run_then(
    argv: Sequence[str], venv: str | Path, *, env: Mapping[str, str] | None = None
) -> None:
    """Run a command with ``venv`` active (after a rebuild) and ``env`` set; ActionError
    when it fails."""
    from envguard.recovery.execute import run_then as run

    run(tuple(argv), Path(venv), env=env or {})


def warm(
    argv: Sequence[str],
    venv: str | Path,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float,
) -> Warmup:
    """Run a warm-up command (after a restore) as run_then does, for at most ``timeout``
    seconds; its wall time and exit code."""
    from envguard.recovery.execute import run_warm

    return run_warm(tuple(argv), Path(venv), env=env or {}, timeout=timeout)
