"""The sixth attack's findings, each closed by a mechanism: the policy file is read like any
untrusted file and only from the project; a venv that cannot be locked, an output that
cannot be written and a step summary that is not a file are one line, never a traceback or
a hang; -p PASSWORD and curl -u user:PASSWORD are redacted; no .pth of the target runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from envguard.snapshots import store
from factories import make_venv, package, snapshot


def envguard(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envguard", *args],
        cwd=cwd, capture_output=True, text=True, timeout=120, env={**os.environ, **env},
    )  # fmt: skip


@pytest.fixture
def project(tmp_path: Path) -> Path:
    work = tmp_path / "outer" / "project"
    work.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    (work / "good.json").write_text(store.dumps(snapshot([package("ok", "1")])))
    return work


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


def test_a_venv_that_cannot_be_locked_is_one_line(tmp_path: Path) -> None:
    from envguard.errors import ActionError
    from envguard.recovery.execute import venv_lock

    venv = tmp_path / ".venv"
    (tmp_path / ".venv.envguard.lock").mkdir()  # a folder where the lock file goes
    with pytest.raises(ActionError, match="cannot lock it for the rebuild"), venv_lock(venv):
        pass


def test_output_that_cannot_be_written_is_one_line(project: Path) -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "envguard", "show", "good.json"],
            cwd=project, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr == "error: cannot write the output: No space left on device\n"
    piped = subprocess.run(
        f"{sys.executable} -m envguard show good.json | head -c 1",
        shell=True, cwd=project, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert piped.stderr == ""  # a reader that stopped early is not an error to print


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_step_summary_that_is_not_a_file_is_a_warning(project: Path, kind: str) -> None:
    target = project / "summary"
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.mkdir()
    result = envguard(
        "check", "good.json", "--against", "good.json", "--format", "github",
        cwd=project, GITHUB_STEP_SUMMARY=str(target),
    )  # fmt: skip
    assert result.returncode == 0 and "Traceback" not in result.stderr
    assert result.stderr.startswith("warning: $GITHUB_STEP_SUMMARY")


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("/opt/w -p hunter2 --", "/opt/w -p <redacted> --"),
        ("docker login -p s3cret registry", "docker login -p <redacted> registry"),
        ("mysql -ps3cret", "mysql -p<redacted>"),
        ("curl -u me:s3cret https://x", "curl -u me:<redacted> https://x"),
        ("ssh -p 2222 gpu01", "ssh -p 2222 gpu01"),  # a port
        ("mkdir -p /tmp/x", "mkdir -p /tmp/x"),  # a path
    ],
)
def test_password_options_are_redacted(text: str, shown: str) -> None:
    from envguard.redact import redact_text

    assert redact_text(text) == shown


def test_no_pth_file_of_the_target_runs(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    make_venv(venv)
    (site,) = venv.glob("lib/python*/site-packages")
    ran = tmp_path / "ran"
    (site / "zz_evil.pth").write_text(f"import os; open({str(ran)!r}, 'w').write('x')\n")
    subprocess.run([str(venv / "bin" / "python"), "-c", "pass"], check=True)
    assert ran.exists()  # the control: a normal start runs it
    ran.unlink()
    result = envguard("snapshot", "--python", str(venv), "--out", "-", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert not ran.exists(), "a .pth file of the target ran during the probe"


def test_a_stray_carriage_return_in_one_requirement_costs_only_that_line(
    tmp_path: Path,
) -> None:
    """A Requires-Dist with a lone \\r once failed the whole probe report (exit 2 for every
    snapshot, diff and check of that venv): that requirement is left out, nothing else."""
    from factories import load_target

    target = load_target()
    meta = tmp_path / "METADATA"
    meta.write_bytes(
        b"Metadata-Version: 2.1\nName: odd\nVersion: 1.0\n"
        b"Requires-Dist: foo\rbar\nRequires-Dist: six\n\nbody\n"
    )
    requires: list[str] = []
    assert target.metadata_headers(str(meta), requires) == {"Name": "odd", "Version": "1.0"}
    assert requires == ["six"]


def test_stdout_closed_is_not_a_traceback(project: Path) -> None:
    done = subprocess.run(
        f"{sys.executable} -m envguard show good.json >&-",
        shell=True, cwd=project, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "Traceback" not in done.stderr and done.returncode in (0, 1)
