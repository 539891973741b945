"""The real torch stack the gate's tests run on: venvs with torch 2.13.0+cpu and envguard
from this checkout (tests/distributed).

Needs the torch wheel in /opt/wheels (or ENVGUARD_TORCH_WHEELS) and an index holding
torch's dependencies and envguard's (ENVGUARD_TEST_INDEX, default the local
/opt/pypi/simple); the tests that use them are skipped where they are not.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from envguard.testing import make_wheel
from factories import UV, make_venv, run

ROOT = Path(__file__).resolve().parents[1]
WHEELS = Path(os.environ.get("ENVGUARD_TORCH_WHEELS", "/opt/wheels"))
INDEXES = os.environ.get(
    "ENVGUARD_TEST_INDEX", "file:///opt/pypi/simple file:///opt/pypi-more/simple"
).split()
TORCH = "torch==2.13.0+cpu"

NEEDS_TORCH = pytest.mark.skipif(
    not list(WHEELS.glob("torch-2.13.0+cpu-*.whl"))
    or not Path(INDEXES[0].removeprefix("file://")).is_dir(),
    reason="needs the torch 2.13.0+cpu wheel and a local index for its dependencies",
)


@pytest.fixture(scope="session")
def torch_venvs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three venvs: torch + envguard + gatepkg 1.0 (twice) and one with gatepkg 1.1."""
    base = tmp_path_factory.mktemp("torch-venvs")
    wheelhouse = base / "wheels"
    wheelhouse.mkdir()
    make_wheel(wheelhouse, "gatepkg", "1.0")
    make_wheel(wheelhouse, "gatepkg", "1.1")
    venvs = {}
    for name, gatepkg in (("a", "1.0"), ("same", "1.0"), ("odd", "1.1")):
        venv = base / name
        make_venv(venv)
        argv = [UV, "pip", "install", "--quiet", "--offline", "--python", str(venv)]
        argv += ["--link-mode", "hardlink", "--find-links", str(WHEELS)]
        argv += ["--find-links", str(wheelhouse), "--index-url", INDEXES[0]]
        for extra in INDEXES[1:]:
            argv += ["--extra-index-url", extra]
        deps = ["typer<0.29", "rich", "pydantic", "packaging"]  # envguard's, for its CLI
        run([*argv, TORCH, "numpy", f"gatepkg=={gatepkg}", *deps])
        # envguard from this checkout, built by hatchling; --no-deps: the local index may
        # lack the floor of a dependency (packaging 26.4) that the gate does not need.
        run([*argv, "--no-deps", str(ROOT)])
        venvs[name] = venv
    return venvs


def run_both(
    lines: Sequence[Sequence[str]], envs: Sequence[Mapping[str, str]], cwd: Path, limit: float
) -> list[subprocess.CompletedProcess[str]]:
    """Both launcher lines at once; each killed by PID if still running at ``limit``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "PET_", "RANK"))}
    procs = [
        subprocess.Popen(
            list(line),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**base, **env},
            cwd=cwd,
        )
        for line, env in zip(lines, envs, strict=True)
    ]
    done = []
    end = time.monotonic() + limit
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=max(1.0, end - time.monotonic()))
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return done
