"""What `envguard protect` costs every start of the venv's Python: `python -c pass` in a
protected venv, an unprotected twin, and `python -S -c pass` (no site at all), interleaved
in one run; medians of wall and CPU time side by side, and the hook's own import time.

    .venv/bin/python bench/protect.py [--repeats 201] [--python PATH] [--old OLD/src]

Both venvs are made by uv from ``--python`` (default: this interpreter) with pip in them
(pip's presence is what a real venv has; the hook arms only when pip is imported).
PYTHONDONTWRITEBYTECODE is kept as the caller has it: set (as in many containers), a hook
that protect did not byte-compile is compiled again at every start; unset, a first start
writes the .pyc.
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


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one run of ``argv``. CPU time is what
    a shared machine's load disturbs least."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{argv} exited {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def hook_import(python: Path, env: dict[str, str], repeats: int) -> float:
    """The median microseconds `-X importtime` gives the hook's own import at start."""
    found = []
    for _ in range(repeats):
        err = subprocess.run(
            [str(python), "-X", "importtime", "-c", "pass"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stderr
        line = next(
            ln for ln in err.splitlines() if ln.split("|")[-1].strip() == "_envguard_protect"
        )
        found.append(int(line.split("|")[1]))
    return statistics.median(found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=201)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument(
        "--old", type=Path, help="an older tree's src/: a third venv protected by it, beside"
    )
    args = parser.parse_args()
    uv = find_uv()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    # Kept as the caller has it (containers set it): no start then writes the hook's .pyc.
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        env["PYTHONDONTWRITEBYTECODE"] = os.environ["PYTHONDONTWRITEBYTECODE"]
    work = Path(tempfile.mkdtemp(prefix="envguard-bench-protect-"))
    try:
        plain = venv_with_pip(work / "plain", args.python, uv)
        guarded = venv_with_pip(work / "protected", args.python, uv)
        protect.protect(guarded.parent.parent, envguard=protect.envguard_command(), uv=uv)
        cases = {
            "unprotected `python -c pass`": [str(plain), "-c", "pass"],
            "protected `python -c pass`": [str(guarded), "-c", "pass"],
        }
        if args.old is not None:
            old = venv_with_pip(work / "old", args.python, uv)
            subprocess.run(
                [sys.executable, "-m", "envguard", "protect", "--venv", str(old.parent.parent)],
                env={**env, "PYTHONPATH": str(args.old)},
                check=True,
                capture_output=True,
            )
            cases["protected by --old `python -c pass`"] = [str(old), "-c", "pass"]
        cases |= {
            "`python -S -c pass` (no site)": [str(plain), "-S", "-c", "pass"],
        }
        for argv in cases.values():  # byte-compile, warm the page cache
            timed(argv, env)
        walls: dict[str, list[float]] = {name: [] for name in cases}
        cpus: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.repeats):
            for name, argv in cases.items():
                wall, cpu = timed(argv, env)
                walls[name].append(wall)
                cpus[name].append(cpu)
        base = "unprotected `python -c pass`"
        wall0, cpu0 = statistics.median(walls[base]), statistics.median(cpus[base])
        print(
            f"| what (median of {args.repeats}) | wall | minus unprotected | CPU | minus unprotected |"
        )
        print("|---|---|---|---|---|")
        for name in cases:
            wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
            print(
                f"| {name} | {wall * 1000:.2f} ms | {(wall - wall0) * 1000:+.2f} ms"
                f" | {cpu * 1000:.2f} ms | {(cpu - cpu0) * 1000:+.2f} ms |"
            )
        micros = hook_import(guarded, env, min(args.repeats, 51))
        print(f"| the hook's own import at start (`-X importtime`) | {micros:.0f} us | | | |")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
