"""The pre-commit hooks, run as pre-commit runs them (`entry` split into words, the hook's
args, no file names since pass_filenames is false) with no arguments, in a scratch git repo
with a uv project: newest snapshot, lockfile beside pyproject.toml.

(`pre-commit try-repo` itself would pip-install envguard's dependencies into a hook venv
from the network; this runs the same argv with the envguard under test.)"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from envguard.snapshots import store
from factories import UV, make_git_repo, make_wheel, package, run, snapshot

ROOT = Path(__file__).resolve().parents[2]
HOOKS = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}

PYPROJECT = """\
[project]
name = "app"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = ["numpy"]

[dependency-groups]
dev = ["pytest"]
"""


def run_hook(
    hook_id: str, cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    hook = HOOKS[hook_id]
    assert hook["pass_filenames"] is False
    argv = shlex.split(hook["entry"]) + list(hook.get("args", [])) + list(args)
    assert argv[0] == "envguard"
    env = {k: v for k, v in (env or os.environ).items() if not k.startswith("GITHUB_")}
    return subprocess.run(
        [sys.executable, "-m", "envguard", *argv[1:]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    wheels = tmp_path / "wh"
    for name, version in (("numpy", "2.1.0"), ("pytest", "8.0.0")):
        make_wheel(wheels, name, version)
    repo = make_git_repo(tmp_path / "repo", {"pyproject.toml": PYPROJECT})
    run([UV, "lock", "--quiet", "--offline", "--no-index", "--find-links", str(wheels)], cwd=repo)
    (repo / "snapshots").mkdir()
    # No [build-system]: uv does not install the project itself, only its dependencies.
    good = snapshot([package("numpy", "2.1.0"), package("pytest", "8.0.0")], name="good")
    (repo / "snapshots" / "good.json").write_text(store.dumps(good))
    return repo


def test_lock_hook_with_no_arguments_finds_snapshot_and_lock(project: Path) -> None:
    proc = run_hook("envguard-check-lock", project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("no drift: snapshot good matches ")
    assert proc.stdout.split()[-1] == "uv.lock"


def test_lock_hook_fails_when_the_newest_snapshot_and_the_lock_part(project: Path) -> None:
    newer = snapshot([package("numpy", "2.0.0"), package("pytest", "8.0.0")], name="newer")
    (project / "snapshots" / "newer.json").write_text(store.dumps(newer))
    proc = run_hook("envguard-check-lock", project)
    assert proc.returncode == 1
    assert "numpy: the snapshot has 2.0.0, " in proc.stdout and "pins 2.1.0" in proc.stdout


def test_lock_hook_without_a_lock_is_one_line_exit_2(project: Path) -> None:
    (project / "uv.lock").unlink()
    proc = run_hook("envguard-check-lock", project)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and "no uv.lock, pylock.toml" in proc.stderr


def test_environment_hook_with_no_arguments_uses_the_newest_snapshot(tmp_path: Path) -> None:
    repo = make_git_repo(tmp_path / "repo", {"README": "x\n"})
    (repo / "snapshots").mkdir()
    proc = run_hook("envguard-check", repo)
    assert proc.returncode == 2 and proc.stderr.startswith("error: no snapshot in snapshots/")


@pytest.mark.slow
def test_environment_hook_passes_after_a_commit_and_fails_on_package_drift(
    tmp_path: Path,
) -> None:
    """The commit being made moves HEAD: the hook checks what a commit cannot change by
    itself (packages, torch, the interpreter, variables), not the repo's own state."""
    from factories import git, make_venv, uv_install

    repo = make_git_repo(tmp_path / "repo", {"README": "x\n"})
    venv = repo / ".venv"
    make_venv(venv)
    wh = tmp_path / "wh"
    make_wheel(wh, "six", "1.16.0")
    make_wheel(wh, "idna", "3.7")
    uv_install(venv, wh, "six==1.16.0")
    env = {**os.environ, "VIRTUAL_ENV": str(venv)}
    snap = [sys.executable, "-m", "envguard", "snapshot", "--repo", ".", "--name", "good"]
    assert subprocess.run(snap, cwd=repo, env=env, capture_output=True).returncode == 0
    (repo / "README").write_text("y\n")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qam", "next")
    # As pre-commit runs a python hook: $VIRTUAL_ENV is the hook's own venv (here, the one
    # running the tests), and the hook still checks ./.venv.
    in_hook_venv = {**os.environ, "VIRTUAL_ENV": sys.prefix}
    proc = run_hook("envguard-check", repo, env=in_hook_venv)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run_hook("envguard-check-system", repo, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plain = [sys.executable, "-m", "envguard", "check"]
    assert subprocess.run(plain, cwd=repo, env=env, capture_output=True).returncode == 1
    uv_install(venv, wh, "idna==3.7")
    proc = run_hook("envguard-check", repo, env=in_hook_venv)
    assert proc.returncode == 1 and "idna" in proc.stdout
    proc = run_hook("envguard-check-system", repo, env=env)
    assert proc.returncode == 1 and "idna" in proc.stdout
    missing = tmp_path / "no-such-venv"
    other = run_hook("envguard-check", repo, "--python", str(missing), env=in_hook_venv)
    assert other.returncode == 2 and str(missing) in other.stderr  # args name another venv


def test_hooks_install_envguard_themselves() -> None:
    """A remote hook must bring envguard along: language python builds this repository's
    distribution into the hook's venv. The one that relies on an envguard the user
    installed says so in its id."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for hook_id, hook in HOOKS.items():
        assert shlex.split(hook["entry"])[0] in scripts, hook_id
        if hook["language"] == "system":
            assert hook_id.endswith("-system") and "installed by you" in hook["name"]
        else:
            assert hook["language"] == "python", hook_id
    assert {"envguard-check", "envguard-check-lock"} <= {
        h for h, hook in HOOKS.items() if hook["language"] == "python"
    }
    environment = shlex.split(HOOKS["envguard-check"]["entry"])
    assert environment[environment.index("--python") + 1] == ".venv"
