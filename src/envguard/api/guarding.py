"""Guarding a venv against an install: preview() what it would change, guard() it (refuse
or run it, recorded), history() of the guarded changes, undo() one; protect() a venv so
that its later pip and uv installs go through guard() by themselves."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from envguard import inuse
from envguard.api.capture import snapshot_document, start_document
from envguard.api.compare import load_policy
from envguard.errors import UsageError
from envguard.guard import journal, nesting
from envguard.guard.building import (
    check_project,
    check_sources,
    held_to_wheels,
    refused,
    without_builds,
)
from envguard.guard.command import (
    InstallCommand,
    check_files,
    check_named,
    check_variables,
    parse,
    split_guarded,
)
from envguard.guard.install import check_program, find_program, run_install
from envguard.guard.resolve import DryRun, Resolution, installer_env, project_env
from envguard.guard.resolve import start as start_dry_run
from envguard.guard.target import guard_target
from envguard.inuse import REFUSE, InUse
from envguard.lifecycle import Interrupted, set_interrupt_hint
from envguard.recovery.scratch import scratch_folder
from envguard.snapshots import document, store
from envguard.snapshots.capture import finish_document
from envguard.tools import find_uv, user_environ
from envguard.units import seconds

if TYPE_CHECKING:
    from envguard.compare.models import Change, Drift
    from envguard.compare.policy import Policy
    from envguard.guard.incoming import Wheel
    from envguard.guard.journal import Record
    from envguard.guard.report import GuardReport
    from envguard.snapshots.document import Document
    from envguard.snapshots.models import Snapshot
    from envguard.snapshots.request import StartedCapture


@dataclass
class Preview:
    """What an install would change, against what, and what of it stops the install."""

    command: InstallCommand
    venv: Path
    against: str  # "snapshot good" or "the venv as it is"
    resolution: Resolution
    headline: str
    live_text: str  # the venv as it is, as a snapshot file holds it
    # None when the installer would change nothing (nothing was compared).
    drift: Drift | None = None
    live: Snapshot | None = None
    blocking: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    snapshot: Path | None = None  # the snapshot file held to; None: the venv as it is
    # The files the install would bring (each by URL and sha256), read before it runs, and
    # the venv as they would leave it (None: nothing brought, or its files not known).
    wheels: tuple[Wheel, ...] = ()
    would: Snapshot | None = None
    # Packages the install would bring whose files are not known before it (not a wheel).
    unread: tuple[str, ...] = ()
    # Each extension the install would leave unable to load -> its package's name; each
    # path an incoming wheel would write over another's -> that wheel's.
    owners: dict[str, str] = field(default_factory=dict)

    def written_over(self) -> list[Change]:
        """The changes where the install would leave another distribution's file as an
        incoming wheel's bytes (the verdict's lines do not say them)."""
        from envguard.guard.preview import CLOBBERING

        changes = self.drift.changes if self.drift is not None else ()
        return [c for c in changes if c.section == "installed" and c.kind in CLOBBERING]

    def allow_names(self) -> list[str]:
        """The names `--allow` takes to let the blocking changes through."""
        names = {
            self.owners.get(c.name, c.name)
            if c.section in ("fit", "installed")
            else c.name.split(" ", 1)[0]
            for c in self.blocking
        }
        return sorted(names)

    def report(self) -> GuardReport:
        """The preview as `envguard guard --preview --format json` prints it."""
        return _guard_report(self, None)


@dataclass
class Guarded:
    """What guard() did: refused (``ran`` False) or ran the command and recorded it."""

    preview: Preview
    ran: bool = False
    exit_code: int | None = None
    record: Record | None = None
    change: str = ""

    def report(self) -> GuardReport:
        """What guard() did as `envguard guard --format json` prints it."""
        return _guard_report(self.preview, self)


def _guard_report(seen: Preview, done: Guarded | None) -> GuardReport:
    from envguard.guard.report import GuardReport, IncomingFile, guard_change

    drift = seen.drift
    ran = done is not None and done.ran
    return GuardReport(
        venv=str(seen.venv),
        command=seen.command.argv,
        against=seen.against,
        snapshot=str(seen.snapshot) if seen.snapshot is not None else None,
        headline=seen.headline,
        verdict=drift.verdict if drift is not None else (),
        changes=tuple(
            guard_change(c, blocking=c in seen.blocking)
            for c in (drift.changes if drift is not None else ())
        ),
        blocking=bool(seen.blocking),
        blocked_by=tuple(sorted({c.name for c in seen.blocking})),
        preview=done is None,
        ran=ran,
        exit_code=done.exit_code if done is not None else None,
        record=done.record.number if done is not None and done.record is not None else None,
        change=(done.change or None) if done is not None and ran else None,
        notes=tuple(seen.notes),
        files=tuple(
            IncomingFile(name=w.name, version=w.version, file=w.filename, sha256=w.sha256)
            for w in seen.wheels
        ),
        pinned=_pinned_possible(seen) and not seen.blocking,
    )


def _venv_path(venv: str | Path | None) -> Path:
    """The venv to guard: ``venv``, else $VIRTUAL_ENV, else ./.venv; it must be one."""
    import os

    chosen = Path(venv) if venv is not None else Path(os.environ.get("VIRTUAL_ENV") or ".venv")
    where = chosen.expanduser().absolute()
    if not (where / "pyvenv.cfg").is_file() or not (where / "bin" / "python").exists():
        raise UsageError(
            f"{chosen}: not a virtualenv (no pyvenv.cfg or bin/python)",
            hint="name the venv with --venv DIR",
        )
    return where


# The longest a dry run may be given (--timeout): 11 days; more is no deadline.
MOST_SECONDS = 1e6


@dataclass(frozen=True)
class GuardOptions:
    """How guard() and preview() judge an install.

    ``venv``: the venv [default: $VIRTUAL_ENV, else ./.venv]; ``against``: the snapshot to
    hold it to besides [default: none; the install is always judged against the venv as it
    is]; ``fail_on``:
    refuse when a change to what is installed reaches it; ``allow``: packages the install
    may change; ``timeout``: seconds for the dry run; ``shell``: split a one-string command
    holding shell syntax; ``keep``: records kept; ``policy``: instead of pyproject's;
    ``in_use``: what to do when processes run from the venv (refuse, wait, or go on);
    ``waiting``: called once with a line to show when the venv was probed and the
    installer's dry run is still resolving (pip's can take a minute);
    ``allow_build``: let the preview run a build backend (guard/building.py)."""

    venv: str | Path | None = None
    against: str | Path | None = None
    fail_on: str | None = "critical"
    allow: tuple[str, ...] = ()
    timeout: float = 120.0
    shell: bool = False
    keep: int = journal.KEEP
    policy: Policy | None = None
    in_use: InUse = REFUSE
    waiting: Callable[[str], None] | None = None
    allow_build: bool = False

    def __post_init__(self) -> None:
        seconds(self.timeout, option="--timeout", most=MOST_SECONDS)


def preview(argv: Sequence[str] | str, options: GuardOptions | None = None) -> Preview:
    """What ``argv`` (an install command; one string is split as shell words) would change
    in the venv, against the snapshot; nothing is changed. The installer's own dry run
    says what it would do. Refused under another guard (guard/nesting.py)."""
    nesting.check()  # first: a guard started by its own installer goes no further
    opts = options or GuardOptions()
    split = split_guarded(argv, shell=opts.shell) if isinstance(argv, str) else tuple(argv)
    command = parse(split)
    rules = opts.policy if opts.policy is not None else load_policy(fail_on=opts.fail_on)
    against = _baseline_path(opts.against)
    # Validated before anything runs (a snapshot is untrusted input).
    baseline = store.load(against) if against is not None else None
    held = command if opts.allow_build else without_builds(command)
    started: StartedCapture | None = None
    if command.project:
        where, env, dry_run = _project_dry_run(command, opts, held=held)
    else:
        where, dry_run, started = _venv_dry_run(command, opts, held=held)
        env = installer_env(where, user_environ())
    try:
        if started is not None:
            doc = finish_document(started)
        else:
            doc = snapshot_document(python=where / "bin" / "python", name="guard")
        if opts.waiting is not None and dry_run.running():
            opts.waiting(f"{command.tool} is resolving (its dry run) ...")
        resolution = dry_run.finish(_versions(doc))
    except UsageError as exc:
        dry_run.cancel()
        raise (exc if opts.allow_build else refused(exc)) from None
    except BaseException:
        dry_run.cancel()
        if started is not None:
            started.cancel()
        raise
    shown = f"snapshot {against.stem}" if against is not None else "the venv as it is"
    seen = Preview(
        command=command,
        venv=where,
        against=shown,
        resolution=resolution,
        live_text=store.dumps(doc),
        headline=f"this {command.action} would change no package",
        snapshot=against,
    )
    if not resolution.touched():  # nothing to compare: pydantic is never loaded
        return seen
    seen = _read_incoming(seen, env=env, timeout=opts.timeout)
    seen = _judged(seen, document.typed(doc), baseline, rules, allow=opts.allow)
    if _pinned_possible(seen) and not seen.blocking:
        n = len(seen.wheels)
        seen.notes.append(
            f"guard installs exactly the {n} previewed file{'s' if n != 1 else ''}, each by"
            " its sha256 (--require-hashes): an index or folder that answers otherwise now"
            " fails the install, which then changes nothing"
        )
    return seen


def _read_incoming(seen: Preview, *, env: dict[str, str], timeout: float) -> Preview:
    """``seen`` with the wheels the install would bring (issue 38: identity, not version)
    and the venv as they would leave it, measured with them unpacked into a scratch prefix
    read ahead of the venv: their files, torch's build and the fit (issue 35)."""
    import shutil
    from dataclasses import replace

    from envguard.api.capture import fit
    from envguard.guard import incoming

    planned = seen.resolution.installed
    if not planned:
        return seen
    command, where = seen.command, seen.venv
    uv = find_uv()
    known = {
        p.name: incoming.Wheel(name=p.name, version=p.version, url=p.url, sha256=p.sha256)
        for p in planned
        if p.url is not None and p.sha256 is not None
    }
    notes = list(seen.notes)
    if command.tool == "uv" and not command.project:
        try:
            known = incoming.locate_uv(
                planned, command, venv=where, uv=uv, env=env, timeout=timeout
            )
        except UsageError as exc:  # a local folder or a URL named on the command line
            notes.append(f"the files of this install could not be named before it: {exc}")
    wheels = tuple(known[p.name] for p in planned if p.name in known)
    unread = tuple(p.name for p in planned if p.name not in known)
    if not wheels:
        return replace(seen, unread=unread, notes=notes)
    scratch = scratch_folder("guard")  # named so a later run removes it after a SIGKILL
    try:
        site = incoming.unpack(
            wheels, command, venv=where, uv=uv, env=env, scratch=scratch, timeout=timeout
        )
        would = fit(python=where / "bin" / "python", overlay=site, timeout=timeout)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return replace(seen, wheels=wheels, would=would, unread=unread, notes=notes)


def _venv_dry_run(
    command: InstallCommand, opts: GuardOptions, *, held: InstallCommand
) -> tuple[Path, DryRun, StartedCapture]:
    """`pip`/`uv pip` previewed for the guarded venv, once every file and setting the
    installer reads is checked (building turned off unless allowed: ``held``): the venv,
    the dry run started, and the venv's probe started (it runs meanwhile: asking pip for
    its configuration takes as long as the probe)."""
    where = _venv_path(opts.venv)
    env = installer_env(where, user_environ())
    check_variables(command, env)
    builds = check_files(command, cwd=Path.cwd(), env=env)
    program = find_program(command.argv[0], env)
    check_program(command.tool, program, where)
    started = start_document(python=where / "bin" / "python", name="guard")
    try:
        # Where the install will really write, from every setting its installer reads.
        named = guard_target(
            command,
            venv=where,
            env=user_environ(),
            installer=env,
            cwd=Path.cwd(),
            timeout=opts.timeout,
        )
        builds += check_named(named, cwd=Path.cwd(), env=env)
        if not opts.allow_build:
            check_sources(command, builds)
        uv = program if command.tool == "uv" else find_uv()
        # The dry run works while the venv is probed; an error or interrupt stops both.
        dry_run = start_dry_run(held, venv=where, uv=uv, env=env, timeout=opts.timeout)
    except BaseException:
        started.cancel()
        raise
    return where, dry_run, started


def _project_dry_run(
    command: InstallCommand, opts: GuardOptions, *, held: InstallCommand
) -> tuple[Path, dict[str, str], DryRun]:
    """`uv add|remove|sync` previewed in the project (its files put back) as ``held`` (the
    command, building turned off unless allowed): the environment it syncs (``opts.venv``,
    else the project's own), the installer's environment, the dry run's answer."""
    from envguard.guard import project

    chosen = _venv_path(opts.venv) if opts.venv is not None else None
    base = project_env(user_environ(), chosen)
    check_variables(command, base)
    check_files(command, cwd=Path.cwd(), env=base)
    if not opts.allow_build:
        check_project(command, cwd=Path.cwd())
    uv = find_program(command.argv[0], base)
    try:
        seen = project.preview(held, uv=uv, env=base, cwd=Path.cwd(), timeout=opts.timeout)
    except UsageError as exc:
        raise (exc if opts.allow_build else refused(exc)) from None
    if not (seen.environment / "pyvenv.cfg").is_file():
        raise UsageError(
            f"{seen.environment}: the project has no environment there yet; nothing to guard",
            hint="create it first (uv sync), then guard what changes it",
        )
    where = _venv_path(seen.environment)
    if chosen is not None and where.resolve() != chosen.resolve():
        raise UsageError(f"uv would sync {where}, not the guarded venv {chosen}")
    return where, installer_env(where, user_environ()), DryRun.answered(command, seen)


def _judged(
    seen: Preview,
    live: Snapshot,
    baseline: Snapshot | None,
    rules: Policy,
    *,
    allow: tuple[str, ...],
) -> Preview:
    """``seen`` with the drift the install would make from ``live`` and, when the user
    named one, from ``baseline``: a change either way stops it."""
    from dataclasses import replace

    from envguard.compare.engine import diff as compute
    from envguard.guard.preview import after_install, blocking, headline

    tool = seen.command.tool
    notes = list(seen.notes)
    if seen.unread:
        notes.append(
            "not read before the install (no wheel named by the installer): "
            + ", ".join(seen.unread[:10])
            + (f" and {len(seen.unread) - 10} more" if len(seen.unread) > 10 else "")
        )
    # Always against the venv as it is: what the install would do to it.
    after = after_install(live, live, seen.resolution, tool=tool, would=seen.would)
    drift = _unknown_build(compute(live, after, rules), after)
    owners = _owners(after)
    stops = blocking(drift, rules, allowed=allow, owners=owners)
    if baseline is not None:  # and, in addition, against the snapshot the user named
        after = after_install(baseline, live, seen.resolution, tool=tool, would=seen.would)
        held = _unknown_build(compute(baseline, after, rules), after)
        named = blocking(held, rules, allowed=allow, owners=owners)
        shown = {(c.section, c.name) for c in named}
        extra = [c for c in stops if (c.section, c.name) not in shown]
        if extra:  # the snapshot hides a change to the venv itself: the venv's drift shown
            stops = [*named, *extra]
            notes.append(
                f"{seen.against} records what this install would leave of "
                f"{', '.join(sorted({c.name for c in extra}))}, the venv does not:"
                " judged against the venv as it is"
            )
        else:
            drift, stops = held, named
        installed = {n: p.version for n, p in live.package_map().items()}
        recorded = baseline.package_map()
        moved = installed.keys() ^ recorded.keys()
        moved |= {n for n, p in recorded.items() if n in installed and installed[n] != p.version}
        moved -= seen.resolution.touched()  # what the install changes is its own, not before
        if moved:
            notes.append(
                f"the venv already differs from {seen.against} in {len(moved)} package"
                f"{'s' if len(moved) != 1 else ''} this install leaves alone"
                " (envguard diff says which)"
            )
    owners = _owners(after)
    return replace(
        seen,
        drift=drift,
        blocking=stops,
        owners=owners,
        headline=headline(
            drift, lead=f"this {seen.command.action} would", removes=seen.resolution.removals()
        ),
        live=live,
        notes=notes,
    )


def _owners(after: Snapshot) -> dict[str, str]:
    """Each extension that cannot load -> its distribution's canonical name; each path two
    distributions would claim -> the one whose bytes the install leaves there (what
    `--allow` names to let it through)."""
    from packaging.utils import canonicalize_name

    broken = after.fit.broken if after.fit is not None else ()
    found: dict[str, str] = {
        c.path: canonicalize_name(c.owner) for c in after.clashes or () if c.owner
    }
    found.update({u.path: canonicalize_name(u.dist.split(" ", 1)[0]) for u in broken if u.dist})
    return found


def _baseline_path(against: str | Path | None) -> Path | None:
    """The snapshot the user named, else None: the install is judged against the live
    venv, never against whichever file in snapshots/ says it is the newest (its `created`
    is the file's own claim; a stale or planted one would hide a torch swap)."""
    return store.resolve(str(against)) if against is not None else None


def _unknown_build(drift: Drift, after: Snapshot) -> Drift:
    """A torch wheel without a build label (PyPI's CUDA wheels): its CUDA is known once it
    is installed, so the verdict does not guess one."""
    if after.torch is not None or "torch" not in after.package_map():
        return drift
    import re

    lines = tuple(
        re.sub(r" \(CUDA .* -> none\)$", " (its CUDA build: known once installed)", line)
        if line.startswith("torch ")
        else line
        for line in drift.verdict
    )
    return drift.model_copy(update={"verdict": lines})


def guard(
    argv: Sequence[str] | str,
    options: GuardOptions | None = None,
    *,
    on_preview: Callable[[Preview], None] = lambda _: None,
    stdout_to_stderr: bool = False,
) -> Guarded:
    """Preview ``argv``; refuse it (nothing changed) when a change to what is installed
    reaches ``fail_on`` and is not allowed; else record the venv, run the command as given,
    and record what it changed. ``on_preview`` sees the preview before anything runs;
    ``stdout_to_stderr``: the command's output goes to standard error (standard output is
    kept for a document)."""
    opts = options or GuardOptions()
    seen = preview(argv, opts)
    on_preview(seen)
    if seen.blocking:
        return Guarded(preview=seen)
    where = seen.venv
    inuse.check(where, opts.in_use, action="the install")
    record = journal.begin(
        where,
        seen.live_text,
        command=seen.command.argv,
        allowed=opts.allow,
        planned=seen.headline,
    )
    set_interrupt_hint(f"`envguard undo --venv {where}` brings back the venv as it was before")
    with _pinned(seen, allow_build=opts.allow_build) as argv:
        code, signum = run_install(
            argv, installer_env(where, user_environ()), stdout_to_stderr=stdout_to_stderr
        )
    if signum is not None:
        journal.finish(where, record, change="interrupted; not measured", exit_code=code)
        raise Interrupted(signum)
    try:
        change = _measured_change(seen, where)
        if code != 0 and change == "no package change" and _pinned_possible(seen):
            change += (
                ": the install of the previewed files failed (a file that is not the one"
                " previewed is refused; the installer says which)"
            )
    except BaseException:  # installed, not measured: the record still ends
        journal.finish(where, record, change="not measured; see envguard diff", exit_code=code)
        raise
    done = journal.finish(where, record, change=change, exit_code=code)
    journal.collect(where, keep=opts.keep)
    set_interrupt_hint(None)
    if code == 0 and NOT_PREVIEWED in change:
        code = 1  # it ran, and did something else than what was judged: a failed action
    return Guarded(preview=seen, ran=True, exit_code=code, record=done, change=change)


@contextmanager
def _pinned(seen: Preview, *, allow_build: bool) -> Iterator[tuple[str, ...]]:
    """The command to run: the one given (held to wheels as its dry run was, unless
    ``allow_build``), or, where the preview read every file the install would bring
    (`pip install`, `uv pip install`), one that installs exactly those files by version and
    sha256 (``--require-hashes``, the command's index options), so an index or a folder
    that answers differently now fails the install instead of changing what it installs
    (issue 38)."""
    import shutil

    from envguard.guard.incoming import pinned_install

    command = seen.command
    if not _pinned_possible(seen):
        yield command.argv if allow_build else held_to_wheels(command)
        return
    replaced = set(seen.resolution.removed) & {w.name for w in seen.wheels}
    argv, text = pinned_install(command, seen.wheels, venv=seen.venv, replaced=replaced)
    folder = scratch_folder("guard")
    try:
        requirements = folder / "previewed.txt"
        requirements.write_text(text)
        yield (*argv, str(requirements))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _pinned_possible(seen: Preview) -> bool:
    """Whether guard installs the previewed files by their hashes (else the command as
    given): an install whose every incoming package was read from its wheel."""
    command = seen.command
    return (
        command.action == "install"
        and not command.project
        and bool(seen.wheels)
        and not seen.unread
        and not seen.resolution.removed.keys() - {w.name for w in seen.wheels}
    )


def _measured_change(seen: Preview, where: Path) -> str:
    """What the install changed, measured on the venv afterwards (the record's line), and
    protect's pins brought up to date. When the dry run said nothing would change, the
    venv's versions are compared first (pydantic is loaded only if they moved), and a
    change is said to be one the dry run did not show."""
    import json

    from envguard.compare.engine import diff as compute
    from envguard.guard import protect as protection_files
    from envguard.guard.preview import headline

    rules = load_policy()
    doc = snapshot_document(python=where / "bin" / "python", name="guard")
    if seen.live is None and _builds(doc) == _builds(json.loads(seen.live_text)):
        return "no package change"
    after = document.typed(doc)
    pinned = protection_files.gpu_pins([(p.name, p.version) for p in after.packages], rules=rules)
    protection_files.refresh(where, pinned)
    if seen.live is None:
        before = store.loads(seen.live_text, source="the venv before the install")
        moved = headline(compute(before, after, rules), lead="")
        return f"{moved} (the dry run said: no package change)"
    change = headline(compute(seen.live, after, rules), lead="")
    unlike = _unlike_preview(seen, after)
    if unlike:
        change += (
            f"; {NOT_PREVIEWED}: {', '.join(unlike)}"
            f" (envguard undo --venv {where} brings back the venv as it was)"
        )
    return change


NOT_PREVIEWED = "not what was previewed"


def _unlike_preview(seen: Preview, after: Snapshot) -> list[str]:
    """The packages the install changed, and the preview read from their wheels, whose
    installed files are not those (an index or folder that answered otherwise, for a
    command run as given): "torch 2.11.0+cu128 (other files than the previewed wheel's)"."""
    if seen.would is None or seen.live is None:
        return []
    read, now = seen.would.package_map(), after.package_map()
    was = seen.live.package_map()
    out = []
    for wheel in seen.wheels:
        expected, got, old = read.get(wheel.name), now.get(wheel.name), was.get(wheel.name)
        if expected is None:
            continue
        if (
            got is not None
            and old is not None
            and (got.version, got.fingerprint)
            == (
                old.version,
                old.fingerprint,
            )
        ):
            continue  # left as it was (a failed install): not installed from anything
        if got is None:
            out.append(f"{wheel.name} (not installed)")
        elif got.version != expected.version:
            out.append(f"{wheel.name} {got.version} (previewed: {expected.version})")
        elif expected.fingerprint and got.fingerprint != expected.fingerprint:
            out.append(f"{wheel.name} {got.version} (other files than the previewed wheel's)")
    return out


def _versions(doc: Document) -> dict[str, str]:
    return {str(p["name"]): str(p["version"]) for p in doc["packages"] if not p.get("shadowed")}


def _builds(doc: Document) -> dict[str, tuple[str, str]]:
    """Each package's version and RECORD fingerprint: a reinstall of another build of the
    same version moves the second."""
    return {
        str(p["name"]): (str(p["version"]), str(p.get("fingerprint")))
        for p in doc["packages"]
        if not p.get("shadowed")
    }
