"""`envguard bisect`: which of the drift's changes turns a good run bad, and, with
``--repo``, which commit; a cause is only cleared by a run that shows it innocent.

The units are the drift's groups: the torch stack (torch, triton, the nvidia-* libraries)
as one, each install with what it pulled in (compare/causes.py), each remaining package
change, and the environment variables as one. A candidate is the good snapshot with some
units taken from the bad side; it is built as exact pins with uv into one scratch venv
(reused: uv changes only what differs, and a run that needs the same units as the last
builds nothing), and the user's command judges it. Delta debugging (ddmin) finds the
smallest set of units that is bad: about 2*log2(units) runs for one culprit, and
interactions (bad only together) are found too. The code axis (recovery/commits.py) runs
commits in the good environment and the drifted environment at the snapshot's commit.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Literal

from envguard.compare.sections.packages import torch_version
from envguard.errors import ActionError, UsageError
from envguard.lifecycle import MARKER, end_chain, forget, new_marker, start_child
from envguard.recovery import commits
from envguard.recovery.commits import FirstBadCommit, Worktree
from envguard.snapshots.models import Package, Snapshot

Result = Literal["good", "bad", "skip"]
# The torch stack moves together: its builds pin each other's CUDA libraries.
_TORCH = frozenset({"torch", "torchvision", "torchaudio", "triton", "pytorch-triton"})


@dataclass(frozen=True)
class Unit:
    """One thing bisect can apply: some packages taken from the bad side, or its variables."""

    id: str
    label: str
    packages: tuple[str, ...] = ()
    env: bool = False
    cache: str | None = None  # a kept compile cache's kind: applied, the run starts cold


# The variable each kept cache kind is pointed at for a run.
CACHE_VARIABLES = {"inductor": "TORCHINDUCTOR_CACHE_DIR", "triton": "TRITON_CACHE_DIR"}


def _differs(a: Package | None, b: Package | None) -> bool:
    if a is None or b is None:
        return a is not b
    return (a.version, a.source, a.fingerprint) != (b.version, b.source, b.fingerprint)


def _change(name: str, before: str | None, after: str | None) -> str:
    """``numpy 2.1.0 -> 1.26.4``, ``six added (1.17.0)``, ``x removed (was 1)``."""
    if before is None:
        return f"{name} added ({after or '?'})"
    if after is None:
        return f"{name} removed (was {before})"
    return f"{name} {before} -> {after}"


def _version(package: Package | None) -> str | None:
    return package.version if package is not None else None


def units(good: Snapshot, bad: Snapshot) -> list[Unit]:
    """The drift from ``good`` to ``bad`` as bisect units, largest cause first."""
    from envguard.compare.causes import group_changes

    gm, bm = good.package_map(), bad.package_map()
    changed = {n for n in gm.keys() | bm.keys() if _differs(gm.get(n), bm.get(n))}
    causes = group_changes(bad, changed)
    out: list[Unit] = []
    torch = sorted(n for n in changed if n in _TORCH or n.startswith("nvidia-"))
    if torch:
        # Named by torch's own change (its build label says the CUDA line) and by the
        # installs that pulled it in: what a person acts on.
        label = f"the torch stack ({len(torch)} packages)"
        if "torch" in torch:
            # Named by its builds, as diff names it (PyPI's 2.14.1 is +cu130).
            label = _change("torch", torch_version(good), torch_version(bad))
            if len(torch) > 1:
                label += f" with {len(torch) - 1} more of its stack"
        by = sorted(c.root for c in causes if c.root not in torch and set(torch) & {*c.members})
        if by:
            label += f", pulled in by {', '.join(by)}"
        out.append(Unit(id="torch", label=label, packages=tuple(torch)))
    unit_of = dict.fromkeys(torch, "the torch stack's")
    # Biggest install first (the verdict's order): a package two installs pulled in goes
    # with the bigger one, as the diff's table folds it.
    for cause in sorted(causes, key=lambda c: (-len(c.members), c.root)):
        members = [m for m in (cause.root, *cause.members) if m not in unit_of]
        if cause.root in unit_of or len(members) < 2:
            continue  # nothing left that it alone pulled in: a single change below
        unit_of.update(dict.fromkeys(members, f"{cause.root}'s"))
        out.append(
            Unit(
                id=f"group:{cause.root}",
                label=_group_label(cause.root, cause.members, unit_of),
                packages=tuple(members),
            )
        )
    taken = set(unit_of)
    for name in sorted(changed - taken):
        what = _change(name, _version(gm.get(name)), _version(bm.get(name)))
        out.append(Unit(id=f"package:{name}", label=what, packages=(name,)))
    if {k: v for k, v in good.env.items() if k != "VIRTUAL_ENV"} != {
        k: v for k, v in bad.env.items() if k != "VIRTUAL_ENV"
    }:
        out.append(Unit(id="env", label="the environment variables", env=True))
    now = {c.kind: c for c in bad.caches}
    for kept in good.caches:
        if kept.archive is None or kept.kind not in CACHE_VARIABLES:
            continue
        live = now.get(kept.kind)
        if live is None or (live.files, live.bytes) != (kept.archive.files, kept.archive.bytes):
            label = f"a cold {kept.kind} cache (the good run's was warm)"
            out.append(Unit(id=f"cache:{kept.kind}", label=label, cache=kept.kind))
    return out


def _group_label(root: str, members: Sequence[str], unit_of: dict[str, str]) -> str:
    """``sglang and what it pulled in (133 of its 135 packages; 2 in the torch stack's
    unit)``: the install's whole count, as the diff's verdict gives it, and where the
    packages that went with another unit are."""
    n = len(members)
    whole = f"{n} package{'s' * (n != 1)}"
    mine = unit_of[root]
    apart = Counter(unit_of[m] for m in members if unit_of[m] != mine)
    if not apart:
        return f"{root} and what it pulled in ({whole})"
    where = ", ".join(f"{k} in {unit} unit" for unit, k in sorted(apart.items()))
    return f"{root} and what it pulled in ({n - sum(apart.values())} of its {whole}; {where})"


def candidate(good: Snapshot, bad: Snapshot, chosen: Sequence[Unit]) -> Snapshot:
    """``good`` with the ``chosen`` units taken from ``bad``."""
    packages = {p.name: p for p in good.packages if not p.shadowed}
    bm = bad.package_map()
    names = {n for u in chosen for n in u.packages}
    for name in names:
        if name in bm:
            packages[name] = bm[name]
        else:
            packages.pop(name, None)
    update: dict[str, object] = {"packages": tuple(sorted(packages.values(), key=lambda p: p.name))}
    if "torch" in names:
        update["torch"] = bad.torch
    if any(u.env for u in chosen):
        update["env"] = bad.env
    return good.model_copy(update=update)


def ddmin(
    items: Sequence[Unit],
    test: Callable[[frozenset[str]], Result],
    *,
    affordable: Callable[[frozenset[str]], bool],
) -> tuple[list[Unit], bool]:
    """Zeller's ddmin: a 1-minimal subset of ``items`` for which ``test`` is bad (all of
    them is bad). ``test`` takes unit ids; ``skip`` counts as not bad. (subset, complete):
    complete is False when a test was needed that ``affordable`` refused (the run budget
    ran out; a test already answered, in this run or a logged one, costs nothing)."""
    current = list(items)
    n = 2
    while len(current) >= 2:
        chunks = [current[i * len(current) // n : (i + 1) * len(current) // n] for i in range(n)]
        chunks = [c for c in chunks if c]
        reduced = False
        for group in (chunks, [[u for u in current if u not in c] for c in chunks]):
            for subset in group:
                ids = frozenset(u.id for u in subset)
                if not affordable(ids):
                    return current, False
                if test(ids) == "bad":
                    current = subset
                    n = 2 if group is chunks else max(n - 1, 2)
                    reduced = True
                    break
            if reduced:
                break
        if not reduced:
            if n >= len(current):
                break
            n = min(len(current), 2 * n)
    return current, True


# The command could not run at all here: an import error, or no such script (a commit
# from before the benchmark existed). Judged as git bisect's "skip", unless the bad
# environment itself fails that way (then the crash is what is being hunted).
_IMPORT_ERROR = re.compile(r"^(?:ModuleNotFoundError|ImportError)\b.*$", re.M)
_NO_SCRIPT = re.compile(r"can't open file")
# A value as float() reads it, infinities and NaN included (judge() calls them bad).
_METRIC_LINE = re.compile(
    r"^\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*[=:]\s*([+-]?(?:[0-9][0-9.eE+-]*|inf|infinity|nan))\s*$",
    re.IGNORECASE,
)


def metric_value(output: str, name: str) -> float | None:
    """The last ``NAME=value`` (or ``NAME: value``) line, or NAME in the last JSON object
    on a line of its own, in ``output``."""
    found: float | None = None
    for line in output.splitlines():
        text = line.strip()
        if text.startswith("{") and text.endswith("}"):
            try:
                value = json.loads(text).get(name)
            except (ValueError, AttributeError, RecursionError):
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                try:
                    found = float(value)
                except OverflowError:  # an int past float's range: an infinity, judged bad
                    found = math.inf if value > 0 else -math.inf
            continue
        match = _METRIC_LINE.match(text)
        if match and match.group(1) == name:
            try:
                found = float(match.group(2))
            except ValueError:
                continue
    return found


@dataclass(frozen=True)
class Check:
    """How the user's command judges an environment."""

    argv: tuple[str, ...]
    timeout: float = 600.0
    metric: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    import_error_bad: bool = False  # set once the bad environment itself crashes on import


@dataclass(frozen=True)
class Verdict:
    """What one run of the check said: the result, the metric, and why when skipped (or
    the import error that made it bad)."""

    result: Result
    metric: float | None = None
    why: str | None = None


def judge(check: Check, code: int | None, output: str) -> Verdict:
    """good/bad by the exit status or the metric; skip when the command could not start,
    hit an import error (bad once ``import_error_bad``), timed out, exited 125 (git
    bisect's skip) or printed no metric."""
    if code is None:
        return Verdict("skip", why=output or "could not start")
    if code == 125:
        return Verdict("skip", why="exit 125")
    if _NO_SCRIPT.search(output):
        return Verdict("skip", why="no such script")
    crash = _IMPORT_ERROR.findall(output)
    if crash and code != 0:
        why = crash[-1].strip()[:200]
        return Verdict("bad" if check.import_error_bad else "skip", why=why)
    if check.metric is None:
        return Verdict("good" if code == 0 else "bad")
    value = metric_value(output, check.metric)
    if code != 0:
        return Verdict("bad", value, why=f"exit {code}")
    if value is None:
        return Verdict("skip", why=f"printed no {check.metric}")
    if not math.isfinite(value):
        # NaN (a loss that went NaN is the classic regression) or an infinity (a throughput
        # timed over zero seconds, 1e309): no measurement, whichever bound is set.
        return Verdict("bad", why=f"{check.metric} is {'NaN' if value != value else value}")
    if check.minimum is not None and value < check.minimum:
        return Verdict("bad", value)
    if check.maximum is not None and value > check.maximum:
        return Verdict("bad", value)
    return Verdict("good", value)


_OUTPUT_TAIL = 1 << 20


def run_check(check: Check, venv: Path, env: dict[str, str], cwd: Path) -> tuple[int | None, str]:
    """Run the command in ``venv`` (its bin first on PATH); (exit code or None, output).

    Output goes to a temporary file, not a pipe: a child the check left running (in a
    session of its own) could hold a pipe open for ever; the wait is for the process.
    When it ends, whatever it started goes too: its group, processes that carry its marker
    variable, and orphans envguard adopted as their subreaper (a daemon that left the
    session and cleared its environment; Linux). Only the last MiB of output is read."""
    import tempfile

    token, marker = new_marker()
    full = {
        **env,
        MARKER: token,
        "VIRTUAL_ENV": str(venv),
        "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', os.defpath)}",
    }
    with tempfile.TemporaryFile() as out:
        try:
            proc = start_child(
                list(check.argv),
                marker=marker,
                adopts=True,
                cwd=cwd,
                env=full,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        except OSError:
            return None, ""
        try:
            code: int | None = proc.wait(timeout=check.timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:  # also on Ctrl-C: the check and all it started go, in any session
            end_chain(proc, marker=marker, adopts=True)
            forget(proc.pid)
        size = out.seek(0, os.SEEK_END)
        out.seek(max(0, size - _OUTPUT_TAIL))
        text = out.read().decode("utf-8", "replace")
    return code, text if code is not None else "timed out"


@dataclass
class Step:
    """One build and run: which units were applied, what the command said."""

    units: list[str]
    result: Result
    metric: float | None
    seconds: float
    why: str | None = None  # why a skip was a skip (or the import error judged bad)
    logged: bool = False  # the answer of an earlier run (--resume), not built again
    # What the units held when it ran (Session.contents): a resumed answer is reused only
    # for the same packages under the same unit ids (another envguard may group them
    # otherwise, another bad snapshot holds other versions).
    contents: str | None = None


@dataclass
class BisectReport:
    """What bisect found; ``verdict`` is the sentence a person reads first."""

    good: str
    bad: str
    verdict: str
    culprits: list[dict[str, object]] = field(default_factory=list)
    units: list[dict[str, object]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    other_drift: list[str] = field(default_factory=list)  # every drifted item, every section
    complete: bool = True
    # culprits: the environment's changes named (today's code runs good in the good
    # environment); both: those and a commit (--repo); not_the_environment: shown innocent
    # (nothing drifted, the rebuilt bad environment runs good, or, with --repo, it runs good
    # at the snapshot's commit); outside_the_environment: the good environment runs bad
    # with today's code and, without --repo, the environment could not be tested on its
    # own; undecided: a run that decides could not be judged.
    outcome: Literal[
        "culprits", "both", "not_the_environment", "outside_the_environment", "undecided"
    ] = "undecided"
    commit: FirstBadCommit | None = None  # with --repo: the first bad commit
    installs: int = 0  # times the scratch venv was built (runs in one environment share it)
    log: str | None = None
    scratch: str | None = None  # the scratch venv, when --keep kept it
    schema: Literal["envguard.bisect"] = "envguard.bisect"
    schema_version: Literal[1] = 1

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @property
    def exit_code(self) -> int:
        """0 when bisect answered (and finished within its budget), else 1."""
        return 0 if self.complete and self.outcome != "undecided" else 1


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
        root = group.id.removeprefix("group:")
        gm, bm = self.good.package_map(), self.bad.package_map()
        out = []
        for name in group.packages:
            label = _change(name, _version(gm.get(name)), _version(bm.get(name)))
            label += "" if name == root else f", pulled in by {root}"
            unit = Unit(id=f"package:{name}", label=label, packages=(name,))
            out.append(self.by_id.setdefault(unit.id, unit))
        return out

    def affordable(self, ids: frozenset[str], max_steps: int) -> bool:
        """Whether judging ``ids`` fits the budget: a known answer is free."""
        return ids in self.known or self.runs < max_steps

    def crashes_on_import(self, step: Step) -> bool:
        """The bad environment crashed on import (judged skip): from now on that crash is
        the failure being hunted, so an import error is bad, here and in the log."""
        if step.result != "skip" or not step.why or not _IMPORT_ERROR.match(step.why):
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


def bisect(session: Session, *, max_steps: int, repo: Path | None = None) -> BisectReport:
    """The good environment with today's code first: when it runs good, ddmin over the
    units; when it runs bad, the code (or something else outside the environment) is a
    cause, and with ``repo`` both axes are tested apart, the drifted environment at the
    snapshot's commit and the commits in the good environment, so a guilty environment is
    never cleared by a guilty commit."""
    from envguard.compare.engine import diff
    from envguard.compare.policy import Policy

    good, bad = session.good, session.bad
    report = BisectReport(
        good=good.name,
        bad=bad.name,
        verdict="",
        units=[_unit_json(u) for u in session.all],
        other_drift=[c.message for c in diff(good, bad, Policy()).changes],
        log=str(session.log),
    )
    first = session.test(frozenset())
    if first == "skip":
        report.verdict = (
            f"the good snapshot's environment cannot run the command (skip:"
            f" {session.steps[-1].why}): fix the command first"
        )
    elif first == "bad" and repo is None:
        report.outcome = "outside_the_environment"
        report.verdict = (
            "the good snapshot's exact environment runs bad with today's code: a cause is"
            " outside the packages and variables (the code, files, data); the environment"
            " itself was not tested apart from the code: --repo tests it at the snapshot's"
            " commit and bisects the commits"
        )
        if not session.all:
            report.outcome = "not_the_environment"
            report.verdict = (
                "no package or variable drifted, and the good snapshot's exact environment"
                " runs bad with today's code: the environment is not the cause; look at the"
                " code (--repo bisects its commits), files, data"
            )
    elif first == "bad":
        assert repo is not None
        _both_axes(session, report, repo, max_steps=max_steps)
    elif not session.all:
        report.verdict = "no package or variable drifted: the environment is not the cause"
        report.outcome = "not_the_environment"
    else:
        _environment(session, report, max_steps=max_steps)
    _unreproduced(report, good, bad)
    report.steps = session.steps
    report.installs = session.installs
    return report


# Installed-file drift: bytes that no build from pins reproduces (an edit in site-packages,
# a library another package overwrote, a stray .pth).
_FILE_KINDS = frozenset(
    {"modified_in_place", "files_missing", "files_added", "clobbered", "owner_changed",
     "clash", "unowned_added"}
)  # fmt: skip


def _unreproduced(report: BisectReport, good: Snapshot, bad: Snapshot) -> None:
    """Never clear an environment whose installed files differ from what its packages
    installed: every run is a build from pins, which leaves those differences out."""
    from envguard.compare.engine import diff
    from envguard.compare.policy import Policy, only_sections

    found = [
        c.message
        for c in diff(good, bad, only_sections(Policy(), ("installed",))).changes
        if c.kind in _FILE_KINDS
    ]
    if not found:
        return
    said = "; ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    note = (
        f"the bad environment's installed files differ from what its packages installed,"
        f" which no bisect run reproduces (each is a build from pins): {said}; `envguard"
        " restore` puts them back, then run the check again"
    )
    if report.outcome == "not_the_environment":
        report.outcome = "undecided"
        report.verdict = (
            "the packages and variables are not the cause, "
            + report.verdict.removeprefix(_NOT_THE_CAUSE)
            + "; but "
            + note
        )
    else:
        report.verdict += "; also: " + note


_NOT_THE_CAUSE = "the environment is not the cause; "


def _unit_json(unit: Unit) -> dict[str, object]:
    return {"id": unit.id, "label": unit.label, "packages": list(unit.packages)}


def _environment(session: Session, report: BisectReport, *, max_steps: int) -> None:
    """The good environment runs good with today's code: which units make it bad."""
    every = frozenset(u.id for u in session.all)
    last = session.test(every)
    crash = ""
    if session.crashes_on_import(session.known[every]):
        last = "bad"
        crash = f"the bad environment crashes on import ({session.known[every].why}); "
    if last != "bad":
        why = session.known[every].why
        report.verdict = (
            f"the bad environment, rebuilt, runs {last}: the failure is not in the packages"
            " or variables (look at files, caches, the driver, the code)"
            if last == "good"
            else f"the bad environment, rebuilt, could not be judged (skip: {why}): see the"
            " log, or judge by exit status"
        )
        if last == "good":
            report.outcome = "not_the_environment"
        return
    found, report.complete = _narrow(session, frozenset(), max_steps=max_steps)
    report.outcome = "culprits"
    report.culprits = [_unit_json(u) for u in found]
    report.verdict = crash + _named(found, report.complete, of=len(session.all), limit=max_steps)


def _narrow(
    session: Session, at: frozenset[str], *, max_steps: int, cwd: Callable[[], Path] | None = None
) -> tuple[list[Unit], bool]:
    """ddmin over the units, each run with ``at`` (a commit's key) added to its step and in
    the folder ``cwd`` gives (a worktree checked out there), or the user's folder. Then,
    while the budget lasts, within each guilty install's group: a check keyed on one of
    the packages it pulled in names that package, not the install and all it pulled in."""

    def test(ids: frozenset[str]) -> Result:
        return session.test(ids | at, cwd=cwd() if cwd else None)

    def affordable(ids: frozenset[str]) -> bool:
        return session.affordable(ids | at, max_steps)

    def within(group: Unit, others: frozenset[str]) -> list[Unit]:
        parts = session.parts(group)
        inner, done = ddmin(
            parts,
            lambda ids: test(ids | others),  # the other culprits: still needed to be bad
            affordable=lambda ids: affordable(ids | others),
        )
        return inner if done and len(inner) < len(parts) else [group]

    found, complete = ddmin(session.all, test, affordable=affordable)
    if not complete:
        return found, False
    out: list[Unit] = []
    for unit in found:
        others = frozenset(u.id for u in found if u is not unit)
        out.extend(within(unit, others) if unit.id.startswith("group:") else [unit])
    return out, True


def _named(found: Sequence[Unit], complete: bool, *, of: int, limit: int) -> str:
    """The culprit units as the verdict says them."""
    if complete:
        together = " together" if len(found) > 1 else ""
        return f"it is{together}: " + "; ".join(u.label for u in found)
    shown = "; ".join(u.label for u in found[:3])
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return (
        f"not narrowed down within {limit} runs: {len(found)} of {of}"
        f" changes still suspected ({shown}{more})"
    )


def _both_axes(session: Session, report: BisectReport, repo: Path, *, max_steps: int) -> None:
    """The good environment runs bad with today's code: the code is a cause. Its first bad
    commit is searched in the good environment; whether the environment is a cause too is
    decided by running the drifted environment at the snapshot's commit (a run kept in
    the budget for it), and when it is, its units are searched at that commit."""
    good_head = commits.recorded_head(session.good, repo)
    unclean = " (uncommitted changes are not tested)" if commits.dirty(repo) else ""
    todo = commits.since(repo, good_head)
    at = frozenset({commits.key(good_head)})
    with commits.worktree(repo, good_head) as tree:

        def at_good() -> Path:
            return tree.checkout(good_head)

        base = session.test(at, cwd=at_good())
        if base == "skip":
            report.verdict = (
                f"the good environment at the snapshot's own commit {good_head[:12]} could"
                f" not be judged (skip: {session.known[at].why}): fix the command first"
            )
            return
        if base == "bad":
            report.verdict = (
                f"the good environment at the snapshot's own commit {good_head[:12]} runs"
                " bad too: neither the environment nor the code since explains the failure;"
                " look at data, hardware or nondeterminism"
            )
            return
        # The commits first: they run in the good environment, already built. With
        # uncommitted changes, HEAD is not known bad (today's code was): it is run first.
        if unclean and todo and _run_at(session, tree, todo[-1]) == "good":
            todo = []  # the committed code is good: the uncommitted changes are the cause
        reserve = 1 if session.all else 0
        code = _first_bad_commit(session, tree, todo, max_steps=max_steps - reserve)
        report.commit = code
        env = "good"  # nothing drifted: innocent without a run
        every = frozenset(u.id for u in session.all)
        if every:
            env = session.test(every | at, cwd=at_good())
            if session.crashes_on_import(session.known[every | at]):
                env = "bad"
        if code is None:
            said = (
                "the uncommitted changes in the checkout (its committed code runs good in"
                " the good environment)"
                if unclean
                else "the repo is at the snapshot's commit, which runs good in a worktree:"
                " look at what else differs in the folder bisect ran from"
            )
        else:
            where = "" if code.exact else f" (after {max_steps} runs, somewhere up to)"
            said = f"the first bad commit{where}: {code.short} {code.subject}{unclean}"
            said += _unjudged(code)
        report.complete = code is None or code.exact
        if env == "good":
            report.outcome = "not_the_environment"
            report.verdict = (
                _NOT_THE_CAUSE
                + (
                    "nothing in its packages or variables drifted"
                    if not every
                    else "the drifted environment runs good at the snapshot's commit"
                    f" {good_head[:12]}"
                )
                + f"; {said}"
            )
            return
        if env == "skip":
            report.verdict = (
                f"{said}; whether the environment is a cause too is undecided: at the"
                f" snapshot's commit it could not be judged (skip: {session.known[every | at].why})"
            )
            report.complete = False
            return
        found, complete = _narrow(session, at, max_steps=max_steps, cwd=at_good)
    report.complete = report.complete and complete
    report.outcome = "both"
    report.culprits = [_unit_json(u) for u in found]
    labels = "; ".join(u.label for u in found) + (", together" if len(found) > 1 else "")
    envs = (
        f"the environment ({labels})"
        if complete
        else f"the environment ({_named(found, complete, of=len(session.all), limit=max_steps)})"
    )
    if code is not None:
        where = "" if code.exact else f" (or one before it: {max_steps} runs ran out)"
        said = f"commit {code.short} '{code.subject}'{where}{unclean}{_unjudged(code)}"
    report.verdict = (
        f"two causes: {envs} and {said} (the drifted environment runs bad at the snapshot's"
        f" commit {good_head[:12]}; the good environment runs bad with today's code)"
    )


def _unjudged(code: FirstBadCommit) -> str:
    n = code.skipped
    return f" (or one of the {n} commits before it that could not be judged)" if n else ""


def _run_at(session: Session, tree: Worktree, commit: str) -> Result:
    """The good environment's run at ``commit``."""
    return session.test(frozenset({commits.key(commit)}), cwd=tree.checkout(commit))


def _first_bad_commit(
    session: Session, tree: Worktree, todo: list[str], *, max_steps: int
) -> FirstBadCommit | None:
    """The first commit of ``todo`` that runs bad in the good environment (the last is
    known bad: the good environment runs bad with today's code)."""
    if not todo:
        return None
    culprit, exact, skipped = commits.first_bad(
        todo,
        lambda commit: _run_at(session, tree, commit),
        affordable=lambda c: session.affordable(frozenset({commits.key(c)}), max_steps),
    )
    short, _, subject = tree.subject(culprit).partition(" ")
    return FirstBadCommit(sha=culprit, short=short, subject=subject, exact=exact, skipped=skipped)


_OPERATORS = frozenset({"|", "||", "&&", ";", "&", ">", ">>", "<", "<<", "2>", "2>&1", "&>"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def _shell_syntax(argv: Sequence[str]) -> str | None:
    """The first word of ``argv`` that only a shell would understand (a pipe, a
    redirection, ``$(...)``, a leading ``VAR=value``), or None."""
    if _ASSIGNMENT.match(argv[0]):
        return argv[0].split("=", 1)[0] + "=..."
    for word in argv:
        if word in _OPERATORS or word.startswith((">", "2>", "$(", "`")) or word.endswith(";"):
            return word
    return None


def check_from(
    run: str, *, shell: bool, timeout: float, metric: str | None,
    minimum: float | None, maximum: float | None,
) -> Check:  # fmt: skip
    """The Check for --run (no shell unless --shell), --metric and --min/--max."""
    from envguard.tools import split_command

    if (minimum is not None or maximum is not None) and metric is None:
        raise UsageError("--min/--max need --metric NAME")
    if metric is not None and minimum is None and maximum is None:
        raise UsageError(f"--metric {metric}: say what is good with --min X or --max X")
    argv = ("sh", "-c", run) if shell else split_command(run, option="--run")
    if not shell:
        syntax = _shell_syntax(argv)
        if syntax:
            raise UsageError(
                f"--run: {syntax!r} is shell syntax, and the command runs without a shell",
                hint="pass --shell to run it through sh -c",
            )
    if not 0 < timeout <= 1e6:  # also NaN and infinity
        raise UsageError(f"--timeout {timeout:g}: seconds, more than 0 and at most 1e6")
    for option, value in (("--min", minimum), ("--max", maximum)):
        if value is not None and value != value:
            raise UsageError(f"{option} nan: a number")
    return Check(argv=tuple(argv), timeout=timeout, metric=metric, minimum=minimum, maximum=maximum)


def failed_build(exc: ActionError) -> ActionError:
    return ActionError(f"a candidate environment did not build: {exc.message}", hint=exc.hint)
