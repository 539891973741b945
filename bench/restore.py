"""`envguard restore` against its peers, side by side in one run (issue: restore, Speed).

1. A compile cache of ``--cache-mb`` MB in ``--cache-files`` files, kept by `snapshot
   --keep-cache` (a gzip tarball in the store): `restore --execute` of that cache (envguard's
   whole command: probe, stack check, hash of the archive, unpack beside, count, rename)
   against `tar -xzf` of the same archive into an empty folder. Goal: <= 2x.
2. 100 tracked files, all changed: `restore --execute` (write each from the store, hash it
   again, keep the displaced version). Goal: the whole command under 1 s.
3. Packages: `restore --execute` of a polluted venv against `rebuild --execute` of the same
   snapshot into the same polluted venv (both build beside, verify, swap). Goal: <= 1.3x.

The cache's files are a mix of incompressible bytes and text, like inductor's .so/.cubin
files and generated .py; everything sits in a fresh git work tree; runs alternate pair by
pair; medians are reported. envguard's own bytecode is compiled first (PYTHONDONTWRITEBYTECODE
may be set here).

    .venv/bin/python bench/restore.py [--pairs 5] [--cache-mb 350] [--cache-files 20000]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENVGUARD = [sys.executable, "-m", "envguard"]


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_INDEX"))}
    env.pop("VIRTUAL_ENV", None)
    env.update(
        NO_COLOR="1",
        UV_OFFLINE="1",
        UV_NO_CONFIG="1",
        UV_PYTHON_DOWNLOADS="never",
        UV_CACHE_DIR=str(root / "uv-cache"),
        TORCHINDUCTOR_CACHE_DIR=str(root / "inductor"),
        TRITON_CACHE_DIR=str(root / "triton"),
    )
    return env


def _run(argv: list[str], *, cwd: Path, env: dict[str, str]) -> float:
    os.sync()  # the deletions before each run are written out first, on both sides
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{proc.stdout}\n{proc.stderr}")
    return took


def _fill_cache(folder: Path, *, total_mb: int, files: int) -> None:
    per = total_mb * (1 << 20) // files
    text = (b"def kernel_%d(x):\n    return x * 2 + 1\n" * (per // 40 + 1))[: per // 2]
    for i in range(files):
        sub = folder / f"{i % 256:02x}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"k{i}.bin").write_bytes(os.urandom(per - len(text)) + text)


def _git_tree(root: Path) -> None:
    subprocess.run(["git", "init", "-q", str(root)], check=True)


def cache_restore(root: Path, env: dict[str, str], pairs: int, mb: int, files: int) -> dict:
    python = sys.executable
    _fill_cache(root / "inductor", total_mb=mb, files=files)
    snap = [*ENVGUARD, "snapshot", "--python", python, "--name", "cache", "--keep-cache"]
    _run([*snap, "--force"], cwd=root, env=env)
    data = json.loads((root / "snapshots" / "cache.json").read_text())
    (kept,) = [c for c in data["caches"] if c["kind"] == "inductor"]
    archive = next((root / "snapshots" / ".store" / "sha256").rglob(kept["archive"]["sha256"]))
    restore = [*ENVGUARD, "restore", "cache", "--venv", sys.prefix, "--execute"]
    ours, tars = [], []
    for _ in range(pairs):
        shutil.rmtree(root / "inductor")
        for old in root.glob("inductor.envguard-displaced-*"):
            shutil.rmtree(old)
        ours.append(_run(restore, cwd=root, env=env))
        into = root / "tar-out"
        shutil.rmtree(into, ignore_errors=True)
        into.mkdir()
        tars.append(_run(["tar", "-xzf", str(archive), "-C", str(into)], cwd=root, env=env))
    return {
        "what": f"restore a {mb} MB, {files}-file compile cache",
        "envguard_s": statistics.median(ours),
        "peer": "tar -xzf (same archive)",
        "peer_s": statistics.median(tars),
        "goal": "<= 2x",
        "limit": 2.0,
        "archive_mb": kept["archive"]["compressed"] / (1 << 20),
    }


def files_restore(root: Path, env: dict[str, str], pairs: int) -> dict:
    code = root / "code"
    code.mkdir()
    names = []
    for i in range(100):
        path = code / f"mod{i:03d}.py"
        path.write_text(f"# module {i}\n" + "x = 1\n" * 200)
        names += ["--file", str(path)]
    snap = [*ENVGUARD, "snapshot", "--python", sys.executable, "--name", "files", "--keep-files"]
    _run([*snap, *names, "--force"], cwd=root, env=env)
    restore = [*ENVGUARD, "restore", "files", "--venv", sys.prefix, "--execute"]
    times = []
    for _ in range(pairs):
        for i in range(100):
            (code / f"mod{i:03d}.py").write_text("hacked\n")
        times.append(_run(restore, cwd=root, env=env))
        for kept in code.glob("*.envguard-displaced-*"):
            kept.unlink()
    return {
        "what": "restore and verify 100 tracked files (whole command)",
        "envguard_s": statistics.median(times),
        "peer": "absolute limit",
        "peer_s": 1.0,
        "goal": "< 1 s",
        "limit": 1.0,
    }


def packages_restore(root: Path, env: dict[str, str], pairs: int) -> dict:
    sys.path.insert(0, str(ROOT / "src"))
    from envguard.testing import make_wheel
    from envguard.tools import find_uv

    uv = find_uv()
    wheels = root / "wheels"
    for i in range(60):
        make_wheel(wheels, f"pkg{i:02d}", "1.0")
    make_wheel(wheels, "extra", "1.0")
    source = ["--offline", "--no-index", "--find-links", str(wheels)]
    venv = root / "pkgvenv"
    _run([uv, "venv", "-q", "--python", sys.executable, str(venv)], cwd=root, env=env)
    pins = [f"pkg{i:02d}==1.0" for i in range(60)]
    install = [uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), *source]
    _run([*install, *pins], cwd=root, env=env)
    snap = [*ENVGUARD, "snapshot", "--python", str(venv), "--name", "pkgs", "--force"]
    _run(snap, cwd=root, env=env)
    ours, rebuilds = [], []
    for _ in range(pairs):
        for times, command in ((ours, "restore"), (rebuilds, "rebuild")):
            _run([*install, "extra==1.0"], cwd=root, env=env)  # the pollution
            argv = [*ENVGUARD, command, "pkgs", "--venv", str(venv), "--execute", "--no-backup"]
            times.append(_run([*argv, *source], cwd=root, env=env))
    return {
        "what": "restore --execute of packages (61 -> 60 pins)",
        "envguard_s": statistics.median(ours),
        "peer": "envguard rebuild --execute",
        "peer_s": statistics.median(rebuilds),
        "goal": "<= 1.3x",
        "limit": 1.3,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--cache-mb", type=int, default=350)
    parser.add_argument("--cache-files", type=int, default=20000)
    args = parser.parse_args()
    compileall.compile_dir(str(ROOT / "src" / "envguard"), quiet=1)
    with tempfile.TemporaryDirectory(prefix="envguard-bench-restore-") as tmp:
        root = Path(tmp)
        _git_tree(root)
        env = _env(root)
        rows = [
            files_restore(root, env, args.pairs),
            packages_restore(root, env, args.pairs),
            cache_restore(root, env, args.pairs, args.cache_mb, args.cache_files),
        ]
    for row in rows:
        ratio = row["envguard_s"] / row["peer_s"]
        if row["peer"] == "absolute limit":
            verdict = "PASS" if row["envguard_s"] < row["limit"] else "MISS"
            print(f"{row['what']}: {row['envguard_s']:.3f} s ({row['goal']}) {verdict}")
        else:
            verdict = "PASS" if ratio <= row["limit"] else "MISS"
            print(
                f"{row['what']}: envguard {row['envguard_s']:.3f} s, {row['peer']}"
                f" {row['peer_s']:.3f} s, {ratio:.2f}x ({row['goal']}) {verdict}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
