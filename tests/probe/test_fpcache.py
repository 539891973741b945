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

CACHE = Path("envguard") / "fingerprints-v1.json"


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
    assert (tmp_path / "xdg" / CACHE).is_file()
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
    path = xdg / CACHE
    if damage == "unwritable":  # a file where the cache folder would be (root ignores modes)
        xdg.mkdir()
        path.parent.write_text("not a folder")
    else:
        path.parent.mkdir(parents=True)
    if damage == "garbage":
        path.write_bytes(b"\x00{not json" * 100)
    elif damage == "types":
        path.write_text(json.dumps({"k": 5, "x": "not-a-hash", "y": ["z"]}))
    elif damage == "fifo":
        os.mkfifo(path)
    env = {**os.environ, "XDG_CACHE_HOME": str(xdg)}
    assert probe(venv, env) == probe(venv, env, fingerprint_cache=False)


def test_a_planted_fingerprint_for_another_file_is_never_used(venv: Path, tmp_path: Path) -> None:
    """Entries are keyed by the RECORD's path, device, inode, size and mtime: a forged entry
    for some other key changes nothing."""
    xdg = tmp_path / "xdg"
    env = {**os.environ, "XDG_CACHE_HOME": str(xdg)}
    honest = probe(venv, env, fingerprint_cache=False)
    (xdg / CACHE).parent.mkdir(parents=True, exist_ok=True)
    (xdg / CACHE).write_text(json.dumps({f"/elsewhere/RECORD\0{i}": "0" * 64 for i in range(5)}))
    assert probe(venv, env) == honest
