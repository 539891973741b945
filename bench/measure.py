"""Timing for bench/run.py: commands run side by side, medians, targets and the report table."""

from __future__ import annotations

import os
import shlex
import statistics
import subprocess
import time
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Steps = Callable[[int], Sequence[Sequence[str]]]


class BenchError(Exception):
    """A command under measurement failed: its row reports the error instead of a time."""


@dataclass(frozen=True)
class Command:
    """One thing to time: one or more argv steps run in sequence as a single sample.

    ``steps(i)`` gives the argv lists of run ``i`` (-1 for the untimed warm-up), so a run can
    write to a fresh directory; ``cleanup(i)`` runs after the clock stops.
    """

    label: str
    steps: Steps
    cwd: Path
    env: Mapping[str, str]
    stdin: str | None = None
    ok: Container[int] = (0,)
    max_repeats: int | None = None
    warmup: bool = True
    cleanup: Callable[[int], None] | None = None


def static(
    label: str,
    *argvs: Sequence[str],
    cwd: Path,
    env: Mapping[str, str],
    stdin: str | None = None,
    ok: Container[int] = (0,),
    max_repeats: int | None = None,
) -> Command:
    """A command whose argv is the same on every run."""
    steps = [list(a) for a in argvs]
    return Command(label, lambda _i: steps, cwd, env, stdin=stdin, ok=ok, max_repeats=max_repeats)


@dataclass
class Timing:
    """Wall-clock samples of one command, in seconds."""

    label: str
    samples: list[float] = field(default_factory=list)
    error: str | None = None
    rss: list[float] = field(default_factory=list)  # peak RSS of each run, MiB

    @property
    def median(self) -> float | None:
        return statistics.median(self.samples) if self.samples and not self.error else None

    @property
    def median_rss(self) -> float | None:
        return statistics.median(self.rss) if self.rss and not self.error else None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def run_once(cmd: Command, i: int, rss: list[float] | None = None) -> float:
    """Run every step of ``cmd`` once; the wall time from the first start to the last exit
    (and the largest peak RSS of a step, in MiB, appended to ``rss``)."""
    import tempfile

    steps = [list(argv) for argv in cmd.steps(i)]  # built before the clock starts
    start = time.perf_counter()
    for argv in steps:
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(
                argv,
                cwd=cmd.cwd,
                env=dict(cmd.env),
                stdin=subprocess.PIPE if cmd.stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
            if cmd.stdin is not None:
                assert proc.stdin is not None
                proc.stdin.write(cmd.stdin.encode())
                proc.stdin.close()
            proc.wait()
            if proc.returncode not in cmd.ok:
                err.seek(0)
                said = err.read().decode("utf-8", "replace")
                raise BenchError(
                    f"{shlex.join(argv)[:200]} exited {proc.returncode}: {_last_line(said)}"
                )
    elapsed = time.perf_counter() - start
    if rss is not None and len(steps) == 1:
        # Peak RSS from GNU time in a run of its own: a child forked from this (large)
        # process counts the parent's pages until it execs, so wait4's figure is wrong.
        peak = _peak_rss(cmd, steps[0])
        if peak is not None:
            rss.append(peak)
    if cmd.cleanup is not None:
        cmd.cleanup(i)
        os.sync()  # flush what the cleanup freed now, not during the next sample
    return elapsed


def _peak_rss(cmd: Command, argv: list[str]) -> float | None:
    """Peak RSS of ``argv`` in MiB (GNU time's %M), or None without /usr/bin/time."""
    import tempfile

    if not os.path.exists("/usr/bin/time"):
        return None
    with tempfile.NamedTemporaryFile("r") as out:
        subprocess.run(
            ["/usr/bin/time", "-o", out.name, "-f", "%M", *argv],
            cwd=cmd.cwd,
            env=dict(cmd.env),
            input=cmd.stdin.encode() if cmd.stdin is not None else None,
            stdin=subprocess.DEVNULL if cmd.stdin is None else None,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        text = out.read().strip().splitlines()
    return int(text[-1]) / 1024 if text and text[-1].isdigit() else None


def measure(
    commands: Sequence[Command], repeats: int, *, log: Callable[[str], None]
) -> dict[str, Timing]:
    """Warm every command up once, then time them round-robin so they share the conditions."""
    timings = {c.label: Timing(c.label) for c in commands}
    for cmd in commands:
        if cmd.warmup:
            log(f"  warm-up: {cmd.label}")
            try:
                run_once(cmd, -1)
            except BenchError as exc:
                timings[cmd.label].error = str(exc)
    for r in range(repeats):
        for cmd in commands:
            timing = timings[cmd.label]
            if timing.error or (cmd.max_repeats is not None and r >= cmd.max_repeats):
                continue
            try:
                once = r == 0 and cmd.cleanup is None  # peak RSS: one extra run, untimed
                timing.samples.append(run_once(cmd, r, timing.rss if once else None))
            except BenchError as exc:
                timing.error = str(exc)
        log(f"  round {r + 1}/{repeats} done")
    return timings


def measure_call(label: str, fn: Callable[[], object], repeats: int) -> Timing:
    """Time an in-process call: one warm-up, then ``repeats`` samples."""
    timing = Timing(label)
    fn()
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        timing.samples.append(time.perf_counter() - start)
    return timing


Kind = Literal["ratio_at_most", "faster_by", "seconds_under", "mib_under"]


@dataclass(frozen=True)
class Target:
    """A goal: envguard/peer at most ``limit``x, peer/envguard at least ``limit``x, or under
    ``limit`` seconds."""

    group: str
    what: str
    subject: str
    peer: str | None
    kind: Kind
    limit: float


@dataclass(frozen=True)
class Row:
    what: str
    subject: str
    peer: str
    ratio: str
    goal: str
    verdict: str


def fmt_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _with_n(timing: Timing | None) -> str:
    if timing is None:
        return "-"
    if timing.error:
        return "ERROR"
    n = len(timing.samples)
    return f"{fmt_seconds(timing.median)} (n={n})"


def evaluate(target: Target, timings: Mapping[str, Timing]) -> Row:
    """The report row of one target."""
    subject = timings.get(target.subject)
    peer = timings.get(target.peer) if target.peer else None
    s = subject.median if subject else None
    p = peer.median if peer else None
    if target.kind == "mib_under":
        m = subject.median_rss if subject else None
        goal = f"<= {target.limit:g} MiB"
        verdict = "ERROR" if m is None else ("PASS" if m <= target.limit else "FAIL")
        return Row(target.what, "-" if m is None else f"{m:.1f} MiB", "-", "-", goal, verdict)
    if target.kind == "seconds_under":
        goal = f"< {fmt_seconds(target.limit)}"
        verdict = "ERROR" if s is None else ("PASS" if s < target.limit else "FAIL")
        return Row(target.what, _with_n(subject), "-", "-", goal, verdict)
    if s is None or p is None or p == 0:
        ratio, verdict = "-", "ERROR"
    elif target.kind == "ratio_at_most":
        ratio = f"{s / p:.2f}x"
        verdict = "PASS" if s / p <= target.limit else "FAIL"
    else:
        ratio = f"{s / p:.3f}x ({p / s:.1f}x faster)"
        verdict = "PASS" if p / s >= target.limit else "FAIL"
    goal = (
        f"<= {target.limit:g}x"
        if target.kind == "ratio_at_most"
        else f">= {target.limit:g}x faster (<= {1 / target.limit:.3f}x)"
    )
    return Row(target.what, _with_n(subject), _with_n(peer), ratio, goal, verdict)


HEADER = ("target", "envguard median", "peer median", "envguard/peer", "goal", "result")


def _cells(row: Row) -> tuple[str, ...]:
    return (row.what, row.subject, row.peer, row.ratio, row.goal, row.verdict)


def text_table(rows: Sequence[Row]) -> str:
    """A plain-text table, columns padded to fit."""
    cells = [HEADER, *(_cells(r) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(len(HEADER))).rstrip() for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(rows: Sequence[Row]) -> str:
    """The same table in Markdown, for docs/benchmarks.md."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    for row in rows:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in _cells(row)) + " |")
    return "\n".join(lines)


def timings_table(timings: Sequence[Timing]) -> str:
    """Every command measured: median, min, max and the sample count (or its error)."""
    lines = []
    for t in timings:
        if t.error:
            lines.append(f"  {t.label}: ERROR {t.error}")
        elif t.samples:
            lines.append(
                f"  {t.label}: median {fmt_seconds(t.median)}, min {fmt_seconds(min(t.samples))},"
                f" max {fmt_seconds(max(t.samples))}, n={len(t.samples)}"
            )
    return "\n".join(lines)
