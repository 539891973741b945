"""The field corpus: real venvs and uv projects built from the package registry.

Every test under tests/field/ carries the ``field`` marker (added here), which the quick
suite leaves out (pyproject's addopts); ``pytest -m field`` runs it, and .ci/run does after
the quick suite. The packages come through uv's cache kept outside the clone
(``$ENVGUARD_FIELD_CACHE``, default ``~/.cache/envguard-field``): the first run downloads a
few GB, later runs link from it. A registry that cannot be reached skips the corpus with
one line.

The shared cache is never edited by a test: an edit through uv's hardlinks would reach
every later member. Tests that edit through hardlinks build their venv from a cache of
their own (``private_cache``). A member whose files do not hash to their RECORD when it is
built (a cache left half-written, or edited by hand) has its packages dropped from the
cache and is built again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from field.corpus import CACHE, HERE, NETWORK_WORDS, UV, Corpus, uv_env


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.field)


@pytest.fixture(scope="session")
def registry() -> None:
    """Skip the corpus, in one line, when the package registry cannot be reached."""
    try:
        done = subprocess.run(
            [UV, "pip", "compile", "--no-header", "--no-cache", "-"],
            input="six\n",
            env=uv_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        pytest.skip("field corpus: the package registry did not answer in 60 s")
    if done.returncode != 0:
        line = next((ln for ln in done.stderr.splitlines() if ln.strip()), "no answer")
        if any(word in done.stderr.lower() for word in NETWORK_WORDS):
            pytest.skip(f"field corpus: the package registry cannot be reached ({line[:160]})")
        raise AssertionError(f"uv could not resolve six:\n{done.stderr}")


def _same_device(a: Path, b: Path) -> bool:
    return a.stat().st_dev == b.stat().st_dev


# The most the corpus holds at once: pip copies CUDA torch whole (5.5 GB), the uv members
# link from the cache, the compile-cache test copies a CPU torch: 10.4 GB at most (measured).
NEEDS_FREE = 12 * 1024**3


def _enough_room(where: Path) -> None:
    free = shutil.disk_usage(where).free
    if free < NEEDS_FREE:
        pytest.fail(
            f"field corpus: {free / 1024**3:.1f} GB free at {where}; it needs"
            f" {NEEDS_FREE // 1024**3} GB (pip copies CUDA torch whole)",
            pytrace=False,
        )


@pytest.fixture(scope="session", autouse=True)
def _leaves_nothing(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """A field run that passed leaves none of its temporary folders (GBs of venvs: pytest
    keeps three runs' worth). Removed at the end only: pytest's retention policy "failed"
    removes each test's folder as it passes, and the next test given the same name then
    installs, through uv's cache keyed by path, the wheel the last one built there."""
    yield
    if request.session.testsfailed == 0:
        shutil.rmtree(tmp_path_factory.getbasetemp(), ignore_errors=True)


@pytest.fixture(scope="session")
def corpus(registry: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    """The members, built on first use into a folder on the cache's filesystem (uv links
    only within one), removed at the end of the session: a pip member alone is 5.5 GB."""
    CACHE.mkdir(parents=True, exist_ok=True)
    base = tmp_path_factory.mktemp("corpus")
    if not _same_device(base, CACHE):
        base = CACHE / "runs" / f"{os.getpid()}"
        base.mkdir(parents=True, exist_ok=True)
    _enough_room(base)
    yield Corpus(base)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def field_env(registry: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The corpus's uv settings for envguard under test, run from ``tmp_path`` (a git work
    tree, so a snapshot records a repo): the registry reachable, the corpus's cache."""
    for key, value in uv_env().items():
        if key.startswith("UV_"):
            monkeypatch.setenv(key, value)
    monkeypatch.delenv("UV_OFFLINE", raising=False)
    monkeypatch.chdir(tmp_path)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    return tmp_path


@pytest.fixture
def private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A uv cache of this test's own, for edits through links: on the filesystem of the
    test's venvs (``tmp_path``, ``field_env``), as uv links only within one (across two it
    copies, and the tests of edits through links fail); out of ``field_env``'s work tree."""
    where = tmp_path_factory.mktemp("uv-cache")
    yield where
    shutil.rmtree(where, ignore_errors=True)
