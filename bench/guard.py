"""envguard guard and undo, side by side with plain uv, on the cached ~300-distribution venv
with real torch:

    .venv/bin/python bench/guard.py [--repeats N]

- a guarded no-op install (`envguard guard -- uv pip install PKG` where PKG is installed)
  against the same `uv pip install` run plain: what the guard adds (target: at most 1 s);
- `envguard undo` of an sglang-style pollution (torch swapped, 21 packages pulled in) with
  a warm uv cache, against `uv venv` + `uv pip sync` of the same pins into a fresh venv
  (target: at most 1.5x). undo keeps the polluted venv aside (one backup, its default);
  removing it is left out of the clock on both sides (the uv side's fresh venv too).

Each run is a subprocess, round-robin, medians reported (bench/measure.py). The venv is a
hard-linked copy of the cached one in a temporary directory: the cache is never written.

    .venv/bin/python bench/guard.py --pip [--repeats N]

- a guarded pip install, refused (`envguard guard -- pip install sglang-bench`, which
  pulls in another torch), and its `--preview`, against pip's own `install --dry-run
  --report -` of the same command (target: at most +1 s), on a hard-linked copy of the
  real-distributions venv (bench/fixtures.real_venv, pip 23 byte-compiled), from local
  wheels: pip's resolver, not the network, is timed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import fixtures
from fixtures import CACHE, Tools, TorchVenv
from measure import Command, measure, static


def _pollution(wheelhouse: Path) -> list[str]:
    """An inference stack's tiny wheels: it requires another torch and 20 packages."""
    from envguard.testing import make_torch_wheel, make_wheel

    make_torch_wheel(wheelhouse, "2.14.1+cu130", "13.0")
    deps = [f"inference-dep-{i:02d}" for i in range(20)]
    for dep in deps:
        make_wheel(wheelhouse, dep, "1.0")
    make_wheel(wheelhouse, "sglang-bench", "1.0", requires=["torch==2.14.1+cu130", *deps])
    return ["sglang-bench"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pip", action="store_true", help="guard of pip against its dry run")
    args = parser.parse_args(argv)
    log = lambda message: print(message, file=sys.stderr)  # noqa: E731
    tools: Tools = fixtures.find_tools()
    if args.pip:
        work = Path(tempfile.mkdtemp(prefix="bench-guard-pip-"))
        try:
            return _pip(tools, fixtures.real_venv(tools, log=log), work, args.repeats, log)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    tv: TorchVenv = fixtures.torch_venv(tools, log=log)
    work = Path(tempfile.mkdtemp(prefix="bench-guard-"))
    try:
        return _run(tools, tv, work, args.repeats, log)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# The probe's cache keeps no verdict on a file changed in the last minute
# (distcache.QUIET_SECONDS), and `cp -al` moves every file's ctime (a new link to each).
QUIET_S = 61.0


def _settled_copy(
    tools: Tools, source: Path, venv: Path, env: dict[str, str], work: Path, log: fixtures.Log
) -> None:
    """A hard-linked copy of ``source`` at ``venv``, left a minute and then snapshotted until
    the probe's cache holds it: a guard of a venv copied seconds ago compares 3 s of bytecode
    with its source at every run and keeps none of it, which times the copy, not the guard
    a user runs on a venv they have used before."""
    import time

    fixtures.run(["cp", "-al", str(source), str(venv)])
    log(f"letting the copy settle for the probe's cache ({QUIET_S:.0f} s)")
    time.sleep(QUIET_S)
    runs = fixtures.warm_probe_caches(tools.envguard, venv, env=env, cwd=work)
    log(f"the probe's caches of the copy were warm after {runs} snapshots")


def _run(tools: Tools, tv: TorchVenv, work: Path, repeats: int, log: fixtures.Log) -> int:
    env = fixtures.bench_env(work, tools)
    env["PATH"] = f"{Path(tools.uv).parent}{os.pathsep}{env.get('PATH', '')}"
    venv = work / "venv"
    _settled_copy(tools, tv.venv, venv, env, work, log)
    extra = work / "pollution"
    polluting = _pollution(extra)
    links = ["--offline", "--no-index", "--find-links", str(tv.wheelhouse)]
    links += ["--find-links", str(extra)]
    noop = ["uv", "pip", "install", *links, "bench-pkg-000"]
    # The plan sends a +cpu torch to the PyTorch index: a local one stands in for it.
    index = fixtures.torch_index(work / "torch-index", tv.torch_wheel)
    undo_sources = [*links, "--torch-index", index]

    def pollute(_i: int = 0) -> None:
        # The polluted venv undo kept aside (its default, one backup): removed untimed, as
        # the fresh venv of the uv side is.
        for backup in work.glob(f"{venv.name}.envguard-backup-*"):
            shutil.rmtree(backup)
        # A guarded change first (the point undo goes back to), then the pollution unguarded.
        fixtures.run([tools.envguard, "guard", "--venv", str(venv), "--", *noop], env=env, cwd=work)
        fixtures.run(
            [tools.uv, "pip", "install", "--python", str(venv), *links, *polluting],
            env=env,
            cwd=work,
        )

    pins = work / "requirements.txt"
    pins.write_text(fixtures.run([tools.uv, "pip", "freeze", "--python", str(venv)], env=env))
    pollute()
    fresh = work / "fresh"

    def clean_fresh(_i: int) -> None:
        shutil.rmtree(fresh, ignore_errors=True)

    base = str(tools.base_python)
    timings = measure(
        [
            static(
                "envguard guard (no-op install)",
                [tools.envguard, "guard", "--venv", str(venv), "--", *noop],
                cwd=work,
                env=env,
            ),
            static(
                "uv pip install (no-op, plain)",
                [tools.uv, *noop[1:3], "--python", str(venv), *noop[3:]],
                cwd=work,
                env=env,
            ),
        ],
        repeats,
        log=log,
    )
    timings.update(
        measure(
            [
                Command(
                    "envguard undo (sglang-style pollution)",
                    lambda _i: [[tools.envguard, "undo", "--venv", str(venv), *undo_sources]],
                    cwd=work,
                    env=env,
                    cleanup=pollute,
                ),
                Command(
                    "envguard undo --in-place",
                    lambda _i: [
                        [tools.envguard, "undo", "--venv", str(venv), "--in-place", *undo_sources]
                    ],
                    cwd=work,
                    env=env,
                    cleanup=pollute,
                ),
                Command(
                    "uv venv + uv pip sync (fresh venv)",
                    lambda _i: [
                        [tools.uv, "venv", "--quiet", "--python", base, str(fresh)],
                        [tools.uv, "pip", "sync", "--python", str(fresh), str(pins), *links],
                    ],
                    cwd=work,
                    env=env,
                    cleanup=clean_fresh,
                ),
            ],
            repeats,
            log=log,
        )
    )
    rows = {t.label: t.median for t in timings.values()}
    guarded = rows["envguard guard (no-op install)"]
    plain = rows["uv pip install (no-op, plain)"]
    undo = rows["envguard undo (sglang-style pollution)"]
    sync = rows["uv venv + uv pip sync (fresh venv)"]
    print(f"venv: {tv.distributions} distributions, torch {fixtures.TORCH} ({tv.torch_wheel.name})")
    for label, median in rows.items():
        print(f"{label:<42} {median * 1000 if median else float('nan'):9.1f} ms")
    if guarded and plain:
        added = guarded - plain
        verdict = "PASS" if added <= 1.0 else "FAIL"
        print(f"guard adds {added * 1000:.0f} ms to a no-op install (target <= 1000 ms): {verdict}")
    in_place = rows["envguard undo --in-place"]
    for label, took in (("undo", undo), ("undo --in-place", in_place)):
        if took and sync:
            ratio = took / sync
            verdict = "PASS" if ratio <= 1.5 else "FAIL"
            print(f"{label} / fresh uv sync = {ratio:.2f}x (target <= 1.5x): {verdict}")
    return 0


def _pip(tools: Tools, real: TorchVenv, work: Path, repeats: int, log: fixtures.Log) -> int:
    env = fixtures.bench_env(work, tools)
    venv = work / "venv"
    _settled_copy(tools, real.venv, venv, env, work, log)
    extra = work / "pollution"
    wanted = _pollution(extra)
    args = ["--no-index", "--find-links", str(real.wheelhouse), "--find-links", str(extra)]
    pip = [str(venv / "bin" / "pip"), "install", *args, *wanted]
    dry = [str(venv / "bin" / "python"), "-m", "pip", "install", "--dry-run", "--quiet"]
    dry += ["--disable-pip-version-check", "--report", "-", *args, *wanted]
    guard = [tools.envguard, "guard", "--venv", str(venv)]
    timings = measure(
        [
            static("pip install --dry-run --report -", dry, cwd=work, env=env),
            static(
                "envguard guard --preview -- pip install",
                [*guard, "--preview", "--", *pip],
                cwd=work,
                env=env,
                ok=(1,),
            ),
            static(
                "envguard guard -- pip install (refused)",
                [*guard, "--", *pip],
                cwd=work,
                env=env,
                ok=(1,),
            ),
        ],
        repeats,
        log=log,
    )
    rows = {t.label: t.median for t in timings.values()}
    base = rows["pip install --dry-run --report -"]
    print(f"venv: {real.distributions} distributions; {repeats} runs each, medians")
    for label, median in rows.items():
        print(f"{label:<42} {median * 1000 if median else float('nan'):9.1f} ms")
    for label in (
        "envguard guard --preview -- pip install",
        "envguard guard -- pip install (refused)",
    ):
        took = rows[label]
        if took and base:
            verdict = "PASS" if took - base <= 1.0 else "FAIL"
            print(f"{label}: pip's dry run {took - base:+.3f} s (target <= +1 s): {verdict}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(CACHE.parent))
    raise SystemExit(main())
