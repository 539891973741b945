"""The rank gate's cost per rank (issue 25: under 200 ms warm), side by side with what a
training script would otherwise run to compare environments, in one run.

Two ranks on this machine, each a fresh process of the field-like venv (real torch and
~280 distributions, bench/.cache/realvenv), envguard from this checkout on PYTHONPATH. Each
process imports torch (not timed: the training script does that anyway), then times:

- ``gate``: after a barrier of the bench's own, its first ``assert_homogeneous()``
  (envguard imported, the target modules installed, the fingerprint read through the warm
  distribution cache, the hashes exchanged through a real TCPStore rank 0 serves): what
  one rank pays per job start;
- ``fingerprint``: ``envguard.distributed.fingerprint()`` again in the same process;
- ``importlib.metadata``: ``{d.name: d.version for d in distributions()}``, the hand-made
  check (versions only: no builds' files, no driver, no variables);
- ``collect_env``: ``torch.utils.collect_env.get_pretty_env_info()``, what pytorch#108212
  suggests comparing by hand.

The distribution cache is filled by one untimed run first ("warm"). Medians over
``--runs`` job starts (two ranks each).

    .venv/bin/python bench/gate.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

WORKER = """\
import json, os, sys, time
from datetime import timedelta
import torch  # the training script's own imports: not the gate's cost
import torch.distributed as dist
# A barrier of the bench's own first, so that neither rank's time holds the other's torch
# import (the skew between two process starts is not the gate's cost).
rank = int(os.environ["RANK"])
port = int(os.environ["BENCH_BARRIER_PORT"])
barrier = dist.TCPStore("127.0.0.1", port, 2, is_master=rank == 0, timeout=timedelta(seconds=60))
barrier.set(f"here/{rank}", "1")
barrier.wait(["here/0", "here/1"])
t0 = time.perf_counter()
import envguard.distributed as d
ti = time.perf_counter()
d.assert_homogeneous(timeout=60)
t1 = time.perf_counter()
d.fingerprint()
t2 = time.perf_counter()
from importlib.metadata import distributions
{dist.metadata["Name"]: dist.version for dist in distributions()}
t3 = time.perf_counter()
out = {"gate": t1 - t0, "  of it, the import": ti - t0, "fingerprint": t2 - t1}
out["importlib.metadata"] = t3 - t2
if os.environ.get("BENCH_COLLECT_ENV"):
    from torch.utils import collect_env
    t4 = time.perf_counter()
    collect_env.get_pretty_env_info()
    out["collect_env"] = time.perf_counter() - t4
print(json.dumps(out))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _job(python: Path, env: dict[str, str], *, collect_env: bool) -> list[dict[str, float]]:
    """One job start: two ranks, each a fresh process; their timings."""
    port, barrier = _free_port(), _free_port()
    procs = []
    for rank in (0, 1):
        rank_env = dict(env, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
        rank_env.update(MASTER_PORT=str(port - 1), ENVGUARD_GATE_PORT=str(port))
        rank_env["BENCH_BARRIER_PORT"] = str(barrier)
        if collect_env:
            rank_env["BENCH_COLLECT_ENV"] = "1"
        argv = [str(python), "-c", WORKER]
        procs.append(subprocess.Popen(argv, env=rank_env, stdout=subprocess.PIPE, text=True))
    out = []
    for proc in procs:
        stdout, _ = proc.communicate(timeout=300)
        if proc.returncode != 0:
            raise SystemExit(f"a rank failed ({proc.returncode})")
        out.append(json.loads(stdout))
    return out


def main() -> int:
    from fixtures import find_tools, real_venv

    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    venv = real_venv(find_tools(), log=lambda m: print(m, file=sys.stderr)).venv
    python = venv / "bin" / "python"
    with tempfile.TemporaryDirectory(prefix="envguard-bench-gate-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
        env.update(PYTHONPATH=str(ROOT / "src"), XDG_CACHE_HOME=tmp, NO_COLOR="1")
        env.pop("VIRTUAL_ENV", None)
        _job(python, env, collect_env=False)  # fills the distribution and code caches
        times: dict[str, list[float]] = {}
        for run in range(args.runs):
            # collect_env runs a few tools (seconds): timed in the first run only.
            for rank in _job(python, env, collect_env=run == 0):
                for key, value in rank.items():
                    times.setdefault(key, []).append(value)
    medians = {k: statistics.median(v) for k, v in times.items()}
    count = len(list((venv / "lib").glob("python*/site-packages/*.dist-info")))
    print(f"rank gate, {args.runs} job starts x 2 ranks, {count} distributions, medians:")
    for key, value in medians.items():
        low = min(times[key]) * 1000
        print(f"  {key:20s} {value * 1000:8.1f} ms  (min {low:.1f}, n={len(times[key])})")
    gate, meta = medians["gate"], medians["importlib.metadata"]
    print(f"  gate / importlib.metadata scan: {gate / meta:.2f}x")
    if "collect_env" in medians:
        print(f"  collect_env / gate: {medians['collect_env'] / gate:.1f}x")
    print(f"  goal: gate under 200 ms per rank: {'met' if gate < 0.2 else 'MISSED'}")
    load = os.getloadavg()[0]
    print(f"  load average during the run: {load:.1f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
