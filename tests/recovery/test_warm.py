"""restore says whether a kept compile cache will hit where it is restored; --warm CMD runs
a warm-up after the restore, bounded, and says how long it took."""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from envguard.recovery.restore import will_hit
from envguard.snapshots.models import Cache, CacheBuild, CompileKey, Compiler, TorchBuild
from factories import envguard_cli as envguard
from factories import snapshot

ENTRY = (
    b"\x8c\x1btorch._inductor.output_code\x94\n# torch version: 2.13.0+cpu\n"
    b"# torch git version: cf30153c4c131c8164ee7798e5022d810682e2cb\n\x94"
    b"\x8cV[c7zj4qytmety6keurs3hsh5wn7foxp3dqx4kym2ucszzcb2ngrf]"
    b" inductor_config[cpp.cxx]: (None, 'g++')\x94"
)


def _snap(cxx: str = "g++", torch: str = "2.13.0+cpu", builds: tuple[CacheBuild, ...] = ()) -> Any:
    cache = Cache(kind="inductor", path="/c", exists=True, files=3, bytes=10, builds=builds)
    return snapshot(
        torch=TorchBuild(version=torch, git_version="abc"),
        compile=CompileKey(cxx=Compiler(name=cxx, version="g++ 12")),
        caches=(cache,),
    )


def test_will_hit_in_words() -> None:
    good = _snap()
    assert will_hit(good.caches[0], good, good) == "it will hit: nothing in its key changed"
    said = will_hit(good.caches[0], good, _snap(cxx="clang++"))
    assert said is not None and said.startswith(
        "it will miss here: the C++ compiler g++ -> clang++"
    )
    built = (CacheBuild(torch="2.12.0", git_version="old", entries=4),)
    old = _snap(builds=built)
    assert will_hit(old.caches[0], old, old) == (
        "it will miss here: built by torch 2.12.0 for another torch (2.13.0+cpu)"
    )
    other = Cache(kind="cache", path="/data", exists=True, files=1)
    assert will_hit(other, good, good) is None  # no compile cache whose key is known


@pytest.fixture
def kept(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A snapshot with an inductor cache kept in the store, then the cache deleted."""
    cache = tmp_path / "inductor"
    entry = cache / "fxgraph" / "ab" / "fabc" / "entry"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(ENTRY)
    env = {"TORCHINDUCTOR_CACHE_DIR": str(cache), "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    env["CXX"] = "g++"
    done = envguard(
        "snapshot", "--python", sys.executable, "--name", "good", "--keep-cache",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "snapshots" / "good.json").read_text())
    (recorded,) = [c for c in data["caches"] if c["kind"] == "inductor"]
    assert recorded["builds"][0]["cxx"] == "g++" and recorded["archive"]["files"] == 1
    shutil.rmtree(cache)
    return tmp_path, cache, env


def _cache_line(out: str) -> str:
    return next(line for line in out.splitlines() if "cache inductor" in line)


def test_restore_says_the_kept_cache_will_hit(kept: tuple[Path, Path, dict[str, str]]) -> None:
    work, cache, env = kept
    out = envguard("restore", "good", "--venv", sys.prefix, "--execute", cwd=work, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    line = _cache_line(out.stdout)
    assert "restored" in line and "it will hit: nothing in its key changed" in line
    assert (cache / "fxgraph" / "ab" / "fabc" / "entry").read_bytes() == ENTRY


def test_restore_says_why_the_kept_cache_will_miss(
    kept: tuple[Path, Path, dict[str, str]],
) -> None:
    work, _cache, env = kept
    env = {**env, "CXX": "clang++"}
    out = envguard("restore", "good", "--venv", sys.prefix, cwd=work, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    line = _cache_line(out.stdout)
    assert "planned" in line
    assert (
        "it will miss here: the C++ compiler g++ -> clang++ ($CXX) is in every graph's key" in line
    )


def test_warm_runs_after_the_restore_and_says_how_long(
    kept: tuple[Path, Path, dict[str, str]],
) -> None:
    work, cache, env = kept
    code = "import os, time; time.sleep(0.3); print('compiled in', os.environ['VIRTUAL_ENV'])"
    warm = f'{sys.executable} -c "{code}"'
    out = envguard(
        "restore", "good", "--venv", sys.prefix, "--execute", "--warm", warm, cwd=work, env=env
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"compiled in {sys.prefix}" in out.stdout  # its output shown, the venv active
    match = re.search(r"warm-up: ([0-9.]+) s \(exit 0\)", out.stdout)
    assert match and 0.3 <= float(match.group(1)) < 30, out.stdout
    assert cache.is_dir()  # after the restore


def test_warm_is_stopped_at_its_timeout_and_fails(
    kept: tuple[Path, Path, dict[str, str]],
) -> None:
    work, _cache, env = kept
    started = time.monotonic()
    out = envguard(
        "restore", "good", "--venv", sys.prefix, "--execute",
        "--warm", "sh -c 'sleep 60 & sleep 60'", "--warm-timeout", "1",
        cwd=work, env=env,
    )  # fmt: skip
    assert time.monotonic() - started < 60
    assert out.returncode == 1
    assert "warm-up: stopped after 1" in out.stdout and "(--warm-timeout 1)" in out.stdout
    failing = envguard(
        "restore", "good", "--venv", sys.prefix, "--execute", "--warm", "false", cwd=work, env=env
    )
    assert failing.returncode == 1 and "(exit 1)" in failing.stdout
    refused = envguard("restore", "good", "--via", "sh -c", "--warm", "true", cwd=work, env=env)
    assert refused.returncode == 2 and "--warm runs on this host" in refused.stderr
