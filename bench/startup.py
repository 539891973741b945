"""Start-up before and after a change, side by side: `envguard --help`, a clean
`envguard diff` and a `envguard snapshot` of a bare venv, each run by the same interpreter
against two source trees.

    .venv/bin/python bench/startup.py --old /tmp/old/src [--repeats 15]

(make /tmp/old with `git worktree add /tmp/old <commit>`). Both trees and the measured venv
are byte-compiled first, so the figures do not measure the compiler. Pairs alternate
old/new; medians are reported with the new/old ratio.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NEW = Path(__file__).resolve().parents[1] / "src"


def timed(argv: list[str], env: dict[str, str], cwd: Path, ok: tuple[int, ...]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode not in ok:
        raise SystemExit(f"{argv} exited {proc.returncode}: {proc.stderr.decode()[-400:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="the old tree's src/ folder")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    for tree in (args.old, NEW):
        compileall.compile_dir(str(tree), quiet=1)
    with tempfile.TemporaryDirectory(prefix="envguard-startup-") as tmp:
        work = Path(tmp)
        subprocess.run(["git", "init", "-q", str(work)], check=True)
        venv = work / ".venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        base = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        base.pop("PYTHONDONTWRITEBYTECODE", None)
        snaps = {}
        for label, tree in (("old", args.old), ("new", NEW)):
            env = {**base, "PYTHONPATH": str(tree)}
            out = work / f"{label}.json"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "envguard",
                    "snapshot",
                    "--python",
                    str(venv),
                    "-o",
                    str(out),
                ],
                env=env,
                cwd=work,
                check=True,
                capture_output=True,
            )
            snaps[label] = out
        cases = {
            "envguard --help": lambda tree, label: ["--help"],
            "clean envguard diff": lambda tree, label: ["diff", str(snaps[label])],
            "envguard snapshot": lambda tree, label: [
                "snapshot",
                "--python",
                str(venv),
                "-o",
                str(work / f"{label}-again.json"),
                "--force",
            ],
        }
        print("| what | old (median) | new (median) | new/old | pairs |\n|---|---|---|---|---|")
        for name, argv_of in cases.items():
            times: dict[str, list[float]] = {"old": [], "new": []}
            for _ in range(args.repeats):
                for label, tree in (("old", args.old), ("new", NEW)):
                    env = {**base, "PYTHONPATH": str(tree)}
                    argv = [sys.executable, "-m", "envguard", *argv_of(tree, label)]
                    times[label].append(timed(argv, env, work, (0,)))
            old, new = statistics.median(times["old"]), statistics.median(times["new"])
            print(
                f"| {name} | {old * 1000:.0f} ms | {new * 1000:.0f} ms | {new / old:.2f}x"
                f" | {args.repeats} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
