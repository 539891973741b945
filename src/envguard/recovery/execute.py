"""Execute a rebuild Plan: the only module that installs anything.

Fresh mode never touches the working venv until an atomic swap: it builds into a sibling
directory, verifies it against the snapshot, then exchanges the two directories in one
rename (renameat2 RENAME_EXCHANGE where the kernel has it). Any failure or interruption
before that leaves the working venv as it was and removes the half-built one.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from envguard.compare.models import Change, Drift, Severity
from envguard.errors import ActionError, StoppedError, UsageError
from envguard.lifecycle import (
    Interrupted,
    end_chain,
    forget,
    raise_if_signalled,
    set_interrupt_hint,
    signals_deferred,
    signals_handled,
    start_child,
)
from envguard.owned import fresh_place, own_folder
from envguard.recovery.outcome import Outcome, Warmup
from envguard.recovery.plan import Plan, RunStep, SwapStep, VerifyStep, safe_label
from envguard.snapshots.models import Snapshot

BUILD_MARK = ".envguard-build-"
PLAN_MARK = ".envguard-plan-"
# Inside a build dir while it is only a build: taken out just before the swap, so a dir
# at a build path *without* it is an old venv displaced by a swap that was killed midway.
MARKER = ".envguard-building"


def build_paths(venv: Path, pid: int | None = None) -> tuple[Path, Path]:
    """(build dir, plan dir): hidden siblings of ``venv`` on the same file system, named
    by pid and host (a home on NFS is shared: another node's pid means nothing here)."""
    owner = f"{os.getpid() if pid is None else pid}@{_HOST}"
    return (
        venv.parent / f"{_hidden(venv)}{BUILD_MARK}{owner}",
        venv.parent / f"{_hidden(venv)}{PLAN_MARK}{owner}",
    )


_HOST = os.uname().nodename


def _hidden(venv: Path) -> str:
    return venv.name if venv.name.startswith(".") else f".{venv.name}"


def check_target(venv: Path, *, label: str, cwd: Path | None = None) -> None:
    """Refuse to replace anything but a virtualenv, and never the working directory."""
    here = (Path.cwd() if cwd is None else cwd).resolve()
    target = venv.resolve()
    if target == here or target in here.parents:
        raise UsageError(f"{label}: is the current directory or one of its parents")
    if target.exists() and not (target / "pyvenv.cfg").is_file():
        raise UsageError(
            f"{label}: {venv} exists and is not a virtualenv (no pyvenv.cfg); refusing to"
            " replace it"
        )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale(venv: Path) -> list[str]:
    """Clean up after a rebuild that was killed (its pid is gone); what was done, in words."""
    done: list[str] = []
    if not venv.parent.is_dir():
        return done
    for mark in (BUILD_MARK, PLAN_MARK):
        prefix = f"{_hidden(venv)}{mark}"
        for path in venv.parent.glob(f"{prefix}*"):
            pid, _, host = path.name[len(prefix) :].partition("@")
            if host != _HOST or not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
                continue
            displaced = (
                mark == BUILD_MARK
                and (path / "pyvenv.cfg").is_file()
                and not (path / MARKER).exists()
            )
            if displaced:  # never delete a venv we did not build: keep it as a backup
                backup = venv.parent / f"{venv.name}.envguard-backup-recovered-{pid}"
                if path.is_symlink() or os.path.lexists(backup):
                    continue  # not ours to move, or its place taken: left for a person
                path.rename(backup)
                done.append(f"kept {backup}: a venv left by a rebuild killed during its swap")
            else:
                shutil.rmtree(path, ignore_errors=True)
                done.append(f"removed {path} left by an interrupted rebuild")
    return done


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two directories (Linux renameat2); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    rc = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: file system cannot exchange
        return False
    raise OSError(err, os.strerror(err), str(a))


def swap_in(build: Path, venv: Path, *, stamp: str) -> Path | None:
    """Put ``build`` at ``venv``; the old venv moves to a timestamped backup (returned).
    Call it inside lifecycle.signals_deferred(): nothing may stop it halfway."""
    if not venv.exists():
        build.rename(venv)
        return None
    backup = venv.parent / f"{venv.name}.envguard-backup-{stamp}"
    n = 1
    while os.path.lexists(backup):  # a second rebuild by this process in the same second
        n += 1
        backup = venv.parent / f"{venv.name}.envguard-backup-{stamp}-{n}"
    (build / MARKER).unlink(missing_ok=True)
    if _exchange(build, venv):
        build.rename(backup)  # ``build`` now holds the old venv
        return backup
    venv.rename(backup)  # no atomic exchange here: two renames (callers hold signals)
    build.rename(venv)
    return backup


def run_step(step: RunStep, *, on_line: Callable[[str], None] | None = None) -> None:
    """Run one argv step, streaming its output; ActionError with uv's own error line."""
    from envguard import trace

    tail: list[str] = []
    env = {k: v for k, v in os.environ.items() if k not in step.unset_env}
    started = trace.command(step.purpose, step.argv)
    # In a session of its own: an interrupt ends uv and what it started (a build backend).
    proc = start_child(
        list(step.argv),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        with proc.stdout:
            for raw in proc.stdout:
                line = raw.decode("utf-8", "replace").rstrip()
                if line:
                    tail = [*tail[-19:], line]
                    if on_line is not None:
                        on_line(line)
        proc.wait()
    except BaseException:
        end_chain(proc)
        raise
    finally:
        forget(proc.pid)
    raise_if_signalled()  # an interrupt whose exception CPython lost: stop before the next step
    trace.done(step.purpose, started)
    if proc.returncode != 0:
        raise step_failure(step, proc.returncode, tail)


# The box-drawing marks uv draws around its error lines.
_MARKS = " \u2570\u2500\u25b6\u2502\u00d7"
_NETWORK = ("request failed", "lookup address", "dns error", "connection", "network", "timed out")


def step_failure(step: RunStep, code: int, tail: list[str], *, where: str = "") -> ActionError:
    """A failed uv step as one line: uv's own cause (its 'Because ...' line, else its last
    error line), and a hint that fits what went wrong (the network, or not)."""
    because = [ln for ln in tail if "because" in ln.lower()]
    errors = [ln for ln in tail if ln.lstrip().lower().startswith(("error", "\u00d7"))]
    last = (because[:1] or errors[-1:] or tail[-1:] or ["no output"])[0].strip(_MARKS)
    offline = any(any(word in ln.lower() for word in _NETWORK) for ln in tail)
    hint: str | None
    if step.kind == "venv":
        hint = (
            "uv looked for that Python version and tried to download it:"
            " --base-python PATH names an interpreter of that version"
            if offline
            else "--base-python PATH picks another interpreter of that version"
        )
    elif step.kind == "install" and "--no-cache" in step.argv and "--offline" in step.argv:
        # Packages found edited come from their wheels: uv's cache may hold the edit, and
        # --offline reads nothing else but local wheels.
        hint = (
            "the packages found edited are taken from their wheels, not from uv's cache"
            " (it may hold the edit), and --offline reads only that cache: --find-links DIR"
            " holding their wheels, or rebuild without --offline"
        )
    elif step.kind == "install":
        hint = (
            "no network to the PyTorch index? --find-links WHEELHOUSE holding the torch"
            " wheels (used alone when it has them all), --no-index, --offline, or"
            " --torch-index MIRROR"
            if offline
            else "are the exact torch builds in the wheelhouse (or the --torch-index)?"
        )
    else:
        hint = (
            "no network? --no-index (or --offline) installs from --find-links alone"
            if offline
            else None
        )
    return ActionError(f"step '{step.purpose}' failed{where} (exit {code}): {last}", hint=hint)


def cache_hint(bad: Sequence[Change], *, there: str = "") -> str | None:
    """When the verify of a new venv found files edited in place: uv linked them from its
    cache, which holds the edit (made through a venv it had linked), and a rebuild from it
    fails the same way each time; what drops it. None for any other failure."""
    names = sorted({safe_label(c.name) for c in bad if c.kind == "modified_in_place"})
    if not names:
        return None
    listed = " ".join(names[:20])
    return (
        f"files of {', '.join(names[:20])} differ from their RECORD in the new venv: uv's"
        f" cache{there} may hold an edit (made through a venv uv linked to it);"
        f" `uv cache clean {listed}`{there} drops it (for every venv built from that cache"
        " later), then rebuild again"
    )


def verify(
    snapshot: Snapshot,
    python: Path,
    *,
    sections: tuple[str, ...] = ("packages", "interpreter", "installed"),
    ignore: frozenset[str] = frozenset(),
) -> tuple[Drift, Snapshot]:
    """``sections`` of ``python`` against ``snapshot`` (must be info at most), and the live
    measurement itself, which also holds the snapshot's repos, files and caches."""
    from envguard.compare.engine import diff
    from envguard.compare.policy import Policy, only_sections
    from envguard.snapshots.capture import capture_snapshot
    from envguard.snapshots.live import Recorded, request_like

    # Every installed file hashed, not the quick rule: the rule that missed the damage must
    # not be the one that calls the repair good (an edit uv's cache carried into the new
    # venv has an mtime no later than its fresh RECORD's).
    request = replace(request_like(Recorded.of(snapshot), python=python), verify="deep")
    live = capture_snapshot(request)
    policy = only_sections(Policy(ignore_packages=tuple(sorted(ignore))), sections)
    drift = diff(snapshot, live, policy)
    # Built from source here (VCS, local dir): bytes differ between builds, so only a
    # wheel from an index must match its fingerprint.
    built = {p.name for p in snapshot.packages if p.source.kind in ("vcs", "dir", "editable")}
    kept = tuple(
        c
        for c in drift.changes
        if not (c.section == "packages" and c.kind == "content_changed" and c.name in built)
        # Bytes the good environment had edited in place are not kept: not_restored says so.
        and not (c.section == "installed" and c.kind == "modification_gone")
    )
    return drift.model_copy(update={"changes": kept}), live


def execute(
    p: Plan,
    snapshot: Snapshot,
    *,
    no_backup: bool = False,
    keep_backups: int = 1,
    ignore: frozenset[str] = frozenset(),
    status: Callable[[str], None] = lambda _: None,
    on_line: Callable[[str], None] | None = None,
    before_swap: Callable[[], None] | None = None,
) -> Outcome:
    """Run ``p``. Fresh mode: the working venv is untouched unless every step succeeded.
    Afterwards at most ``keep_backups`` envguard backups of the venv are kept (the newest).
    ``before_swap`` runs once the new venv is verified, before it takes the old one's place
    (what must read the old venv where it is).

    One rebuild of a venv at a time: a second one refuses at once (ActionError)."""
    with venv_lock(Path(p.venv)):
        room = None if p.in_place else _Room(Path(p.venv))
        outcome = _execute(
            p,
            snapshot,
            no_backup=no_backup or keep_backups < 1,
            ignore=ignore,
            status=status,
            on_line=on_line,
            before=_Before(room=room, swap=before_swap),
        )
        if not p.in_place:
            outcome.notes += prune_backups(Path(p.venv), keep=keep_backups, current=outcome.backup)
        if outcome.backup is not None:
            # The backup is the venv the room check measured, moved aside.
            measured = room.size if room is not None else None
            outcome.backup_bytes = measured if measured is not None else tree_bytes(outcome.backup)
        return outcome


class _Room:
    """check_room() in a thread: it walks the venv while uv creates the new one, and the
    first install waits for its verdict (wait()). What it measured is also the size of the
    backup the swap leaves."""

    def __init__(self, venv: Path) -> None:
        import threading

        self.size: int | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(venv,), daemon=True)
        self.thread.start()

    def _run(self, venv: Path) -> None:
        try:
            self.size = check_room(venv)
        except BaseException as exc:  # re-raised by wait() in the rebuild's thread
            self.error = exc

    def wait(self) -> None:
        self.thread.join()
        if self.error is not None:
            error, self.error = self.error, None
            raise error


@dataclass(frozen=True)
class _Before:
    """What the steps wait for: the room check before installing, the caller's
    ``before_swap`` before the new venv takes the old one's place."""

    room: _Room | None = None
    swap: Callable[[], None] | None = None


def tree_bytes(root: Path, *, seconds: float = 10.0) -> int | None:
    """Bytes under ``root`` (symlinks not followed), or None past ``seconds``."""
    import time

    deadline = time.monotonic() + seconds
    total = 0
    for folder, _dirs, files in os.walk(root):
        if time.monotonic() > deadline:
            return None
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


def check_room(venv: Path) -> int | None:
    """Refuse before building when the venv's file system has less free space than the
    venv takes now (the new one is built beside it), with a hint of what frees some; the
    venv's size (None: not measured)."""
    if not venv.is_dir():
        return None
    size = tree_bytes(venv, seconds=5.0)
    try:
        stats = os.statvfs(venv.parent)
    except OSError:
        return size
    free = stats.f_bavail * stats.f_frsize
    if size is not None and free < size:
        from envguard.units import human_size

        raise ActionError(
            f"{venv.parent}: {human_size(free)} free, the new venv needs about {human_size(size)}",
            hint="free some room (old envguard backups: --keep-backups 0), or --in-place",
        )
    return size


def prune_backups(venv: Path, *, keep: int, current: Path | None) -> list[str]:
    """Remove all but the newest ``keep`` envguard backups of ``venv`` (``current``, the
    one this rebuild made, is always among them); say what went."""
    prefix = f"{venv.name}.envguard-backup-"
    found = [
        p
        for p in venv.parent.iterdir()
        if p.name.startswith(prefix)
        and p.is_dir()
        and not p.is_symlink()
        and (p / "pyvenv.cfg").is_file()  # only a venv: a folder merely named so is kept
        and p != current
    ]
    found.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    removed = []
    for old in found[max(0, keep - (current is not None)) :]:
        shutil.rmtree(old, ignore_errors=True)
        removed.append(f"removed an older backup ({old})")
    return removed


@contextlib.contextmanager
def venv_lock(venv: Path) -> Iterator[None]:
    """An exclusive lock on ``venv`` (a lock file beside it, held with flock while we run)."""
    import fcntl

    path = venv.parent / f"{_hidden(venv)}.envguard.lock"
    try:
        venv.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as exc:  # a read-only mount, a folder or a symlink in its place
        raise ActionError(
            f"{venv}: cannot lock it for the rebuild: {path}: {exc.strerror or exc}",
            hint="the folder holding the venv must be writable (a read-only mount cannot"
            " take a rebuild)",
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ActionError(
                f"{venv}: another envguard rebuild of this venv is running",
                hint="wait for it to finish, then run this one again",
            ) from None
        yield
    finally:
        os.close(fd)  # closing releases the lock; the file stays (unlinking it would race)


def _execute(
    p: Plan,
    snapshot: Snapshot,
    *,
    no_backup: bool,
    ignore: frozenset[str],
    status: Callable[[str], None],
    on_line: Callable[[str], None] | None,
    before: _Before,
) -> Outcome:
    venv = Path(p.venv)
    outcome = Outcome(venv=venv, snapshot=p.snapshot, packages=p.packages)
    state = _State(build=Path(p.build) if p.build else None)
    set_interrupt_hint(None)
    plan_dirs = sorted({Path(f.path).parent for f in p.files})
    # A signal raises Interrupted here (SIGTERM too, for an API caller): unwind, clean up,
    # leave the working venv alone, and say where the rebuild stopped (the error below
    # reports the signal: the CLI does not say it again).
    with signals_handled():
        try:
            try:
                _run_steps(p, snapshot, outcome, ignore, status, on_line, state, before)
            finally:  # still handled: a signal during clean-up is reported below
                build = state.build
                if build is not None and (build / MARKER).exists():  # only a build of ours
                    shutil.rmtree(build, ignore_errors=True)
                for folder in plan_dirs:
                    if PLAN_MARK in folder.name:
                        shutil.rmtree(folder, ignore_errors=True)
            if no_backup and outcome.backup is not None:
                shutil.rmtree(outcome.backup, ignore_errors=True)
                outcome.notes.append(f"removed the old venv ({outcome.backup})")
                outcome.backup = None
                set_interrupt_hint(f"{venv} is the rebuilt venv")
        except Interrupted as exc:
            if state.swapped:
                stopped = StoppedError(
                    f"rebuild interrupted ({exc.name}) right after the swap",
                    hint=_swapped(outcome),
                    signum=exc.signum,
                )
            else:
                stopped = StoppedError(
                    f"rebuild interrupted ({exc.name}) during '{state.current}'",
                    hint=f"{venv} was not touched"
                    if not p.in_place
                    else f"{venv} may be partly synced; run the rebuild again",
                    signum=exc.signum,
                )
            raise stopped from None
        except ActionError as exc:
            where = (
                f"{venv} was not touched"
                if not p.in_place
                else f"{venv} may be partly synced; run the rebuild again"
            )
            exc.hint = where if exc.hint is None else f"{where}; {exc.hint}"
            raise
    return outcome


def _swapped(outcome: Outcome) -> str:
    where = f"{outcome.venv} is the rebuilt venv"
    return where + (f"; the old one is at {outcome.backup}" if outcome.backup else "")


@dataclass
class _State:
    build: Path | None
    current: str = "prepare"
    swapped: bool = False


def _run_steps(
    p: Plan,
    snapshot: Snapshot,
    outcome: Outcome,
    ignore: frozenset[str],
    status: Callable[[str], None],
    on_line: Callable[[str], None] | None,
    state: _State,
    before: _Before,
) -> None:
    venv = Path(p.venv)
    try:
        for folder in sorted({Path(f.path).parent for f in p.files}):
            if PLAN_MARK in folder.name:  # ours by name: opened, never followed
                own_folder(folder, create=True)
            else:
                folder.mkdir(parents=True, exist_ok=True)
        for f in p.files:
            Path(f.path).write_text(f.content, encoding="utf-8")
    except OSError as exc:  # a full disk or read-only file system: nothing ran yet
        raise ActionError(
            f"cannot write the plan's files ({exc.strerror or exc}: {exc.filename})"
        ) from None
    total = len(p.steps)
    for i, step in enumerate(p.steps, 1):
        state.current = step.purpose
        status(f"[{i}/{total}] {step.purpose}")
        if before.room is not None and not (isinstance(step, RunStep) and step.kind == "venv"):
            before.room.wait()
        if isinstance(step, VerifyStep):
            drift, outcome.live = verify(
                snapshot, Path(step.python), sections=step.sections, ignore=ignore
            )
            outcome.verified = drift
            bad = [c for c in drift.changes if c.severity.rank > Severity.info.rank]
            if bad:
                raise ActionError(
                    f"step '{step.purpose}' failed: {len(bad)} differences,"
                    f" first: {bad[0].message}",
                    hint=cache_hint(bad),
                )
        elif isinstance(step, SwapStep):
            assert state.build is not None and Path(step.build) == state.build
            if before.swap is not None:
                before.swap()
            # The pid too: two rebuilds in one second must not share a backup name.
            now = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
            stamp = f"{now}-{os.getpid()}"
            with signals_deferred():  # a signal now waits until the books are right
                outcome.backup = swap_in(state.build, venv, stamp=stamp)
                state.build = None  # it is the working venv now: never clean it up
                state.swapped = True
                _check_python(venv, outcome)
                # From here until the CLI printed its report, any signal says where both are.
                set_interrupt_hint(_swapped(outcome))
        elif isinstance(step, RunStep):
            if step.kind == "venv" and state.build is not None:
                fresh_place(state.build).mkdir(parents=True)  # ours from the start: marked
                (state.build / MARKER).touch()
            run_step(step, on_line=on_line)


def _check_python(venv: Path, outcome: Outcome) -> None:
    """The swapped-in interpreter must start; otherwise swap the backup straight back."""
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sys"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode == 0:
        return
    if outcome.backup is not None:
        failed = venv.parent / f"{venv.name}.envguard-failed"
        shutil.rmtree(failed, ignore_errors=True)
        venv.rename(failed)  # inside the caller's critical section
        outcome.backup.rename(venv)
        outcome.backup = None
    raise ActionError(f"the rebuilt venv's python does not start: {proc.stderr.strip()[-200:]}")


def not_restored(snapshot: Snapshot, live: Snapshot) -> list[str]:
    """What the snapshot knows but a rebuild does not restore: repos, files, caches."""
    from envguard.compare.engine import diff, restore_hints
    from envguard.compare.policy import Policy, only_sections

    kept = ("repos", "files", "caches", "installed")
    rest = diff(snapshot, live, only_sections(Policy(), kept))
    return restore_hints(rest.changes, snapshot)


def _user_env(venv: Path, env: Mapping[str, str] | None) -> dict[str, str]:
    """The user's environment with ``venv`` active and the recorded variables set."""
    from envguard.tools import user_environ

    return {
        **user_environ(),
        **(env or {}),
        "VIRTUAL_ENV": str(venv),
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def run_then(argv: tuple[str, ...], venv: Path, *, env: Mapping[str, str] | None = None) -> None:
    """Run the user's --then command with ``venv`` active and ``env`` set; ActionError when
    it fails."""
    try:
        code = subprocess.run(list(argv), env=_user_env(venv, env), check=False).returncode
    except OSError as exc:
        raise ActionError(f"--then {argv[0]}: cannot run it ({exc.strerror})") from None
    if code != 0:
        raise ActionError(f"--then command exited {code} (the rebuilt venv is in place)")


def run_warm(
    argv: tuple[str, ...], venv: Path, *, env: Mapping[str, str] | None = None, timeout: float
) -> Warmup:
    """Run the user's --warm command (a warm-up compile) as --then does, its output shown,
    for at most ``timeout`` seconds (then its whole process group is stopped); timed."""
    import time

    started = time.monotonic()
    try:
        proc = start_child(list(argv), env=_user_env(venv, env))
    except OSError as exc:
        raise ActionError(f"--warm {argv[0]}: cannot run it ({exc.strerror})") from None
    try:
        code: int | None = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        end_chain(proc, grace=1.0)
        code = None
    forget(proc.pid)  # an interrupt above leaves it registered: kill_running() ends it
    return Warmup(tuple(argv), round(time.monotonic() - started, 1), code, timeout)
