"""What the launcher form of the rank gate adds to a job's start (issue 34: at most 1 s),
side by side in one run: a two-node job on this machine (two launches, 127.0.0.1, CPU
torch), started as

- ``torchrun``: ``torchrun --nnodes 2 --node-rank N ... tiny.py``;
- ``gate``: ``envguard gate --torchrun -- torchrun ...``, the same line behind the gate;

alternating, ``--runs`` times each. A start is timed from just before both launches are
started to the moment the tiny script's last rank runs its first line (``time.time()`` it
prints; the machine's one clock); the gate's cost is the difference of the medians.
``--rdzv c10d`` times the c10d rendezvous without --node-rank instead of the static one.

The venv (``--venv``) needs torch and envguard (this checkout: ``uv pip install -e .``);
its distribution cache is filled by one untimed gate first, as after ``envguard snapshot``.

    .venv/bin/python bench/launcher.py --venv /path/to/torch-venv [--runs 7] [--rdzv c10d]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TINY = "import time, os\nprint(f'{time.time():.6f} {os.environ[\"RANK\"]}', flush=True)\n"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _start(venv: Path, folder: Path, *, gated: bool, rdzv: str) -> float:
    """Seconds from the launches' start to the last rank's first line."""
    bin_ = venv / "bin"
    port = str(_port())
    lines = []
    for node in (0, 1):
        line = [str(bin_ / "torchrun"), "--nnodes", "2", "--nproc-per-node", "1"]
        if rdzv == "c10d":
            line += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}"]
        else:
            line += ["--node-rank", str(node), "--master-addr", "127.0.0.1", "--master-port", port]
        gate = [str(bin_ / "envguard"), "gate", "--torchrun", "--timeout", "60", "--"]
        lines.append([*gate, *line, "tiny.py"] if gated else [*line, "tiny.py"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "PET_", "RANK"))}
    began = time.time()
    procs = [
        subprocess.Popen(
            line, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for line in lines
    ]
    firsts = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            if proc.returncode != 0:
                raise SystemExit(f"a launch failed ({proc.returncode}): {err.strip()[-400:]}")
            firsts += [float(line.split()[0]) for line in out.splitlines() if line.strip()]
    finally:
        for proc in procs:  # by PID: only what this bench started
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return max(firsts) - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--rdzv", choices=("static", "c10d"), default="static")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="envguard-bench-launcher-") as tmp:
        folder = Path(tmp)
        (folder / "tiny.py").write_text(TINY, encoding="utf-8")
        _start(args.venv, folder, gated=True, rdzv=args.rdzv)  # warm: the distribution cache
        times: dict[str, list[float]] = {"torchrun": [], "gate": []}
        for _ in range(args.runs):
            for name in times:
                times[name].append(_start(args.venv, folder, gated=name == "gate", rdzv=args.rdzv))
                print(f"{name}: {times[name][-1]:.3f} s", file=sys.stderr)
    alone, gated = (statistics.median(times[n]) for n in ("torchrun", "gate"))
    print(
        f"rendezvous {args.rdzv}, {args.runs} starts each, 2 nodes on 127.0.0.1, load {os.getloadavg()[0]:.1f}"
    )
    for name, values in times.items():
        print(
            f"{name:9} median {statistics.median(values):.3f} s  min {min(values):.3f}  max {max(values):.3f}"
        )
    print(f"the gate adds {gated - alone:+.3f} s to the job's start (medians)")


if __name__ == "__main__":
    main()
