"""An interpreter named by a snapshot never runs from a place someone else could fill, and
never before the snapshot validated."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.snapshots import store
from factories import package, snapshot
from hostile.helpers import envguard, write_json

runner = CliRunner()


def planted(folder: Path, ran: Path) -> Path:
    folder.mkdir(parents=True)
    script = folder / "python3"
    script.write_text(f"#!/bin/sh\ntouch {ran}\n")
    script.chmod(0o755)
    return script


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"schema_version": 99},
        {"packages": "not-a-list"},
    ],
)
def test_planted_interpreter_in_a_world_writable_folder_never_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, changes: dict[str, object]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    shared = tmp_path / "shared"
    ran = tmp_path / "ran"
    script = planted(shared / "bin", ran)
    shared.chmod(0o777)  # anyone can write here, no sticky bit
    data = json.loads(store.dumps(snapshot([package("ok", "1")])))
    data["interpreter"]["executable"] = str(script)
    data.update(changes)
    Path("hostile.json").write_text(json.dumps(data))
    for args in (["diff", "hostile.json"], ["check", "hostile.json"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert len(result.stderr.strip().splitlines()) <= 2  # error: and hint:
    assert not ran.exists(), "a planted interpreter ran"


def test_an_interpreter_inside_the_snapshots_own_checkout_never_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snapshot's checkout is not the cwd: `envguard diff /ci/pr/snapshots/x.json` run
    from elsewhere must not run /ci/pr/tools/python3."""
    checkout = tmp_path / "pr"
    checkout.mkdir()
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    ran = tmp_path / "ran"
    script = planted(checkout / "tools", ran)
    data = json.loads(store.dumps(snapshot([package("ok", "1")])))
    data["interpreter"]["executable"] = str(script)
    (checkout / "snapshots").mkdir()
    (checkout / "snapshots" / "x.json").write_text(json.dumps(data))
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    for args in (
        ["diff", str(checkout / "snapshots" / "x.json")],
        ["check", str(checkout / "snapshots" / "x.json")],
    ):
        result = runner.invoke(app, args)
        assert not ran.exists(), f"{args}: a planted interpreter ran"
        assert result.exit_code == 2 and "inside this checkout" in result.stderr


def test_through_via_a_planted_interpreter_is_checked_there_and_never_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--via without --python: the far side's own python3 inspects the snapshot's
    interpreter first (`env` as the prefix: the far side is this machine)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    shared = tmp_path / "shared"
    ran = tmp_path / "ran"
    script = planted(shared / "bin", ran)
    shared.chmod(0o777)
    data = json.loads(store.dumps(snapshot([package("ok", "1")])))
    data["interpreter"]["executable"] = str(script)
    Path("hostile.json").write_text(json.dumps(data))
    for args in (
        ["diff", "hostile.json", "--via", "env"],
        ["check", "hostile.json", "--via", "env"],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert "a folder anyone can write to" in result.stderr and "there; not run" in result.stderr
    assert not ran.exists(), "a planted interpreter ran through --via"
    shared.chmod(0o755)  # the same path in a safe place: still no interpreter, not run
    result = runner.invoke(app, ["diff", "hostile.json", "--via", "env"])
    assert result.exit_code == 2 and "not a Python interpreter" in result.stderr
    assert not ran.exists(), "a script named by a snapshot ran through --via"
    # A real interpreter there is run (this test ran the script before the rule held
    # that a snapshot-named interpreter must be a real one).
    script.unlink()
    script.symlink_to(os.path.realpath(sys.executable))
    result = runner.invoke(app, ["diff", "hostile.json", "--via", "env"])
    assert result.exit_code in (0, 1), result.output


@pytest.mark.slow
def test_a_far_side_that_never_answers_does_not_stall_the_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`diff` and `check` take --timeout as `snapshot` does: the check of the snapshot's
    interpreter there and the probe both stop, could-not-measure (exit 2)."""
    monkeypatch.chdir(tmp_path)
    slow = tmp_path / "slow.sh"
    slow.write_text("#!/bin/sh\nexec sleep 1000\n")
    slow.chmod(0o755)
    Path("good.json").write_text(store.dumps(snapshot([package("ok", "1")])))
    for command in ("check", "diff"):
        for python in ([], ["--python", "/usr/bin/python3"]):  # the check there, and the probe
            args = [command, "good.json", "--via", str(slow), "--timeout", "1", *python]
            result = runner.invoke(app, args)
            assert result.exit_code == 2 and "within 1s" in result.stderr, result.output


def test_a_timeout_must_be_positive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("good.json").write_text(store.dumps(snapshot([package("ok", "1")])))
    for command in ("check", "diff"):
        result = runner.invoke(app, [command, "good.json", "--via", "env", "--timeout", "0"])
        assert result.exit_code == 2 and "--timeout" in result.stderr, result.output


def far_side(folder: Path, script: str) -> str:
    """A --via prefix that runs ``script`` and never reaches a Python."""
    path = folder / "far.sh"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return str(path)


UNREACHABLE = "echo 'password: hunter2' >&2\nexit 255\n"
# More than the tail envguard keeps, then the line that says why: the whole stream is read.
FLOOD = 'python3 -c \'import sys; sys.stderr.write(("x" * 1000 + "\\n") * 2000)\'\n' + UNREACHABLE


@pytest.mark.parametrize("script", [UNREACHABLE, FLOOD], ids=["unreachable", "stderr flood"])
def test_a_host_that_cannot_be_reached_is_could_not_measure_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str
) -> None:
    """Exit 2 for snapshot, diff and check alike (check said 1, drift), the far side's last
    line shown redacted, and no internal name in the message."""
    monkeypatch.chdir(tmp_path)
    via = far_side(tmp_path, script)
    Path("good.json").write_text(store.dumps(snapshot([package("ok", "1")])))
    for args in (
        ["snapshot", "--via", via],
        ["diff", "good.json", "--via", via],
        ["check", "good.json", "--via", via],
        ["check", "good.json", "--via", via, "--python", "/usr/bin/python3"],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        err = result.stderr
        assert err.startswith("error: ") and "exit 255" in err and "password: <redacted>" in err
        assert "hunter2" not in err and "unsafe_place" not in err and "_" not in err.split(":")[0]


def test_an_unreachable_host_fails_the_gate_as_could_not_measure(tmp_path: Path) -> None:
    """The same, as CI runs it: a real process and its exit code."""
    import sys

    via = far_side(tmp_path, UNREACHABLE)
    (tmp_path / "good.json").write_text(store.dumps(snapshot([package("ok", "1")])))
    proc = subprocess.run(
        [sys.executable, "-m", "envguard", "check", "good.json", "--via", via],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and "hunter2" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("how", ["another user's venv", "world-writable venv", "home elsewhere"])
def test_a_venv_whose_python_links_to_a_safe_one_is_still_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """A venv's bin/python is a link into a safe place, but Python reads the venv's
    pyvenv.cfg (even under -I -S), whose `home` can point at a planted standard library:
    every folder on the way, the pyvenv.cfg and its home are checked (an attack ran a
    planted encodings/__init__.py as the victim)."""
    if how == "another user's venv" and os.geteuid() != 0:
        pytest.skip("chown needs root")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    ev = tmp_path / "ev"
    (ev / "bin").mkdir(parents=True)
    (ev / "bin" / "python").symlink_to(os.path.realpath(sys.executable))
    home = tmp_path / "evh" / "bin"
    home.mkdir(parents=True)
    (ev / "pyvenv.cfg").write_text(f"home = {home}\n")
    if how == "another user's venv":
        os.chown(ev, 65534, 65534)
    elif how == "world-writable venv":
        ev.chmod(0o777)
    else:
        (tmp_path / "evh").chmod(0o777)
    data = json.loads(store.dumps(snapshot([package("ok", "1")])))
    data["interpreter"]["executable"] = str(ev / "bin" / "python")
    Path("pr.json").write_text(json.dumps(data))
    for args in (["diff", "pr.json"], ["diff", "pr.json", "--via", "env"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert (
            "not run" in result.stderr
            or "refused" in result.stderr
            or "another user" in result.stderr
            or "anyone can write" in result.stderr
        ), result.stderr


def _forged(folder: Path, executable: Path, **changes: object) -> Path:
    data = json.loads(store.dumps(snapshot([package("ok", "1")])))
    data["interpreter"]["executable"] = str(executable)
    data.update(changes)
    folder.mkdir(parents=True, exist_ok=True)
    return write_json(folder / "evil.json", data)


@pytest.mark.parametrize("changes", [{}, {"schema_version": 99}, {"packages": "not-a-list"}])
@pytest.mark.parametrize("command", ["diff", "check"])
def test_a_script_named_python_in_a_safe_folder_outside_the_checkout_never_runs(
    tmp_path: Path, command: str, changes: dict[str, object]
) -> None:
    """Owned by this user, nobody else can write there, outside the checkout: the place is
    fine, but a `#!/bin/sh` script is no interpreter. envguard as a real process, with its
    early start (prestart) in play."""
    ran = tmp_path / "ran"
    script = planted(tmp_path / "tools" / "bin", ran)
    evil = _forged(tmp_path / "work", script, **changes)
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    proc = envguard(command, str(evil), cwd=elsewhere, VIRTUAL_ENV="")
    assert proc.returncode == 2, proc.stderr
    assert not ran.exists(), "a script named by a snapshot ran"
    if not changes:
        assert "not a Python interpreter" in proc.stderr and "--python" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2  # error: and hint:


@pytest.mark.parametrize("changes", [{}, {"schema_version": 99}, {"packages": "not-a-list"}])
def test_through_via_the_snapshots_interpreter_runs_only_after_validation_and_when_real(
    tmp_path: Path, changes: dict[str, object]
) -> None:
    """--via without --python: nothing the file names starts before it validated, and a
    script in a safe place is still no interpreter (`env` as the prefix: this machine)."""
    ran = tmp_path / "ran"
    script = planted(tmp_path / "tools" / "bin", ran)
    evil = _forged(tmp_path / "work", script, **changes)
    proc = envguard("diff", str(evil), "--via", "env", cwd=tmp_path / "work")
    assert proc.returncode == 2, proc.stderr
    assert not ran.exists(), "a script named by a snapshot ran through --via"
    if not changes:
        assert "not a Python interpreter" in proc.stderr and "not run" in proc.stderr


@pytest.mark.parametrize("kind", ["script", "fifo", "empty", "shell link", "text", "real"])
def test_not_python_tells_a_real_interpreter_without_running_it(tmp_path: Path, kind: str) -> None:
    from envguard.confine import not_python

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    path = bin_dir / "python3"
    if kind == "script":
        path.write_text("#!/usr/bin/python3\n")
    elif kind == "fifo":
        os.mkfifo(path)  # must not block the check
    elif kind == "empty":
        path.touch()
    elif kind == "shell link":
        path.symlink_to("/bin/sh")
    elif kind == "text":
        path.write_text("print(1)\n")
    else:
        path.symlink_to(os.path.realpath(sys.executable))
    why = not_python(str(path))
    assert (why is None) == (kind == "real"), why
