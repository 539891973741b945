"""envguard benchmarks: wall-time ratios against peer tools measured side by side in one run.

    .venv/bin/python bench/run.py [--quick] [--repeats N] [--only GROUP] [--markdown]

Builds its fixtures (a ~300-distribution venv with real torch is cached in bench/.cache),
times every command as a subprocess, round-robin, and prints the medians, the ratio against
each peer and PASS/FAIL per target. It is a report: it exits 0 whatever the results.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import fixtures
from fixtures import CACHE, FixtureError, Tools, TorchVenv
from measure import (
    Command,
    Target,
    Timing,
    evaluate,
    markdown_table,
    measure,
    measure_call,
    static,
    text_table,
    timings_table,
)

T = TypeVar("T")
GROUPS = ("inspect", "walk", "diff", "rebuild", "fleet")
PROBE_ARGS = {"files": [], "caches": [], "default_caches": False}


def probe_command(python: str, args: dict[str, object]) -> tuple[list[str], str]:
    """(argv, stdin) that run the probe exactly as envguard.probe.runner does."""
    from envguard.probe.payload import probe_payload
    from envguard.probe.runner import probe_argv

    return probe_argv(python), probe_payload(args)


def walk_command(python: str, tree: Path) -> tuple[list[str], str]:
    """The probe's delivery (`python -I -S -`, the target package installed from stdin)
    calling only walk_tree(): interpreter start-up and the probe's imports are counted, the
    package scan is not."""
    from envguard.probe.payload import LOADER, install_call

    # The probe's modules, with their compiled code from the user's cache, as a probe has.
    program = (
        "import sys, time\n"
        + LOADER
        + install_call("main", "pkg")
        + "_t = time.perf_counter()\n"
        + f"_walked = pkg.trees.walk_tree({str(tree)!r})\n"
        # Its own time too: what a snapshot's probe, already started, pays for the walk.
        + "_walked['walk_seconds'] = time.perf_counter() - _t\n"
        + "sys.stdout.write(__import__('json').dumps(_walked))\n"
    )
    return [python, "-I", "-S", "-"], program


# Importing typer and pydantic and defining one deferred frozen model: the import floor.
FLOOR = (
    "import typer, typer.main, typer.core\n"
    "from pydantic import BaseModel, ConfigDict, Field, StrictInt, StringConstraints\n"
    "class Floor(BaseModel):\n"
    "    model_config = ConfigDict(frozen=True, extra='forbid', defer_build=True)\n"
    "    x: int = 1\n"
)

TARGETS = (
    Target("inspect", "probe alone vs uv pip freeze", "probe", "uv pip freeze", "ratio_at_most", 2),
    Target(
        "inspect",
        "snapshot vs uv pip freeze",
        "envguard snapshot",
        "uv pip freeze",
        "ratio_at_most",
        10,
    ),
    Target("inspect", "snapshot vs pip freeze", "envguard snapshot", "pip freeze", "faster_by", 3),
    Target(
        "inspect",
        "snapshot vs torch collect_env",
        "envguard snapshot",
        "collect_env",
        "faster_by",
        20,
    ),
    Target("inspect", "envguard --help", "envguard --help", None, "seconds_under", 0.100),
    Target(
        "inspect",
        "diff (live) vs uv pip freeze",
        "envguard diff",
        "uv pip freeze",
        "ratio_at_most",
        10,
    ),
    Target("inspect", "peak RSS of snapshot", "envguard snapshot", None, "mib_under", 30),
    Target("walk", "walk 20,000 files vs du -sb", "walk_tree", "du -sb", "ratio_at_most", 2),
    Target("diff", "diff 2 x 5,000 packages in-process", "diff()", None, "seconds_under", 0.050),
    Target(
        "rebuild",
        "rebuild vs uv venv + uv pip sync",
        "envguard rebuild",
        "uv sync",
        "ratio_at_most",
        1.3,
    ),
    Target("fleet", "fleet of 1,000 x 400 packages", "envguard fleet", None, "seconds_under", 3.0),
    Target(
        "fleet",
        "capture 64 hosts, --jobs 16, vs the sum of their latencies",
        "envguard snapshot --hosts",
        "sum of host latencies",
        "ratio_at_most",
        0.25,
    ),
    Target(
        "rebuild",
        "rebuild vs venv + pip install",
        "envguard rebuild",
        "pip install",
        "faster_by",
        30,
    ),
)


class Report:
    """Progress on stderr; timings and notes for the final table."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.load_start = os.getloadavg()[0]
        self.timings: dict[str, Timing] = {}
        self.notes: list[str] = []

    def log(self, message: str) -> None:
        sys.stderr.write(f"[{time.perf_counter() - self.start:6.1f}s] {message}\n")
        sys.stderr.flush()

    def fail(self, group: str, exc: Exception) -> None:
        self.notes.append(f"{group}: not measured: {exc}")
        self.log(f"{group}: not measured: {exc}")


def _output(argv: list[str], stdin: str, env: dict[str, str], cwd: Path) -> str:
    """The stdout of a measured command, run once to check that it does the work."""
    proc = subprocess.run(argv, input=stdin, env=env, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise FixtureError(f"{argv[0]} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return proc.stdout


def write_snapshot(tools: Tools, tv: TorchVenv, work: Path, report: Report) -> Path:
    """The venv's snapshot, in a snapshots/ folder, for `diff` and `rebuild`."""
    env = fixtures.bench_env(work, tools)
    snap = work / "snapshots" / "good.json"
    warmed = fixtures.warm_probe_caches(tools.envguard, tv.venv, env=env, cwd=work)
    report.notes.append(f"the probe's caches of the venv were warm after {warmed} snapshots")
    argv = [tools.envguard, "snapshot", "--python", str(tv.venv), "--out", str(snap)]
    fixtures.run(argv, env=env, cwd=work)
    check = subprocess.run(
        [tools.envguard, "diff", str(snap), "--python", str(tv.venv)],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
    )
    report.notes.append(
        f"`envguard diff` of the venv against its own snapshot exits {check.returncode}"
    )
    return snap


def inspect_group(
    tools: Tools, tv: TorchVenv, snap: Path, work: Path, repeats: int, report: Report
) -> None:
    """Reading the 300-distribution venv: probe, snapshot, diff, --help and their peers."""
    env = fixtures.bench_env(work, tools)
    python, venv = str(tv.venv / "bin" / "python"), str(tv.venv)
    probe_argv, probe_stdin = probe_command(python, PROBE_ARGS)
    probed = json.loads(_output(probe_argv, probe_stdin, env, work))
    report.notes.append(f"the probe alone reports {len(probed['packages'])} distributions")
    commands = [
        static("probe", probe_argv, stdin=probe_stdin, cwd=work, env=env),
        static("uv pip freeze", [tools.uv, "pip", "freeze", "--python", venv], cwd=work, env=env),
        static("pip freeze", [python, "-m", "pip", "freeze"], cwd=work, env=env),
        static(
            "envguard snapshot",
            [tools.envguard, "snapshot", "--python", venv, "--out", "-"],
            cwd=work,
            env=env,
        ),
        static(
            "envguard diff",
            [tools.envguard, "diff", str(snap), "--python", venv],
            ok=(0, 1),
            cwd=work,
            env=env,
        ),
        static("envguard --help", [tools.envguard, "--help"], cwd=work, env=env),
        # Not envguard: what any command written with its chosen libraries pays before it
        # does anything (the floor under `diff`, whose models are pydantic's).
        static("typer + pydantic floor", [sys.executable, "-c", FLOOR], cwd=work, env=env),
        static(
            "collect_env",
            [python, "-m", "torch.utils.collect_env"],
            max_repeats=min(repeats, 3),
            cwd=work,
            env=env,
        ),
    ]
    report.timings.update(measure(commands, repeats, log=report.log))
    floor, uv = report.timings["typer + pydantic floor"].median, report.timings["uv pip freeze"]
    if floor and uv.median:
        report.notes.append(
            f"importing typer and pydantic (one model defined, nothing else): {floor * 1000:.1f}"
            f" ms, {floor / uv.median:.2f}x uv pip freeze: the floor under a live diff that"
            " runs the engine (a clean answer told again imports typer alone: compare.identical)"
        )


def walk_group(tools: Tools, python: Path, work: Path, repeats: int, report: Report) -> None:
    """Walking a 20,000-file compile cache: the probe's walk_tree vs du -sb."""
    tree = work / "compile-cache"
    files = fixtures.compile_cache(tree)
    report.notes.append(f"compile cache fixture: {files} files in 220 directories")
    env = fixtures.bench_env(work, tools)
    walk_argv, walk_stdin = walk_command(str(python), tree)
    walked = json.loads(_output(walk_argv, walk_stdin, env, work))
    report.notes.append(f"walk_tree counted {walked['files']} files, {walked['bytes']} bytes")
    commands = [
        static("walk_tree", walk_argv, stdin=walk_stdin, cwd=work, env=env),
        static("du -sb", ["du", "-sb", str(tree)], cwd=work, env=env),
    ]
    report.timings.update(measure(commands, repeats, log=report.log))
    inside = statistics.median(
        json.loads(_output(walk_argv, walk_stdin, env, work))["walk_seconds"]
        for _ in range(repeats)
    )
    du = report.timings["du -sb"].median
    report.notes.append(
        f"walk_tree's own time inside the probe (start-up and imports left out): "
        f"{inside * 1000:.1f} ms" + (f", {inside / du:.2f}x du -sb" if du else "")
    )


def diff_group(repeats: int, report: Report) -> None:
    """envguard.compare.engine.diff() on two synthetic 5,000-package snapshots, in process."""
    from envguard.compare.engine import diff

    expected, actual = fixtures.snapshot_pair(5000, 0.05)
    changes = len(diff(expected, actual).changes)
    report.notes.append(f"in-process diff: 5,000 packages, {changes} changes found")
    report.timings["diff()"] = measure_call("diff()", lambda: diff(expected, actual), repeats)


def fleet_group(tools: Tools, work: Path, repeats: int, report: Report) -> None:
    """`envguard fleet` over 1,000 snapshots; parallel capture of 64 fake ssh hosts."""
    folder = work / "fleet"
    fixtures.fleet_snapshots(folder)
    env = fixtures.bench_env(work, tools)
    fleet = static(
        "envguard fleet",
        [tools.envguard, "fleet", str(folder), "--format", "json"],
        cwd=work,
        env=env,
        ok=(1,),
    )
    found = subprocess.run(
        [tools.envguard, "fleet", str(folder), "--format", "json"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    odd = json.loads(found.stdout)["odd_hosts"]  # exit 1: the hosts disagree, as built
    report.notes.append(f"fleet: 1,000 snapshots, odd ones out found: {', '.join(odd)}")
    bindir, slowest, total = fixtures.fake_ssh(work / "fake-bin", 64)
    hosts = ",".join(f"node{i}" for i in range(64))
    ssh_env = {**env, "PATH": f"{bindir}:{env['PATH']}"}
    # Each "host" is this machine: a bare venv keeps each probe's CPU small, so the 2 cores
    # do not hide what is measured here (waiting on 64 hosts 16 at a time).
    tiny = work / "tiny-venv"
    subprocess.run(
        [tools.uv, "venv", "--quiet", "--python", str(tools.base_python), str(tiny)],
        env=env,
        check=True,
    )
    python = str(tiny / "bin" / "python")

    def capture_steps(i: int) -> list[list[str]]:
        return [
            [
                tools.envguard,
                "snapshot",
                "--via",
                "ssh {host}",
                "--python",
                python,
                "--hosts",
                hosts,
                "--jobs",
                "16",
                "--name",
                f"run{i + 1}",
            ]
        ]

    capture = Command("envguard snapshot --hosts", capture_steps, work, ssh_env)
    report.timings.update(measure([fleet, capture], repeats, log=report.log))
    # Not run: what one-at-a-time capture would cost in latency alone (a floor for it).
    report.timings["sum of host latencies"] = Timing("sum of host latencies", [total])
    report.notes.append(
        f"fleet capture: 64 fake ssh hosts, latencies 0.05-{slowest:.2f} s (sum {total:.1f} s),"
        " each probing a bare venv on this machine; all 64 probes share its 2 cores"
    )


def _plan(
    tools: Tools, snap: Path, args: list[str], env: dict[str, str], work: Path
) -> dict[str, Any]:
    """The plan `envguard rebuild` prints (as JSON) without executing it."""
    out = fixtures.run(
        [
            tools.envguard,
            "rebuild",
            str(snap),
            "--venv",
            str(work / "plan-check"),
            "--format",
            "json",
            *args,
        ],
        env=env,
        cwd=work,
    )
    plan: dict[str, Any] = json.loads(out)
    return plan


def rebuild_group(
    tools: Tools, tv: TorchVenv, snap: Path, work: Path, repeats: int, report: Report
) -> None:
    """Recreating the venv with a warm uv cache: envguard rebuild vs raw uv vs pip."""
    from envguard.recovery.plan import DEFAULT_TORCH_INDEX

    env = fixtures.bench_env(work, tools)
    scratch = Path(tempfile.mkdtemp(prefix="scratch-", dir=CACHE))  # beside the uv cache
    try:
        source = ["--no-index", "--find-links", str(tv.wheelhouse), "--offline"]
        default = _plan(tools, snap, source, env, work)
        routed = [s for s in default["steps"] if DEFAULT_TORCH_INDEX in " ".join(s.get("argv", ()))]
        if routed:
            index = fixtures.torch_index(work / "torch-index", tv.torch_wheel)
            source += ["--torch-index", index]
            report.notes.append(
                f"the plan routes torch to {DEFAULT_TORCH_INDEX} ({routed[0]['purpose']});"
                f" the benchmark passes --torch-index {index}, a local PEP 503 index"
            )
        else:
            report.notes.append("the plan installs torch from the wheelhouse with everything else")
        request = default["python"]
        requirements = work / "requirements.txt"
        requirements.write_text(
            fixtures.run([tools.uv, "pip", "freeze", "--python", str(tv.venv)], env=env)
        )

        def target(kind: str, i: int) -> Path:
            return scratch / f"{kind}-{'warm' if i < 0 else i}"

        def cleanup(kind: str) -> Callable[[int], None]:
            def clean(i: int) -> None:
                for path in scratch.glob(f"*{target(kind, i).name}*"):
                    shutil.rmtree(path, ignore_errors=True)

            return clean

        envguard_cmd = Command(
            "envguard rebuild",
            lambda i: [
                [
                    tools.envguard,
                    "rebuild",
                    str(snap),
                    "--venv",
                    str(target("eg", i)),
                    "--execute",
                    *source,
                ]
            ],
            cleanup=cleanup("eg"),
            cwd=work,
            env=env,
        )
        uv_cmd = Command(
            "uv sync",
            lambda i: [
                [tools.uv, "venv", "--quiet", "--python", request, str(target("uv", i))],
                [
                    tools.uv, "pip", "sync", "--python", str(target("uv", i)), str(requirements),
                    "--no-index", "--find-links", str(tv.wheelhouse), "--offline",
                ],
            ],
            cleanup=cleanup("uv"),
            cwd=work, env=env,
        )  # fmt: skip
        pip_cmd = Command(
            "pip install",
            lambda i: [
                [str(tools.base_python), "-m", "venv", str(target("pip", i))],
                [
                    str(target("pip", i) / "bin" / "pip"), "install", "--quiet", "--no-index",
                    "--find-links", str(tv.wheelhouse), "-r", str(requirements),
                ],
            ],
            cleanup=cleanup("pip"),
            max_repeats=1,  # minutes per run
            warmup=False,
            cwd=work, env=env,
        )  # fmt: skip
        report.timings.update(measure([envguard_cmd, uv_cmd, pip_cmd], repeats, log=report.log))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def attempt(report: Report, group: str, fn: Callable[[], T]) -> T | None:
    """``fn()``, or None with the error noted: one broken group must not hide the others."""
    try:
        return fn()
    except Exception as exc:
        if not isinstance(exc, FixtureError):
            traceback.print_exc()
        report.fail(group, exc)
        return None


def machine(tools: Tools, tv: TorchVenv | None, report: Report) -> list[str]:
    from envguard import __version__

    uv_version = subprocess.run([tools.uv, "--version"], capture_output=True, text=True).stdout
    return [
        f"date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"machine: {platform.system()} {platform.machine()}, {os.cpu_count()} cores,"
        f" Python {platform.python_version()} ({tools.base_python}); 1-minute load average"
        f" {report.load_start:.2f} at the start, {os.getloadavg()[0]:.2f} at the end",
        f"envguard {__version__}, {uv_version.strip()}",
        f"venv: {tv.distributions} distributions, torch {fixtures.TORCH} ({tv.torch_wheel.name})"
        if tv
        else "venv: not built",
    ]


def _given_venv(tools: Tools, venv: Path) -> TorchVenv:
    """A venv named on the command line, byte-compiled (as real_venv is) and counted."""
    fixtures.compile_site(venv)
    freeze = fixtures.run([tools.uv, "pip", "freeze", "--python", str(venv)])
    count = sum(1 for ln in freeze.splitlines() if ln.strip() and not ln.startswith("#"))
    return TorchVenv(venv, venv, venv, count)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats instead of 5")
    parser.add_argument("--repeats", type=int, help="timed runs per command [5, --quick: 3]")
    parser.add_argument("--only", action="append", choices=GROUPS, help="run only this group")
    parser.add_argument("--markdown", action="store_true", help="also print a Markdown table")
    parser.add_argument(
        "--venv",
        help="the venv the inspect group reads instead of the real-distributions fixture"
        " (the field corpus's CUDA torch venv, say); its bytecode is compiled first",
    )
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 5)
    groups = args.only or list(GROUPS)
    report = Report()
    tools = fixtures.find_tools()
    CACHE.mkdir(parents=True, exist_ok=True)
    tv: TorchVenv | None = None
    snap: Path | None = None

    # Bytecode on both sides: envguard's venv and source here, pip's in the measured venv
    # (fixtures.real_venv); PYTHONDONTWRITEBYTECODE may be set, and uv writes none.
    fixtures.compile_site(Path(sys.prefix))
    import compileall

    compileall.compile_dir(str(Path(__file__).resolve().parents[1] / "src"), quiet=2)
    with tempfile.TemporaryDirectory(prefix="envguard-bench-") as tmp:
        work = Path(tmp)
        (work / "snapshots").mkdir()
        real: TorchVenv | None = None
        if "inspect" in groups and args.venv:
            real = attempt(report, "given venv", lambda: _given_venv(tools, Path(args.venv)))
        elif "inspect" in groups:
            real = attempt(report, "real venv", lambda: fixtures.real_venv(tools, log=report.log))
        if real is not None:
            # Where users run it: inside a small git work tree (the repo is recorded).
            repo = work / "repo"
            attempt(report, "git work tree", lambda: fixtures.git_work_tree(repo))
            (repo / "snapshots").mkdir(exist_ok=True)
            report.log(f"real venv ready: {real.distributions} distributions")
            real_snap = attempt(
                report, "snapshot", lambda: write_snapshot(tools, real, repo, report)
            )
            if real_snap is not None:
                report.log("inspect: probe, snapshot, diff, --help vs uv/pip freeze, collect_env")
                attempt(
                    report,
                    "inspect",
                    lambda: inspect_group(tools, real, real_snap, repo, repeats, report),
                )
        if {"walk", "rebuild"} & set(groups):
            tv = attempt(report, "venv", lambda: fixtures.torch_venv(tools, log=report.log))
        if tv is not None:
            report.log(f"venv ready: {tv.distributions} distributions")
            if "rebuild" in groups:
                snap = attempt(report, "snapshot", lambda: write_snapshot(tools, tv, work, report))
        if "walk" in groups:
            report.log("walk: walk_tree vs du -sb on 20,000 files")
            python = tv.venv / "bin" / "python" if tv else tools.base_python
            attempt(report, "walk", lambda: walk_group(tools, python, work, repeats, report))
        if "diff" in groups:
            report.log("diff: in-process diff of two 5,000-package snapshots")
            attempt(report, "diff", lambda: diff_group(repeats, report))
        if "fleet" in groups:
            report.log("fleet: 1,000-snapshot comparison, 64-host parallel capture")
            attempt(report, "fleet", lambda: fleet_group(tools, work, repeats, report))
        if "rebuild" in groups and tv is not None and snap is not None:
            report.log("rebuild: envguard rebuild vs uv venv + sync vs venv + pip install")
            attempt(
                report, "rebuild", lambda: rebuild_group(tools, tv, snap, work, repeats, report)
            )
    rows = [evaluate(t, report.timings) for t in TARGETS if t.group in groups]
    print("\n".join(machine(tools, tv, report)))
    if real is not None:
        print(
            f"real venv (inspect): {real.distributions} distributions ({', '.join(fixtures.REAL)})"
        )
    print(f"repeats: {repeats} (median shown; collect_env at most 3, pip install once)\n")
    print(text_table(rows))
    print("\nall commands:")
    print(timings_table(list(report.timings.values())))
    if report.notes:
        print("\nnotes:")
        print("\n".join(f"  {n}" for n in report.notes))
    if args.markdown:
        print()
        print(markdown_table(rows))
    report.log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
