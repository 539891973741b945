"""The guard's stack: a CPU torch venv and an inference package that would swap torch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from envguard.testing import make_torch_wheel, make_wheel
from factories import UV, make_venv, run, uv_install


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(venv, wheelhouse): a CPU torch training venv, and an inference package whose
    install would swap torch for PyPI's CUDA wheel and pull numpy back."""
    wh = tmp_path / "wh"
    make_torch_wheel(wh, "2.13.0+cpu", None)
    make_wheel(wh, "torch", "2.14.1", files={"torch/__init__.py": ""})
    make_wheel(wh, "numpy", "2.1.0")
    make_wheel(wh, "numpy", "1.26.4")
    make_wheel(wh, "stackdep", "1.0")
    make_wheel(wh, "flashinfer-python", "0.2.0", requires=["torch"])
    make_wheel(
        wh,
        "sglang",
        "0.5.23",
        requires=["torch==2.14.1", "numpy<2", "flashinfer-python", "stackdep"],
    )
    make_wheel(wh, "six", "1.17.0")
    venv = tmp_path / ".venv"
    make_venv(venv)
    uv_install(venv, wh, "torch==2.13.0+cpu", "numpy==2.1.0")
    monkeypatch.chdir(tmp_path)
    return venv, wh


@pytest.fixture
def project(stack: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(venv, wheelhouse): the stack's venv as the environment of a uv project (in the
    current folder, no build system) that depends on torch and numpy, synced from its
    lock; uv finds the wheels through its variables (the suite runs with UV_NO_CONFIG)."""
    venv, wh = stack
    monkeypatch.setenv("UV_FIND_LINKS", str(wh))
    monkeypatch.setenv("UV_NO_INDEX", "1")
    Path("pyproject.toml").write_text(
        '[project]\nname = "trainer"\nversion = "0.1.0"\nrequires-python = ">=3.10"\n'
        'dependencies = ["torch>=2.13,<2.14", "numpy"]\n'
    )
    run([UV, "sync", "--quiet"])
    return venv, wh


@pytest.fixture(scope="module")
def pip_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder with two venvs: guarded/, with pip (from the wheel Python bundles), and
    other/; made once per module (slow to make): tests must leave them as they are."""
    import ensurepip

    base = tmp_path_factory.mktemp("pip")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("UV_OFFLINE", "1")
        mp.setenv("UV_NO_CONFIG", "1")
        mp.setenv("UV_CACHE_DIR", str(base / "uv-cache"))
        make_venv(base / "guarded")
        make_venv(base / "other")
        uv_install(base / "guarded", Path(ensurepip.__file__).parent / "_bundled", "pip")
    yield base
