"""The RECORD fingerprint cache on the target: an unchanged venv is not hashed again, a
rebuilt wheel of the same version still is, and a damaged or unwritable cache is ignored."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from envguard.probe.payload import probe_payload
from envguard.testing import make_wheel
from factories import make_venv, uv_install

CACHE = Path("envguard") / "fingerprints-v2"


def shard(xdg: Path) -> Path:
    """The one per-venv file the probe of the ``venv`` fixture writes."""
    (found,) = (xdg / CACHE).glob("*.json")
    return found


def probe(venv: Path, env: dict[str, str], **args: Any) -> dict[str, str]:
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-I", "-S", "-"],
        input=probe_payload({"default_caches": False, **args}),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    return {p["name"]: p["fingerprint"] for p in json.loads(proc.stdout)["packages"]}


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    wh = tmp_path / "wh"
    make_wheel(wh, "alpha", "1.0")
    make_wheel(wh, "beta", "2.0")
    venv = tmp_path / "venv"
    make_venv(venv)
    uv_install(venv, wh, "alpha==1.0", "beta==2.0")
    return venv


def test_the_cache_gives_the_same_fingerprints_and_catches_a_rebuild(
    venv: Path, tmp_path: Path
) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    cold = probe(venv, env)
    assert shard(tmp_path / "xdg").is_file()
    warm = probe(venv, env)
    assert warm == cold == probe(venv, env, fingerprint_cache=False)
    # A rebuilt wheel, same version: reinstalled, so RECORD is new and hashed again.
    wh = tmp_path / "wh2"
    make_wheel(wh, "alpha", "1.0", salt="rebuilt")
    uv_install(venv, wh, "alpha==1.0", extra=["--reinstall"])
    after = probe(venv, env)
    assert after["alpha"] != cold["alpha"] and after["beta"] == cold["beta"]


@pytest.mark.parametrize("damage", ["garbage", "types", "fifo", "unwritable"])
def test_a_damaged_or_unwritable_cache_is_ignored(venv: Path, tmp_path: Path, damage: str) -> None:
    xdg = tmp_path / "xdg"
    env = {**os.environ, "XDG_CACHE_HOME": str(xdg)}
    honest = probe(venv, env, fingerprint_cache=False)
    if damage == "unwritable":  # a file where the cache folder would be (root ignores modes)
        (xdg / CACHE).parent.mkdir(parents=True, exist_ok=True)
        (xdg / CACHE).write_text("not a folder")
    else:
        probe(venv, env)
        path = shard(xdg)
        path.unlink()
        if damage == "garbage":
            path.write_bytes(b"\x00{not json" * 100)
        elif damage == "types":
            path.write_text(json.dumps({"k": 5, "x": "not-a-hash", "y": ["z"]}))
        elif damage == "fifo":
            os.mkfifo(path)
    assert probe(venv, env) == honest


def test_each_venv_reads_only_its_own_small_file_and_old_ones_are_pruned(
    venv: Path, tmp_path: Path
) -> None:
    """One shared file grew with every venv ever probed (5 MB after a test run) and took
    longer to load than hashing: each venv has its own file, and there are at most 256."""
    xdg = tmp_path / "xdg"
    folder = xdg / CACHE
    folder.mkdir(parents=True)
    legacy = xdg / "envguard" / "fingerprints-v1.json"
    legacy.write_text(json.dumps({f"/gone/{i}/RECORD": "0" * 64 for i in range(1000)}))
    for i in range(300):  # other venvs' files, older than this run's
        other = folder / f"{i:032x}.json"
        other.write_text("{}")
        os.utime(other, ns=(i, i))
    env = {**os.environ, "XDG_CACHE_HOME": str(xdg)}
    probe(venv, env)
    files = sorted(folder.glob("*.json"))
    assert len(files) == 256 and not legacy.exists()
    mine = [f for f in files if f.stat().st_size > 2]
    assert len(mine) == 1 and len(json.loads(mine[0].read_text())) == 2  # alpha and beta
    assert not (folder / f"{0:032x}.json").exists()  # the oldest went first


def test_a_planted_fingerprint_for_another_file_is_never_used(venv: Path, tmp_path: Path) -> None:
    """Entries are keyed by the RECORD's path, device, inode, size and mtime: a forged entry
    for some other key changes nothing."""
    xdg = tmp_path / "xdg"
    env = {**os.environ, "XDG_CACHE_HOME": str(xdg)}
    honest = probe(venv, env, fingerprint_cache=False)
    probe(venv, env)
    planted = {f"/elsewhere/RECORD\0{i}": "0" * 64 for i in range(5)}
    shard(xdg).write_text(json.dumps(planted))
    assert probe(venv, env) == honest
