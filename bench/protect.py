"""What `envguard protect` costs every start of the venv's Python: `python -c pass` in a
protected venv, an unprotected twin, and `python -S -c pass` (no site at all), interleaved
in one run; medians side by side.

    .venv/bin/python bench/protect.py [--repeats 201] [--python PATH]

Both venvs are made by uv from ``--python`` (default: this interpreter) with pip in them
(pip's presence is what a real venv has; the hook arms only when pip is imported), and
byte-compiled by a first start, so the figures do not measure the compiler.
"""

from __future__ import annotations

import argparse
import ensurepip
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from envguard.guard import protect  # noqa: E402
from envguard.tools import find_uv  # noqa: E402


def venv_with_pip(path: Path, python: str, uv: str) -> Path:
    subprocess.run([uv, "venv", "--quiet", "--python", python, str(path)], check=True)
    wheels = Path(ensurepip.__file__).parent / "_bundled"
    python = path / "bin" / "python"
    offline = ["--offline", "--no-index", "--find-links", str(wheels)]
    subprocess.run(
        [uv, "pip", "install", "-q", *offline, "--python", str(python), "pip"], check=True
    )
    return path / "bin" / "python"


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=201)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    uv = find_uv()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    work = Path(tempfile.mkdtemp(prefix="envguard-bench-protect-"))
    try:
        plain = venv_with_pip(work / "plain", args.python, uv)
        guarded = venv_with_pip(work / "protected", args.python, uv)
        protect.protect(guarded.parent.parent, envguard=protect.envguard_command(), uv=uv)
        cases = {
            "unprotected `python -c pass`": [str(plain), "-c", "pass"],
            "protected `python -c pass`": [str(guarded), "-c", "pass"],
            "`python -S -c pass` (no site)": [str(plain), "-S", "-c", "pass"],
        }
        for argv in cases.values():  # byte-compile, warm the page cache
            timed(argv, env)
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.repeats):
            for name, argv in cases.items():
                times[name].append(timed(argv, env))
        base = statistics.median(times["unprotected `python -c pass`"])
        print(f"| what | median of {args.repeats} | minus unprotected |\n|---|---|---|")
        for name, found in times.items():
            median = statistics.median(found)
            print(f"| {name} | {median * 1000:.2f} ms | {(median - base) * 1000:+.2f} ms |")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
