"""Variables from an untrusted snapshot that point code loading at a folder or a host (a
compile cache, built extensions, remote modules, a cache server) are held for review: the
variables file has them commented out with the reason, and no --then or bisect run gets
them (recovery/review.py keeps the list)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from envguard.recovery.bisect import candidate
from envguard.recovery.restore import env_file_text, run_env
from factories import package, snapshot
from hostile.helpers import envguard

# What each one makes torch, triton or transformers load: compiled kernels and generated
# Python, prebuilt .so files, modules put on sys.path, pickled artifacts from a server.
LOADERS = {
    "TORCHINDUCTOR_CACHE_DIR": "/pr/inductor",
    "TRITON_CACHE_DIR": "/pr/triton",
    "TORCH_EXTENSIONS_DIR": "/pr/ext",
    "HF_MODULES_CACHE": "/pr/modules",
    "TORCHINDUCTOR_REDIS_HOST": "attacker.example",
    "TORCHINDUCTOR_REDIS_PORT": "6379",
    "LD_PRELOAD": "/pr/evil.so",
    "PYTHONPATH": "/pr/site",
}
PLAIN = {"NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0"}


@pytest.fixture
def forged(tmp_path: Path) -> Path:
    """A real snapshot of this interpreter (nothing to rebuild), its env forged."""
    work = tmp_path / "p"
    work.mkdir()
    done = envguard("snapshot", "--python", sys.executable, "--name", "good", cwd=work)
    assert done.returncode == 0, done.stderr
    path = work / "snapshots" / "good.json"
    data = json.loads(path.read_text())
    data["env"] = {**LOADERS, **PLAIN}
    path.write_text(json.dumps(data))
    return work


def test_restore_holds_code_loading_variables_out_of_the_file_and_then(forged: Path) -> None:
    show = f"{sys.executable} -c 'import json, os; print(json.dumps(dict(os.environ)))'"
    out = envguard("restore", "good", "--venv", sys.prefix, "--execute", "--then", show, cwd=forged)
    assert out.returncode == 0, out.stdout + out.stderr
    text = (forged / "good.env.sh").read_text()
    lines = text.splitlines()
    for name in LOADERS:
        assert f"\nexport {name}=" not in text, name
        held = next(i for i, line in enumerate(lines) if f"export {name}=" in line)
        assert lines[held].startswith("# review, then uncomment: export "), lines[held]
        assert lines[held - 1].startswith(f"# {name}: held for review: "), lines[held - 1]
    for name, value in PLAIN.items():
        assert f"\nexport {name}={value}\n" in text
    given = json.loads(out.stdout.rstrip("\n").rsplit("\n", 1)[-1])
    # The user's own values (the test's environment sets some of these) pass as before.
    assert not any(given.get(name) == value for name, value in LOADERS.items()), given
    assert all(given.get(name) == value for name, value in PLAIN.items()), given


def test_bisect_candidates_never_get_code_loading_variables() -> None:
    """bisect runs each candidate with the variables restore would give --then."""
    good = snapshot([package("ok", "1")], env=PLAIN)
    bad = snapshot([package("ok", "1")], env={**PLAIN, **LOADERS})
    from envguard.recovery.bisect import units

    env_units = [u for u in units(good, bad) if u.env]
    assert env_units
    given = run_env(candidate(good, bad, env_units))
    assert set(given) == set(PLAIN), given


def test_every_held_name_says_why() -> None:
    text, _ = env_file_text(snapshot([], env=LOADERS), {})
    for name in LOADERS:
        assert f"# {name}: held for review: " in text


# Switches that let a library run code shipped with a model, a data set or a checkpoint: a
# forged snapshot turning one on makes the next run execute the checkpoint's pickle.
# (UV_* and PIP_* are never restored at all.)
ENABLERS = {
    "HF_DATASETS_TRUST_REMOTE_CODE": "1",
    "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1",
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",
}


@pytest.mark.parametrize("name", sorted(ENABLERS))
def test_remote_code_and_unpickling_switches_are_held(name: str) -> None:
    snap = snapshot([], env={name: ENABLERS[name], **PLAIN})
    text, _ = env_file_text(snap, {})
    assert f"\nexport {name}=" not in text, text
    assert f"# {name}: held for review: " in text
    assert name not in run_env(snap)
