"""The probe alone, another install's against this one's, side by side on given venvs.

    .venv/bin/python bench/probe_cost.py --before ../base/.venv/bin/python VENV [VENV ...]

Each side's payload is built by its own envguard (``probe_payload``), then both run
round-robin in each venv as ``python -I -S -`` exactly as envguard.probe.runner sends it,
no default caches, each side with its own cache folder: "warm" reuses it (an unchanged venv,
the usual case), "cold" starts each run from an empty one (nothing known, nothing compiled).
A venv of the GPU stack's real wheels shows what the library scan costs where it has work:

    uv venv /tmp/gpuvenv && uv pip install --python /tmp/gpuvenv/bin/python \\
        nvidia-nccl-cu13 nvidia-cuda-runtime nvidia-cuda-nvrtc

A report, not a test: it always exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def payload(python: str) -> str:
    code = (
        "import sys; from envguard.probe.payload import probe_payload;"
        " sys.stdout.write(probe_payload({'default_caches': False}))"
    )
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the other install's python")
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("venvs", nargs="+", type=Path)
    args = parser.parse_args()
    sides = {"before": payload(args.before), "after": payload(sys.executable)}
    print(f"{'venv':<28} {'mode':<5} {'before':>9} {'after':>9} {'after/before':>13}")
    for venv in args.venvs:
        python = str(venv / "bin" / "python")
        for mode in ("warm", "cold"):
            folders = {side: tempfile.mkdtemp(prefix="envguard-probe-cost-") for side in sides}
            times: dict[str, list[float]] = {side: [] for side in sides}
            dists = 0
            for run in range(args.repeats + 1):  # the first round is a warm-up
                for side, text in sides.items():
                    cache = folders[side] if mode == "warm" else tempfile.mkdtemp()
                    env = {**os.environ, "XDG_CACHE_HOME": cache}
                    start = time.perf_counter()
                    proc = subprocess.run(
                        [python, "-I", "-S", "-"],
                        input=text,
                        capture_output=True,
                        text=True,
                        env=env,
                    )
                    elapsed = time.perf_counter() - start
                    if proc.returncode != 0:
                        print(f"{venv}: the {side} probe failed: {proc.stdout[-300:]}")
                        return 0
                    dists = len(json.loads(proc.stdout)["packages"])
                    if run:
                        times[side].append(elapsed)
            before, after = (statistics.median(times[s]) * 1000 for s in sides)
            label = f"{venv.name} ({dists} dists)"
            print(
                f"{label:<28} {mode:<5} {before:>7.1f}ms {after:>7.1f}ms {after / before:>12.3f}x"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
