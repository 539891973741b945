"""What checking installed files against RECORD costs the probe: off, quick (the default)
and deep, side by side in one run, on a venv of real distributions.

    .venv/bin/python bench/truth.py [--python VENV_OR_PYTHON] [--repeats 9] [--cold]

Each mode runs the probe exactly as `envguard snapshot` sends it (the same payload, stdin,
``python -I -S -``), round-robin, with the distribution cache warm (one unmeasured run per
mode first; ``--cold``: an empty one for every run, as at the first snapshot after an
install); CPU is the probe process's user+system time, wall its elapsed time. Default
venv: the cached field-like fixture (bench/fixtures.real_venv). A report, not a test: it
always exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from envguard.probe.payload import probe_payload

MODES = ("off", "quick", "deep")


def _python(where: str) -> str:
    path = Path(where)
    return str(path / "bin" / "python") if path.is_dir() else str(path)


def run_probe(python: str, mode: str, cold: bool = False) -> tuple[float, float, dict[str, object]]:
    """(cpu seconds, wall seconds, report) of one probe run in ``mode``; ``cold``: with an
    empty distribution cache."""
    payload = probe_payload({"verify": mode, "git": False, "files": [], "caches": []})
    env = dict(os.environ)
    scratch = tempfile.mkdtemp(prefix="envguard-truth-") if cold else None
    if scratch is not None:
        env["XDG_CACHE_HOME"] = scratch
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [python, "-I", "-S", "-"],
        input=payload.encode(),
        capture_output=True,
        check=False,
        env=env,
    )
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if proc.returncode != 0:
        raise SystemExit(f"probe failed ({mode}): {proc.stdout[-300:]!r} {proc.stderr[-300:]!r}")
    return cpu, wall, json.loads(proc.stdout)


def summary(report: dict[str, object]) -> str:
    packages = report["packages"]
    assert isinstance(packages, list)
    checked = sum((p.get("on_disk") or {}).get("checked", 0) for p in packages)
    odd = {
        p["name"]: {k: v for k, v in p["on_disk"].items() if k != "checked" and v}
        for p in packages
        if p.get("on_disk") and any(p["on_disk"][k] for k in ("modified", "missing", "added"))
    }
    clashes = report.get("clashes") or []
    return (
        f"{len(packages)} dists, {checked} files checked, {len(clashes)} clashes,"  # type: ignore[arg-type]
        f" unowned {report.get('unowned')}, not as RECORD: {json.dumps(odd)[:600]}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", help="the venv or interpreter measured")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--cold", action="store_true", help="an empty cache for every run")
    args = parser.parse_args(argv)
    if args.python:
        python = _python(args.python)
    else:
        sys.path.insert(0, str(Path(__file__).parent))
        import fixtures

        python = str(fixtures.real_venv(fixtures.find_tools(), log=print).venv / "bin" / "python")
    modes = args.modes.split(",")
    cpu: dict[str, list[float]] = {m: [] for m in modes}
    wall: dict[str, list[float]] = {m: [] for m in modes}
    for mode in modes:  # warm the distribution cache, and say what each mode found
        print(f"{mode}: {summary(run_probe(python, mode)[2])}")
    for _ in range(args.repeats):
        for mode in modes:
            c, w, _report = run_probe(python, mode, args.cold)
            cpu[mode].append(c)
            wall[mode].append(w)
    base = statistics.median(cpu[modes[0]])
    print(f"\nprobe of {python}, {args.repeats} runs each, medians")
    print("| mode | CPU | wall | CPU / " + modes[0] + " |\n|---|---|---|---|")
    for mode in modes:
        c, w = statistics.median(cpu[mode]), statistics.median(wall[mode])
        print(f"| {mode} | {c * 1e3:.1f} ms | {w * 1e3:.1f} ms | {c / base:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
