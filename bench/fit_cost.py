"""The fit check's own cost (probe/target/fit.py) on given venvs, beside the library scan it
builds on, each step in-process as the probe runs it:

    .venv/bin/python bench/fit_cost.py VENV [VENV ...]

"cold": no distribution cache (every ELF header and symbol table read); "warm": the cache a
previous probe left (an unchanged venv, the usual case). Steps run round-robin, the median
of ``--repeats`` shown. The whole probe, before and after, is bench/probe_cost.py's.

A report, not a test: it always exits 0.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from factories import load_target

target = load_target()


def _site(venv: Path) -> str:
    return str(next((venv / "lib").glob("python3*/site-packages")))


def _cache(folder: str | None, site: str) -> Any:
    return None if folder is None else target.DistCache(folder, [site], code="bench", quiet=0.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("venvs", nargs="+", type=Path)
    args = parser.parse_args()
    print(f"{'venv':<24} {'step':<10} {'cold':>9} {'warm':>9} {'checked':>8} {'broken':>7}")
    for venv in args.venvs:
        site = _site(venv)
        warnings: list[str] = []
        packages = target.scan_packages([site], warnings)
        torch = target.torch_build(packages, warnings)
        # Under a private folder: the cache refuses one whose parent others can write (/tmp).
        folder = str(Path(tempfile.mkdtemp(prefix="envguard-fit-cost-")) / "envguard" / "dists")
        Path(folder).mkdir(parents=True, mode=0o700)
        primed = _cache(folder, site)  # one probe's worth, saved: what "warm" reads
        target.libraries([site], packages, torch, {}, [], primed)
        found = target.fit([site], packages, torch, {}, [], primed)
        primed.save()
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.repeats):
            for mode in ("cold", "warm"):
                for step in ("libraries", "fit"):
                    cache = _cache(folder if mode == "warm" else None, site)
                    started = time.perf_counter()
                    getattr(target, step)([site], packages, torch, {}, [], cache)
                    times.setdefault((step, mode), []).append(time.perf_counter() - started)
        for step in ("libraries", "fit"):
            cold = statistics.median(times[(step, "cold")]) * 1000
            warm = statistics.median(times[(step, "warm")]) * 1000
            extra = f"{found['checked']:>8} {len(found['broken']):>7}" if step == "fit" else ""
            print(f"{venv.name:<24} {step:<10} {cold:>7.1f}ms {warm:>7.1f}ms {extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
