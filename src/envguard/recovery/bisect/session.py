"""A bisect's state: the scratch venv and the units it holds, each step taken, and the
log on disk that --resume reads (under ``.envguard/bisect``, opened without following a
link)."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, replace
from pathlib import Path

from envguard.errors import UsageError
from envguard.recovery.bisect.changes import (
    CACHE_VARIABLES,
    Unit,
    candidate,
    group_parts,
    units,
)
from envguard.recovery.bisect.check import (
    Check,
    Result,
    crashed_on_import,
    judge,
    run_check,
)
from envguard.recovery.bisect.report import Step
from envguard.snapshots.models import Snapshot


class Session:
    """The scratch venv, the log on disk (for --resume) and every step taken."""

    def __init__(
        self,
        good: Snapshot,
        bad: Snapshot,
        check: Check,
        *,
        scratch: Path,
        build: Callable[[Snapshot, Path], None],
        env: dict[str, str],
        cwd: Path,
        log: Path,
        resume: bool,
        on_step: Callable[[Step], None],
        warm: Callable[[str, Path], None] = lambda kind, into: None,
    ) -> None:
        self.good, self.bad, self.check = good, bad, check
        self.scratch, self.build, self.env, self.cwd = scratch, build, env, cwd
        self.log, self.on_step, self.warm = log, on_step, warm
        self.all = units(good, bad)
        self.by_id = {u.id: u for u in self.all}
        self.steps: list[Step] = []
        self.runs = 0  # checks run now (not answers from the log); --max-steps caps it
        self.installs = 0  # times the scratch venv was (re)built: runs that share one don't
        self.installed: frozenset[str] | None = None  # the units the scratch venv holds
        self.known: dict[frozenset[str], Step] = {}
        with log_folder(log.parent) as folder:  # refused now, before anything is built
            if resume:
                for step in read_log(log):
                    ids = frozenset(step.units)
                    if step.contents == self.contents(ids):
                        self.known[ids] = step
            else:  # a fresh start: the log holds this run's steps only
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(log.name, dir_fd=folder)

    def contents(self, ids: frozenset[str]) -> str:
        """A digest of what the units ``ids`` apply: each one's packages at the bad side's
        versions, its variables and cache."""
        import hashlib

        bad = self.bad.package_map()
        held: list[object] = []
        for uid in sorted(ids):
            unit = self.by_id.get(uid)
            if unit is None:
                held.append([uid])  # a commit's key, or a unit this run does not have
                continue
            versions = [[n, bad[n].version if n in bad else None] for n in unit.packages]
            held.append([uid, versions, unit.env, unit.cache])
        return hashlib.sha256(json.dumps(held).encode()).hexdigest()[:16]

    def test(self, ids: frozenset[str], *, cwd: Path | None = None) -> Result:
        """Build and judge the good snapshot with the units ``ids`` applied (from the log
        when a run before already did), in ``cwd`` (a commit's worktree, whose key is in
        ``ids`` too) or the user's folder. The scratch venv is rebuilt only when it holds
        other units than the last run's."""
        if ids in self.known:
            step = self.known[ids]
            if any(s is step for s in self.steps):
                return step.result  # asked again within this run: said once already
        else:
            chosen = [self.by_id[i] for i in sorted(ids) if i in self.by_id]
            snap = candidate(self.good, self.bad, chosen)
            started = time.monotonic()
            applied = frozenset(u.id for u in chosen)
            if self.installed != applied:
                self.installed = None  # a build cut short leaves it unknown
                self.build(snap, self.scratch)
                self.installed = applied
                self.installs += 1
            env = {**_without_recorded(self.env), **_variables(snap), **self._caches(chosen)}
            code, output = run_check(self.check, self.scratch, env, cwd or self.cwd)
            said = judge(self.check, code, output)
            seconds = round(time.monotonic() - started, 2)
            step = Step(
                sorted(ids),
                said.result,
                said.metric,
                seconds,
                said.why,
                contents=self.contents(ids),
            )
            self.runs += 1
            self.known[ids] = step
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
            with (
                log_folder(self.log.parent) as folder,
                os.fdopen(os.open(self.log.name, flags, 0o600, dir_fd=folder), "a") as fh,
            ):
                fh.write(json.dumps(asdict(step)) + "\n")
        self.steps.append(step)
        self.on_step(step)
        return step.result

    def parts(self, group: Unit) -> list[Unit]:
        """A group's packages, each a unit of its own (known to test() from now on)."""
        return [self.by_id.setdefault(u.id, u) for u in group_parts(group, self.good, self.bad)]

    def affordable(self, ids: frozenset[str], max_steps: int) -> bool:
        """Whether judging ``ids`` fits the budget: a known answer is free."""
        return ids in self.known or self.runs < max_steps

    def crashes_on_import(self, step: Step) -> bool:
        """The bad environment crashed on import (judged skip): from now on that crash is
        the failure being hunted, so an import error is bad, here and in the log."""
        if step.result != "skip" or not step.why or not crashed_on_import(step.why):
            return False
        self.check = replace(self.check, import_error_bad=True)
        step.result = "bad"
        return True

    def _caches(self, chosen: Sequence[Unit]) -> dict[str, str]:
        """Each kept cache, fresh for this run: empty when its unit is applied (cold), else
        unpacked again from the store (warm; a run may write into it)."""
        import shutil

        out = {}
        cold = {u.cache for u in chosen if u.cache}
        for unit in self.all:
            if unit.cache is None:
                continue
            folder = self.scratch.parent / f"cache-{unit.cache}"
            shutil.rmtree(folder, ignore_errors=True)
            if unit.cache in cold:
                folder.mkdir()
            else:
                self.warm(unit.cache, folder)
            out[CACHE_VARIABLES[unit.cache]] = str(folder)
        return out


@contextlib.contextmanager
def log_folder(folder: Path) -> Iterator[int]:
    """``.envguard/bisect`` (``folder``, relative to the cwd) opened as a directory, each
    part made or opened without following a link: a checkout can commit ``.envguard`` as a
    symlink leading anywhere. UsageError for a link. ``.envguard`` gets a .gitignore so the
    logs never show up as untracked files of the user's repo (as .pytest_cache does it)."""
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for depth, part in enumerate(folder.parts):
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                where = Path(*folder.parts[: depth + 1])
                raise UsageError(
                    f"{where}: a symlink; bisect writes its log only into a folder of its own"
                ) from None
            os.close(fd)
            fd = inner
            if depth == 0:
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                # An existing file (or a planted link, never followed) is left as it is.
                with (
                    contextlib.suppress(FileExistsError),
                    os.fdopen(os.open(".gitignore", flags, 0o644, dir_fd=fd), "w") as fh,
                ):
                    fh.write("# written by envguard bisect\n*\n")
        yield fd
    finally:
        os.close(fd)


def read_log(log: Path) -> list[Step]:
    """The steps an earlier run logged; a damaged or forged line is passed over."""
    from envguard.reading import read_text

    text = read_text(str(log), 16 << 20)  # a regular file, capped
    if text is None:
        return []
    steps = []
    for line in text.splitlines():
        try:
            raw = json.loads(line)
            units, result, metric = raw["units"], raw["result"], raw["metric"]
            if not (isinstance(units, list) and all(isinstance(u, str) for u in units)):
                continue
            if result not in ("good", "bad", "skip"):
                continue
            if metric is not None and (
                isinstance(metric, bool)
                or not isinstance(metric, (int, float))
                or not math.isfinite(metric)
            ):
                continue
            why = raw.get("why")
            why = why[:200] if isinstance(why, str) else None
            number = None if metric is None else float(metric)
            took = raw.get("seconds")
            took = float(took) if isinstance(took, (int, float)) and 0 <= took < 1e9 else 0.0
            contents = raw.get("contents")
            contents = contents if isinstance(contents, str) and len(contents) == 16 else None
            steps.append(Step(units, result, number, took, why, logged=True, contents=contents))
        except (ValueError, KeyError, TypeError, RecursionError, AttributeError, OverflowError):
            continue
    return steps


def _without_recorded(env: dict[str, str]) -> dict[str, str]:
    """The user's environment less every variable of the kinds a snapshot records: a
    candidate's variables are the snapshot's, not whatever this shell has set."""
    from envguard.probe.payload import local_package

    kinds = local_package().env
    return {
        k: v
        for k, v in env.items()
        if not (k.startswith(kinds.ENV_PREFIXES) or k in kinds.ENV_NAMES)
        or k.startswith(("UV_", "PIP_"))
    }


def log_path(good: Snapshot, bad: Snapshot, check: Check) -> Path:
    """Where a bisect's steps are logged: one file per good/bad pair and check (a
    different command, threshold or bad environment never reuses another's results)."""
    import hashlib

    key = json.dumps(
        [list(check.argv), check.metric, check.minimum, check.maximum,
         sorted((p.name, p.version, p.fingerprint or "") for p in good.packages),
         sorted((p.name, p.version, p.fingerprint or "") for p in bad.packages),
         sorted(good.env.items()), sorted(bad.env.items())]
    )  # fmt: skip
    return Path(".envguard") / "bisect" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.jsonl"


def _variables(snap: Snapshot) -> dict[str, str]:
    from envguard.recovery.restore import run_env

    return run_env(snap)
