"""One `envguard bisect` step against a raw `uv pip sync` of the same change, side by side
(issue: bisect, Speed). Goal: a step that flips 1-5 pins within 1.5x of the raw sync.

A step is what api.bisect's build does for each candidate: the plan for the candidate
snapshot (pins validated, requirement files written) and its uv steps, into the one scratch
venv. The fixture: 60 tiny wheels plus 3 at a second version, a snapshot of the venv, a warm
uv cache; each side flips the same 3 pins back and forth, pairs alternate, medians.

    .venv/bin/python bench/bisect_step.py [--pairs 9]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def main() -> int:
    from envguard import api
    from envguard.recovery.bisect import candidate, units
    from envguard.recovery.execute import run_step
    from envguard.recovery.plan import PlanOptions, RunStep, plan
    from envguard.recovery.sources import Sources
    from envguard.testing import make_wheel
    from envguard.tools import find_uv

    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=9)
    args = parser.parse_args()
    uv = find_uv()
    with tempfile.TemporaryDirectory(prefix="envguard-bench-bisect-") as tmp:
        root = Path(tmp)
        wheels = root / "wheels"
        for i in range(60):
            make_wheel(wheels, f"pkg{i:02d}", "1.0")
        for i in range(3):
            make_wheel(wheels, f"pkg{i:02d}", "2.0")
        source = ["--offline", "--no-index", "--find-links", str(wheels)]
        venv = root / "venv"
        subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
        one = [f"pkg{i:02d}==1.0" for i in range(60)]
        two = [f"pkg{i:02d}=={'2.0' if i < 3 else '1.0'}" for i in range(60)]
        py = str(venv / "bin" / "python")
        for reqs in (two, one):  # the uv cache is warm for both sets
            subprocess.run([uv, "pip", "install", "-q", "--python", py, *source, *reqs], check=True)
        good = api.snapshot(python=str(venv), name="good")
        subprocess.run([uv, "pip", "install", "-q", "--python", py, *source, *two], check=True)
        bad = api.snapshot(python=str(venv), name="bad")
        # The raw side gets a venv of its own, in the same state: each side flips its own.
        peer = root / "peer"
        subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(peer)], check=True)
        peer_py = str(peer / "bin" / "python")
        subprocess.run([uv, "pip", "install", "-q", "--python", peer_py, *source, *two], check=True)
        flips = units(good, bad)
        sources = Sources(find_links=(str(wheels),), offline=True, no_index=True)
        options = PlanOptions(venv=venv, snapshot_ref="good", sources=sources, uv=uv,
                              in_place=True, workdir=root / "plan", check_paths=False)  # fmt: skip
        (root / "plan").mkdir()

        def step(chosen: list) -> float:  # type: ignore[type-arg]
            start = time.perf_counter()
            the_plan = plan(candidate(good, bad, chosen), options)
            for f in the_plan.files:
                Path(f.path).write_text(f.content)
            for s in the_plan.steps:
                if isinstance(s, RunStep):
                    run_step(s)
            return time.perf_counter() - start

        def raw(reqs: list[str]) -> float:
            path = root / "raw.txt"
            path.write_text("\n".join(reqs) + "\n")
            start = time.perf_counter()
            subprocess.run([uv, "pip", "sync", "-q", "--python", peer_py, *source, str(path)],
                           check=True)  # fmt: skip
            return time.perf_counter() - start

        ours, peers = [], []
        for i in range(args.pairs):  # both start at the bad pins: good, bad, good, ...
            ours.append(step([] if i % 2 == 0 else flips))
            peers.append(raw(one if i % 2 == 0 else two))
        ratio = statistics.median(ours) / statistics.median(peers)
        verdict = "PASS" if ratio <= 1.5 else "MISS"
        print(
            f"bisect step flipping {sum(len(u.packages) for u in flips)} pins of 60:"
            f" envguard {statistics.median(ours) * 1000:.0f} ms, raw uv pip sync"
            f" {statistics.median(peers) * 1000:.0f} ms, {ratio:.2f}x (<= 1.5x) {verdict}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
