"""The policy file ([tool.envguard] in pyproject.toml) is read like any untrusted file, and
only from the project's own work tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envguard.snapshots import store
from factories import package, snapshot
from hostile.helpers import envguard


def test_a_deeply_nested_pyproject_is_one_line(project: Path) -> None:
    (project / "pyproject.toml").write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    result = envguard("check", "good.json", "--against", "good.json", cwd=project)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "cannot read it as TOML (nested too deeply)" in result.stderr


def test_a_pyproject_above_the_work_tree_never_sets_the_policy(project: Path) -> None:
    """A planted /tmp/pyproject.toml once silenced the gate for every folder below it."""
    (project.parent / "pyproject.toml").write_text('[tool.envguard]\nfail-on = "never"\n')
    bad = store.dumps(snapshot([package("ok", "2")], name="bad"))
    (project / "bad.json").write_text(bad)
    result = envguard("check", "good.json", "--against", "bad.json", cwd=project)
    assert result.returncode == 1, result.stdout + result.stderr


def test_a_pyproject_of_another_user_is_refused_and_checked_on_the_file_read(
    project: Path,
) -> None:
    policy = project / "pyproject.toml"
    policy.write_text('[tool.envguard]\nfail-on = "never"\n')
    policy.chmod(0o666)  # this user's own file: read whatever its mode (umask 000 in CI)
    ok = envguard("check", "good.json", "--against", "good.json", cwd=project)
    assert ok.returncode == 0, ok.stderr
    if os.geteuid() != 0:
        pytest.skip("chown needs root")
    os.chown(policy, 65534, 65534)
    result = envguard("check", "good.json", "--against", "good.json", cwd=project)
    assert result.returncode == 2 and "owned by another user" in result.stderr
    theirs = project.parent / "theirs.toml"  # a link another user owns, to a file of mine
    theirs.write_text('[tool.envguard]\nfail-on = "never"\n')
    policy.unlink()
    policy.symlink_to(theirs)
    os.lchown(policy, 65534, 65534)
    result = envguard("check", "good.json", "--against", "good.json", cwd=project)
    assert result.returncode == 2 and "owned by another user" in result.stderr
