"""Fixtures for bench/run.py: a cached 300-distribution venv with real torch, its wheelhouse,
a local PyTorch-style index, a synthetic compile cache and synthetic snapshots."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envguard.snapshots.models import Snapshot

BENCH = Path(__file__).resolve().parent
CACHE = BENCH / ".cache"
TORCH = "2.13.0"
FAKES = 289  # with torch, its 8 dependencies, pip and setuptools: 300 distributions
# Bump when the recipe below changes, so a cached venv built the old way is rebuilt.
RECIPE = "1"

Log = Callable[[str], None]


class FixtureError(Exception):
    """A fixture could not be built; the targets that need it are reported as ERROR."""


@dataclass(frozen=True)
class Tools:
    """The programs both sides of a comparison use."""

    base_python: Path  # the python3 the venvs are made from
    uv: str
    envguard: str


def find_tools() -> Tools:
    """envguard and uv from the interpreter running this script (the dev venv)."""
    from envguard.tools import find_uv

    here = Path(sys.executable).parent
    envguard = shutil.which("envguard", path=str(here)) or shutil.which("envguard")
    if envguard is None:
        raise FixtureError("envguard is not installed next to this interpreter, nor on PATH")
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    return Tools(
        base_python=base if base.exists() else Path(sys.executable), uv=find_uv(), envguard=envguard
    )


def bench_env(work: Path, tools: Tools) -> dict[str, str]:
    """The environment of every measured command: this machine's pip/uv settings left out,
    uv's cache kept under bench/.cache (warm across runs), default compile caches empty."""
    drop = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "CONDA_PREFIX", "ENVGUARD_UV")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in drop and not k.startswith(("PIP_", "UV_", "TORCHINDUCTOR_", "TRITON_"))
    }
    env.update(
        UV_CACHE_DIR=str(CACHE / "uv"),
        UV_NO_CONFIG="1",
        UV_OFFLINE="1",
        UV_PYTHON_DOWNLOADS="never",
        ENVGUARD_UV=tools.uv,
        PIP_CONFIG_FILE=os.devnull,
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_NO_INPUT="1",
        TORCHINDUCTOR_CACHE_DIR=str(work / "no-inductor-cache"),
        TRITON_CACHE_DIR=str(work / "no-triton-cache"),
    )
    return env


def run(argv: list[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> str:
    """Run a setup command; FixtureError with its last output line when it fails."""
    proc = subprocess.run(
        argv,
        env=None if env is None else dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        raise FixtureError(
            f"{' '.join(argv[:4])} ... exited {proc.returncode}: {lines[-1] if lines else ''}"
        )
    return proc.stdout


@dataclass(frozen=True)
class TorchVenv:
    venv: Path
    wheelhouse: Path  # every wheel the venv holds, torch included
    torch_wheel: Path
    distributions: int


def _fake_wheels(wheelhouse: Path) -> list[str]:
    """Tiny wheels of a few files each, of varied sizes; returns their pins."""
    from envguard.testing import make_wheel

    pins = []
    for i in range(FAKES):
        name, version = f"bench-pkg-{i:03d}", f"1.{i % 10}.{i}"
        module = name.replace("-", "_")
        files: dict[str, str | bytes] = {f"{module}/__init__.py": f"VERSION = {version!r}\n"}
        for j in range(i % 5):
            files[f"{module}/part{j}.py"] = "# filler\n" * (20 * (1 + (i * 7 + j) % 13))
        make_wheel(wheelhouse, name, version, files=files)
        pins.append(f"{name}=={version}")
    return pins


def torch_venv(tools: Tools, *, log: Log) -> TorchVenv:
    """The ~300-distribution venv with real torch, built once and cached in bench/.cache."""
    venv, wheelhouse = CACHE / "venv300", CACHE / "wheelhouse"
    stamp = venv / ".bench-recipe"
    wanted = f"recipe {RECIPE}, torch {TORCH}, {FAKES} fakes, {tools.base_python}\n"
    python = venv / "bin" / "python"
    if not (stamp.is_file() and stamp.read_text() == wanted):
        log(f"building {venv} (cached for later runs; about a minute)")
        shutil.rmtree(venv, ignore_errors=True)
        shutil.rmtree(wheelhouse, ignore_errors=True)
        run([str(tools.base_python), "-m", "venv", str(venv)])
        # torch and its dependencies from wherever this machine's pip config finds them.
        try:
            run(
                [
                    str(python),
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "-d",
                    str(wheelhouse),
                    f"torch=={TORCH}",
                ]
            )
        except FixtureError as exc:
            raise FixtureError(
                f"cannot get torch=={TORCH}: {exc}",
            ) from None
        # The venv's own pip, so that a rebuild can pin it too.
        bundled = run(
            [str(python), "-c", "import ensurepip, os; print(os.path.dirname(ensurepip.__file__))"]
        ).strip()
        for wheel in (Path(bundled) / "_bundled").glob("pip-*.whl"):
            shutil.copy2(wheel, wheelhouse)
        run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-index",
                "--find-links",
                str(wheelhouse),
                f"torch=={TORCH}",
            ]
        )
        pins = _fake_wheels(wheelhouse)
        env = {**os.environ, "UV_CACHE_DIR": str(CACHE / "uv"), "UV_NO_CONFIG": "1"}
        env.pop("VIRTUAL_ENV", None)
        run(
            [
                tools.uv,
                "pip",
                "install",
                "--quiet",
                "--offline",
                "--no-index",
                "--find-links",
                str(wheelhouse),
                "--python",
                str(venv),
                *pins,
            ],
            env=env,
        )
        stamp.write_text(wanted)
    torch_wheels = sorted(wheelhouse.glob(f"torch-{TORCH}*.whl"))
    if not torch_wheels:
        raise FixtureError(f"no torch-{TORCH}*.whl in {wheelhouse}; delete {CACHE} and rerun")
    freeze = run([tools.uv, "pip", "freeze", "--python", str(venv)])
    count = sum(1 for ln in freeze.splitlines() if ln.strip() and not ln.startswith("#"))
    return TorchVenv(venv, wheelhouse, torch_wheels[0], count)


# The field-like venv: real distributions with real RECORD and METADATA sizes (torch's CPU
# build, transformers, datasets, jupyter and everything they pull in).
REAL = ("torch==2.13.0", "transformers", "datasets", "jupyter")
REAL_RECIPE = "1"


def real_venv(tools: Tools, *, log: Log) -> TorchVenv:
    """A venv of real distributions from the registry (wheels cached in bench/.cache), pip's
    own modules byte-compiled so that the `pip freeze` peer is timed as users run it."""
    venv, wheelhouse = CACHE / "realvenv", CACHE / "realwheels"
    stamp = venv / ".bench-recipe"
    wanted = f"recipe {REAL_RECIPE}, {' '.join(REAL)}, {tools.base_python}\n"
    python = venv / "bin" / "python"
    if not (stamp.is_file() and stamp.read_text() == wanted):
        log(f"building {venv} from real distributions (cached for later runs; a few minutes)")
        shutil.rmtree(venv, ignore_errors=True)
        run([str(tools.base_python), "-m", "venv", str(venv)])
        have = {w.name for w in wheelhouse.glob("*.whl")} if wheelhouse.is_dir() else set()
        if not any(n.startswith("torch-") for n in have):
            run([str(python), "-m", "pip", "download", "--quiet", "-d", str(wheelhouse), *REAL])
        run(
            [
                str(python), "-m", "pip", "install", "--quiet", "--no-index",
                "--find-links", str(wheelhouse), *REAL,
            ]
        )  # fmt: skip
        stamp.write_text(wanted)
    compile_site(venv)
    torch_wheels = sorted(wheelhouse.glob("torch-*.whl"))
    freeze = run([tools.uv, "pip", "freeze", "--python", str(venv)])
    count = sum(1 for ln in freeze.splitlines() if ln.strip() and not ln.startswith("#"))
    return TorchVenv(venv, wheelhouse, torch_wheels[0], count)


def warm_probe_caches(
    envguard: str, venv: Path, *, env: Mapping[str, str], cwd: Path, runs: int = 40
) -> int:
    """Snapshot ``venv`` until the probe's caches hold it all; the number of runs it took.

    The quick check compares at most 3 s of bytecode with its source a run and keeps what it
    compared, so the first snapshots of a venv (or the first after the probe's code
    changed: its caches are tied to it) each leave thousands of files for the next one.
    The timed runs measure what a user's second snapshot of an unchanged venv costs."""
    for run_number in range(1, runs + 1):
        proc = subprocess.run(
            [envguard, "snapshot", "--python", str(venv), "--out", "-"],
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0 or "were not compared with their source" not in proc.stderr:
            return run_number
    return runs


def compile_site(prefix: Path) -> None:
    """Byte-compile every module under ``prefix``'s site-packages (idempotent, quiet):
    PYTHONDONTWRITEBYTECODE may be set and uv writes no bytecode, and a benchmark that
    compiles from source at every run measures the compiler."""
    import compileall

    for site in prefix.glob("lib/python*/site-packages"):
        compileall.compile_dir(str(site), quiet=2, workers=0)


def git_work_tree(root: Path) -> None:
    """``root`` as a small git work tree with one commit (where users run envguard)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.py").write_text("print('tok_s=21500')\n")
    (root / "README.md").write_text("a training repo\n")
    ident = ["-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    run(["git", "init", "-q", str(root)])
    run(["git", "-C", str(root), "add", "train.py", "README.md"])
    run(["git", "-C", str(root), *ident, "commit", "-q", "-m", "bench"])


def torch_index(root: Path, torch_wheel: Path) -> str:
    """A local PEP 503 index per variant (``root/cpu/torch/``); returns its file:// base."""
    from envguard.testing import make_simple_index

    variant = torch_wheel.name.split("-")[1].partition("+")[2] or "cpu"
    return make_simple_index(root, {variant: [torch_wheel]})


def compile_cache(root: Path, *, tops: int = 20, subdirs: int = 10, files: int = 100) -> int:
    """A tree shaped like an inductor cache: 20 x 10 directories of 100 small files of varied
    sizes (20,000 files); returns the file count."""
    count = 0
    for t in range(tops):
        for s in range(subdirs):
            folder = root / f"{t:02x}" / f"c{t:02x}{s:02x}"
            folder.mkdir(parents=True)
            for f in range(files):
                size = 64 + (t * 7919 + s * 104729 + f * 1299709) % 16384
                (folder / f"k{f:03d}.py").write_bytes(b"x" * size)
                count += 1
    return count


def snapshot_pair(n: int = 5000, changed: float = 0.05) -> tuple[Snapshot, Snapshot]:
    """Two synthetic Snapshots of ``n`` packages; ``changed`` of them differ (bumped,
    rebuilt with the same version, removed or added)."""
    from datetime import datetime, timezone

    from envguard.snapshots.models import Interpreter, Package, Snapshot

    def package(i: int, version: str, fingerprint: str) -> Package:
        name = f"pkg-{i:05d}"
        return Package(
            name=name,
            display_name=name,
            version=version,
            installer="uv",
            location="/venv/lib/python3.11/site-packages",
            fingerprint=fingerprint,
        )

    def snap(name: str, packages: list[Package]) -> Snapshot:
        return Snapshot(
            name=name,
            created=datetime(2024, 1, 1, tzinfo=timezone.utc),
            host="gpu01",
            user="trainer",
            envguard_version="0.1.0",
            interpreter=Interpreter(
                version="3.11.7",
                implementation="cpython",
                executable="/venv/bin/python",
                prefix="/venv",
                base_prefix="/usr",
                is_venv=True,
                os="linux",
                machine="x86_64",
            ),
            packages=tuple(sorted(packages, key=lambda p: p.name)),
        )

    expected, actual = [], []
    step = round(1 / changed)
    for i in range(n):
        version = f"{1 + i % 7}.{i % 13}.{i % 17}"
        expected.append(package(i, version, f"fp-{i}"))
        kind = (i // step) % 4 if i % step == 0 else None
        if kind == 0:
            actual.append(package(i, version + ".post1", f"fp-{i}-bumped"))
        elif kind == 1:
            actual.append(package(i, version, f"fp-{i}-rebuilt"))
        elif kind == 2:
            continue  # removed
        else:
            actual.append(package(i, version, f"fp-{i}"))
            if kind == 3:
                actual.append(package(n + i, "0.1.0", f"fp-new-{i}"))  # added
    return snap("good", expected), snap("live", actual)


def fleet_snapshots(folder: Path, hosts: int = 1000, packages: int = 400) -> int:
    """``hosts`` snapshot files of ``packages`` packages each, three hosts odd (another NCCL,
    an extra package, another env value); returns how many were written."""
    from envguard.snapshots import store
    from envguard.snapshots.models import Package

    base, _ = snapshot_pair(packages, 0.05)  # the first of the pair: unchanged packages
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(hosts):
        snap = base.model_copy(
            update={"name": f"node{i:04d}", "host": f"node{i:04d}", "env": {"NCCL_ALGO": "Ring"}}
        )
        if i == 17:
            snap = snap.model_copy(update={"env": {"NCCL_ALGO": "Tree"}})
        if i == 404:
            extra = Package(
                name="sglang",
                display_name="sglang",
                version="0.4.0",
                location="/venv/lib/python3.11/site-packages",
            )
            snap = snap.model_copy(update={"packages": (*snap.packages, extra)})
        if i == 911:
            bumped = tuple(
                p.model_copy(update={"version": "9.9"}) if p.name == "pkg-00007" else p
                for p in snap.packages
            )
            snap = snap.model_copy(update={"packages": bumped})
        (folder / f"node{i:04d}.json").write_text(store.dumps(snap))
    return hosts


FAKE_SSH = """#!/bin/sh
# ssh HOST COMMAND...: host N answers after a latency of its own, then runs the command.
host="$1"; shift
n="${host#node}"
sleep "0.$(( (n % 16) * 3 + 5 ))"
exec sh -c "$*"
"""


def fake_ssh(folder: Path, hosts: int) -> tuple[Path, float, float]:
    """A fake `ssh` on a PATH folder; returns (folder, slowest latency, sum of latencies)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ssh").write_text(FAKE_SSH)
    (folder / "ssh").chmod(0o755)
    latencies = [((n % 16) * 3 + 5) / 100 for n in range(hosts)]
    return folder, max(latencies), sum(latencies)
