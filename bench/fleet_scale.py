"""`envguard fleet` at cluster scale: 10,000 hosts, this envguard against another side by side.

Each side runs `envguard fleet DIR --format json` as a subprocess under GNU time, round-robin,
in the same run: wall seconds and peak RSS, and the ratio after/before. ``--before SRC`` names
the ``src`` folder of another envguard (e.g. ``git archive main src | tar -x -C /tmp/base``),
run with this venv's Python and PYTHONPATH=SRC, so both sides share every dependency.

A second group reads the fan-out stream (`envguard probe-payload` on every node, the reports
concatenated with `host: ` prefixes as clush prints them), with 3 failed nodes in it, on this
side only (no older envguard reads it).

    .venv/bin/python bench/fleet_scale.py --before /tmp/base/src [--hosts 10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def snapshots(folder: Path, hosts: int) -> None:
    """``hosts`` snapshot files of 400 packages (cached: they take a minute to write)."""
    import fixtures

    if not (folder / f"node{hosts - 1:04d}.json").exists():
        fixtures.fleet_snapshots(folder, hosts=hosts)


def stream(path: Path, hosts: int) -> None:
    """The clush-style stream of ``hosts`` probe envelopes (one real report of this venv,
    renamed per node), with three failed nodes: an error report, a truncated line and a
    node that printed nothing (its engine's failure line only)."""
    if path.exists():
        return
    out = subprocess.run(
        [sys.executable, "-m", "envguard", "probe-payload"], capture_output=True, check=True
    ).stdout
    one = subprocess.run([sys.executable, "-"], input=out, capture_output=True, check=True).stdout
    envelope = json.loads(one)
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(hosts):
            host = f"node{i:05d}"
            if i == 17:
                fh.write(f"clush: {host}: exited with exit code 3\n")
                continue
            if i == 404:
                fh.write(f'{host}: {{"node": "{host}", "report": {{"error": {{"kind": "crash",')
                fh.write(' "message": "boom"}}}\n')
                continue
            line = json.dumps({**envelope, "node": host}, separators=(",", ":"))
            fh.write(f"{host}: {line[:1000] if i == 911 else line}\n")


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int, int]:
    """(wall seconds, CPU seconds, peak RSS in MB, exit code) of one run under GNU time.
    CPU (user + system, the worker processes included) is the steadier figure on a shared
    machine; the wall time moves with everyone else's load."""
    with tempfile.NamedTemporaryFile("r") as stats:
        proc = subprocess.run(
            ["/usr/bin/time", "-o", stats.name, "-f", "%e %U %S %M", *argv],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            check=False,
        )
        wall, user, system, rss = stats.read().split()[-4:]
    return float(wall), float(user) + float(system), int(rss) // 1024, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="the src folder of another envguard")
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cache = HERE / ".cache" / f"fleet-{args.hosts}"
    print(f"writing fixtures in {cache} ...", file=sys.stderr)
    snapshots(cache / "snapshots", args.hosts)
    stream(cache / "stream.txt", args.hosts)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    sides = {"after": env}
    if args.before:
        sides = {"before": {**env, "PYTHONPATH": args.before}, **sides}
    cmd = [sys.executable, "-m", "envguard", "fleet"]
    runs: dict[str, list[tuple[float, float, int, int]]] = {side: [] for side in sides}
    runs["after, stream"] = []
    for _ in range(args.repeats):
        for side, side_env in sides.items():
            runs[side].append(timed([*cmd, str(cache / "snapshots"), "--format", "json"], side_env))
        runs["after, stream"].append(
            timed([*cmd, str(cache / "stream.txt"), "--format", "json"], env)
        )
    print(f"envguard fleet, {args.hosts:,} hosts x 400 packages, median of {args.repeats}")
    print("| side | wall | CPU | peak RSS | exit |")
    print("| --- | --- | --- | --- | --- |")
    medians = {}
    for side, results in runs.items():
        wall, cpu, rss = (statistics.median(r[i] for r in results) for i in range(3))
        medians[side] = (wall, cpu, rss)
        print(f"| {side} | {wall:.1f} s | {cpu:.1f} s | {rss:.0f} MB | {results[0][3]} |")
    if "before" in medians:
        before, after = medians["before"], medians["after"]
        ratios = [a / b for a, b in zip(after, before, strict=True)]
        print("after/before: wall {:.2f}x, CPU {:.2f}x, peak RSS {:.2f}x".format(*ratios))


if __name__ == "__main__":
    main()
