"""How cost grows with the number of installed files: snapshot, live diff and the quick
check at 1k, 10k, 30k and 100k files (issue 33, item 5), side by side with `uv pip freeze`.

    .venv/bin/python bench/growth.py [--sizes 1000,10000,30000,100000] [--repeats 5]

Each venv is generated (envguard.testing.install_many: distributions of 100 one-line
modules, 20 to a folder, RECORDs with true hashes), then left a minute so that the
probe's cache may keep what it read (records younger than that are read again). Per size,
round-robin: `envguard snapshot`, `envguard diff` against a snapshot of the same venv, the
probe with the check off and quick (as bench/truth.py runs it), the bare lstat floor over
the same files, and `uv pip freeze`. "per 1k files" divides each median by the size: flat
or falling is linear or better. A report, not a test: it always exits 0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import fixtures
import truth
from measure import measure, static

from envguard.testing import install_many

QUIET_S = 61.0  # the probe's cache keeps no record younger than a minute


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,30000,100000")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    tools = fixtures.find_tools()
    rows: list[tuple[int, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="envguard-growth-") as tmp:
        work = Path(tmp)
        venvs = {}
        for size in sizes:
            venv = work / f"v{size}"
            fixtures.run([str(tools.base_python), "-m", "venv", "--without-pip", str(venv)])
            (site,) = (venv / "lib").glob("python*/site-packages")
            install_many(site, files=size, per_dist=100)
            venvs[size] = venv
            print(f"generated {size} files", file=sys.stderr)
        written = time.monotonic()
        repo = work / "repo"
        fixtures.git_work_tree(repo)
        os.environ["XDG_CACHE_HOME"] = str(work / "xdg")  # truth.run_probe's too
        env = {**fixtures.bench_env(repo, tools), "XDG_CACHE_HOME": str(work / "xdg")}
        time.sleep(max(0.0, QUIET_S - (time.monotonic() - written)))
        for size, venv in venvs.items():
            python = str(venv / "bin" / "python")
            snap = repo / f"s{size}.json"
            fixtures.run(
                [tools.envguard, "snapshot", "--python", str(venv), "--out", str(snap)],
                env=env,
                cwd=repo,
            )
            commands = [
                static(
                    "uv pip freeze",
                    [tools.uv, "pip", "freeze", "--python", str(venv)],
                    cwd=repo,
                    env=env,
                ),
                static(
                    "snapshot",
                    [tools.envguard, "snapshot", "--python", str(venv), "--out", "-"],
                    cwd=repo,
                    env=env,
                ),
                static(
                    "live diff",
                    [tools.envguard, "diff", str(snap), "--python", str(venv)],
                    cwd=repo,
                    env=env,
                    ok=(0, 1),
                ),
            ]
            timings = measure(commands, args.repeats, log=lambda _m: None)
            found = truth.run_probe(python, "quick")[2]
            records, pycs = truth.quick_paths(found, python)
            paths = records + pycs
            off, quick, floor = [], [], []
            for _ in range(args.repeats):
                off.append(truth.run_probe(python, "off")[1])
                quick.append(truth.run_probe(python, "quick")[1])
                floor.append(truth.run_floor(python, paths)[0])
            medians = {label: t.median or float("nan") for label, t in timings.items()}
            medians["probe off"] = statistics.median(off)
            medians["probe quick"] = statistics.median(quick)
            medians["check (quick - off)"] = statistics.median(
                q - o for q, o in zip(quick, off, strict=True)
            )
            medians["lstat floor"] = statistics.median(floor)
            rss = timings["snapshot"].median_rss
            medians["snapshot peak RSS MiB"] = rss if rss is not None else float("nan")
            rows.append((size, medians))
            print(f"measured {size}", file=sys.stderr)
        _table(rows, args.repeats)  # before the 141,000 files are removed (minutes)
    return 0


def _table(rows: list[tuple[int, dict[str, float]]], repeats: int) -> None:
    labels = list(rows[0][1])
    print(f"medians of {repeats} runs; load average now {_load()}", flush=True)
    print("| what | " + " | ".join(f"{size:,} files" for size, _ in rows) + " |")
    print("|---" * (len(rows) + 1) + "|")
    for label in labels:
        cells = []
        for size, medians in rows:
            value = medians[label]
            if label.endswith("MiB"):
                cells.append(f"{value:.1f}")
            else:
                cells.append(f"{value * 1e3:.0f} ms ({value * 1e6 / size:.0f} us/file)")
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


if __name__ == "__main__":
    sys.exit(main())
