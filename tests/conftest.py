from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from factories import make_torch_wheel, make_venv, make_wheel, uv_install

# No per-example deadline: one example stalled past hypothesis's 200 ms by a busy CI machine
# (a lost time slice, a long collection) failed a whole run as "unreliable timings".
settings.register_profile("envguard", deadline=None)
settings.load_profile("envguard")

# The "good" training stack and the inference stack that polluted it.
GOOD = [
    "torch==2.11.0+cu128",
    "nvidia-cudnn-cu12==9.1.0.70",
    "nvidia-nccl-cu12==2.21.5",
    "triton==3.1.0",
    "transformers==4.46.0",
    "safetensors==0.4.5",
    "datasets==3.1.0",
]
POLLUTION = ["sglang==0.4.0", "flashinfer-python==0.2.0", "orjson==3.10.0"]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep this machine's own pip/uv configuration and caches out of every test."""
    for name in list(os.environ):
        # A CI job's own GITHUB_* files are not the tests' to write.
        prefixes = ("PIP_", "UV_INDEX", "UV_EXTRA_INDEX", "UV_FIND_LINKS", "GITHUB_")
        if name.startswith(prefixes) or name in (
            "VIRTUAL_ENV",
            "CONDA_PREFIX",
            "HF_TOKEN",
            # Colour and width forced by the machine (rich reads them) change the output
            # that tests compare.
            "FORCE_COLOR",
            "CLICOLOR_FORCE",
            "TTY_COMPATIBLE",
            "TTY_INTERACTIVE",
            "COLUMNS",
            "LINES",
        ):
            monkeypatch.delenv(name, raising=False)
    base = tmp_path_factory.getbasetemp()
    monkeypatch.setenv("UV_OFFLINE", "1")
    monkeypatch.setenv("UV_NO_CONFIG", "1")
    monkeypatch.setenv("UV_PYTHON_DOWNLOADS", "never")
    monkeypatch.setenv("UV_CACHE_DIR", str(base / "uv-cache"))
    monkeypatch.setenv("NO_COLOR", "1")
    # Default caches point into the test's temp area, never at the machine's real ones.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(base / "no-inductor-cache"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(base / "no-triton-cache"))
    # The probe's RECORD fingerprint cache: per test session, never the machine's own.
    monkeypatch.setenv("XDG_CACHE_HOME", str(base / "xdg-cache"))
    # The snapshot signing key (snapshots/signing.py): per session, never the user's own.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(base / "xdg-config"))


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny offline wheels for the good stack, its variants and the pollution."""
    wh = tmp_path_factory.mktemp("wheelhouse")
    make_torch_wheel(wh, "2.11.0+cu128", "12.8")
    make_torch_wheel(wh, "2.11.0+cu130", "13.0")
    for req in GOOD + POLLUTION:
        name, version = req.split("==")
        if name != "torch":
            make_wheel(wh, name, version)
    make_wheel(wh, "transformers", "4.47.0")
    make_wheel(wh, "cli-tool", "1.0", scripts={"cli-tool": "cli_tool:main"})
    return wh


@pytest.fixture
def venv_factory(tmp_path: Path, wheelhouse: Path) -> Callable[..., Path]:
    """make(name, *reqs) -> a real venv with ``reqs`` installed offline by uv."""

    def make(name: str = ".venv", *reqs: str) -> Path:
        venv = tmp_path / name
        make_venv(venv)
        if reqs:
            uv_install(venv, wheelhouse, *reqs)
        return venv

    return make


@pytest.fixture
def good_venv(venv_factory: Callable[..., Path]) -> Path:
    return venv_factory(".venv", *GOOD)


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    yield tmp_path
