"""A guard never runs inside a guard: what guard starts carries its depth marker, protect's
shim and hook let it through at once, and a guard started under another anyway (the marker
forged or lost) refuses in one line, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.guard import nesting, protect
from envguard.guard.install import find_program
from envguard.guard.resolve import installer_env, project_env
from envguard.tools import which
from factories import make_venv

runner = CliRunner()
GUARDED = ["uv", "pip", "install", "six"]


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def protected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(a venv protected with stand-ins that say what ran: ``guard ARGS`` for envguard,
    ``real ARGS`` for uv, the folder of the stand-ins)."""
    tools = tmp_path / "tools"
    _script(tools / "uv", '#!/bin/sh\necho real "$@"\n')
    fake = _script(tools / "fake-envguard", '#!/bin/sh\necho guard "$@"\n')
    venv = tmp_path / ".venv"
    make_venv(venv)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}/usr/bin{os.pathsep}/bin")
    protect.protect(venv, envguard=[str(fake)], uv="/nowhere/uv")
    return venv, tools


def _run(argv: list[str], venv: Path, tools: Path, **extra: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != nesting.MARKER}
    env.update(VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{tools}", **extra)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    return done.stdout + done.stderr


def _under_a_guard() -> dict[str, str]:
    """What a guard running in this process gives its children (this process is above
    the shim and the hook the tests start)."""
    return {nesting.MARKER: "1", nesting.TOKEN: nesting.token()}


def _forged() -> list[dict[str, str]]:
    """Markers exported by hand: a token of a guard that has ended, the depth alone, a
    token with a made-up nonce, a real guard's nonce with another pid, and an earlier
    envguard's marker."""
    pid, _, nonce = nesting.token().partition(":")
    ended = subprocess.run(
        [sys.executable, "-c", "from envguard.guard import nesting; print(nesting.token())"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    return [
        {nesting.MARKER: "1", nesting.TOKEN: ended},  # a guard's that has ended
        {nesting.MARKER: "1"},
        {nesting.MARKER: "1", nesting.TOKEN: f"{pid}:{'0' * 32}"},
        {nesting.MARKER: "1", nesting.TOKEN: f"1:{nonce}"},
        {nesting.MARKER: "1", nesting.TOKEN: f"{pid}:../{nonce[3:]}"},
        {nesting.LEGACY_MARKER: "/"},
    ]


def test_the_shim_runs_uv_at_once_under_a_guard(protected: tuple[Path, Path]) -> None:
    venv, tools = protected
    shim = str(venv / "bin" / "uv")
    for args in (["add", "six"], ["sync", "--locked"], ["pip", "install", "six"]):
        guarded = _run([shim, *args], venv, tools).strip()
        assert guarded == f"guard guard --venv {venv} -- uv {' '.join(args)}"
        assert _run([shim, *args], venv, tools, **_under_a_guard()).strip() == (
            f"real {' '.join(args)}"
        )
    # Only a running guard's token lets it through: a marker or a token made up does not.
    for forged in _forged():
        assert _run([shim, "add", "six"], venv, tools, **forged).startswith("guard ")
    assert _run([shim, "lock"], venv, tools).strip() == "real lock"


def test_the_hook_lets_pip_through_under_a_guard(protected: tuple[Path, Path]) -> None:
    import ensurepip

    from factories import uv_install

    venv, tools = protected
    uv_install(venv, Path(ensurepip.__file__).parent / "_bundled", "pip")
    python = str(venv / "bin" / "python")
    install = [python, "-m", "pip", "install", "--no-index", "six"]
    routed = _run(install, venv, tools).strip()
    assert routed == f"guard guard --venv {venv} -- python -m pip install --no-index six"
    for forged in _forged():
        assert _run(install, venv, tools, **forged).strip() == routed
    # Under a guard the venv's own pip runs (no index, no six: pip says so).
    through = _run(install, venv, tools, **_under_a_guard())
    assert "No matching distribution found for six" in through and "guard" not in through


def test_a_guard_under_a_guard_refuses_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv = tmp_path / ".venv"
    make_venv(venv)
    monkeypatch.setenv(nesting.MARKER, "1")
    result = runner.invoke(app, ["guard", "--venv", str(venv), "--", *GUARDED])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: envguard guard refused: it would run inside another")


def test_a_guard_whose_marker_was_lost_on_the_way_still_refuses(tmp_path: Path) -> None:
    """A program between the two guards dropped the marker: the process tree still says
    that a guard runs above (a real chain: `envguard guard` starts the second guard)."""
    venv = tmp_path / ".venv"
    make_venv(venv)
    outer = _script(
        tmp_path / "bin" / "envguard",
        f"#!{sys.executable}\n"
        "import os, subprocess, sys\n"
        f"env = {{k: v for k, v in os.environ.items() if k != {nesting.MARKER!r}}}\n"
        "argv = [sys.executable, '-m', 'envguard', *sys.argv[1:]]\n"
        "sys.exit(subprocess.run(argv, env=env, timeout=60).returncode)\n",
    )
    env = {k: v for k, v in os.environ.items() if k != nesting.MARKER}
    done = subprocess.run(
        [str(outer), "guard", "--venv", str(venv), "--", *GUARDED],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "would run inside another guard (depth 2, at most 1)" in done.stderr


def test_a_guard_started_by_a_wrapper_runs(tmp_path: Path) -> None:
    """`timeout 120 envguard guard ...`: timeout's own command line holds the words, but
    timeout is not a guard; the guard under it runs (it refused as nested before)."""
    from envguard.testing import make_wheel
    from factories import uv_install

    venv, wh = tmp_path / ".venv", tmp_path / "wh"
    make_wheel(wh, "six", "1.17.0")
    make_venv(venv)
    uv_install(venv, wh, "six")
    envguard = str(Path(sys.executable).parent / "envguard")
    env = {k: v for k, v in os.environ.items() if k != nesting.MARKER}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    guarded = ["uv", "pip", "install", "--no-index", "--find-links", str(wh), "six"]
    done = subprocess.run(
        ["timeout", "120", envguard, "guard", "--venv", str(venv), "--", *guarded],
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert done.returncode == 0, done.stderr
    assert "would change no package" in done.stdout + done.stderr


def test_what_the_guard_starts_carries_the_marker(tmp_path: Path) -> None:
    venv = tmp_path / ".venv"
    base = {"PATH": "/usr/bin", nesting.MARKER: "junk"}
    for env in (installer_env(venv, base), project_env(base, venv), project_env(base, None)):
        assert env[nesting.MARKER] == "1"
    assert installer_env(venv, base)[nesting.LEGACY_MARKER] == str(venv)


@pytest.mark.parametrize(
    ("value", "depth"), [("1", 1), (" 2 ", 2), ("", 0), ("x", 0), ("-1", 0), ("²", 0)]
)
def test_the_marker_is_a_count(value: str, depth: int) -> None:
    assert nesting.inherited({nesting.MARKER: value}) == depth


@pytest.mark.parametrize(
    ("argv", "guard"),
    [
        ([b"/v/bin/python", b"-m", b"envguard", b"guard", b"--venv", b"v"], True),
        ([b"/usr/bin/envguard", b"-q", b"guard"], True),
        ([b"/v/bin/python", b"/v/bin/envguard", b"guard", b"--", b"uv"], True),
        ([b"/v/bin/python", b"-m", b"envguard", b"snapshot"], False),
        ([b"/v/bin/python", b"-m", b"envguard", b"undo", b"guard"], False),
        ([b"uv", b"pip", b"install", b"envguard"], False),
        ([b"/home/u/.cache/envguard-field/uv/python", b"guard"], False),
        ([b"/v/bin/python3.11", b"-I", b"-X", b"dev", b"-m", b"envguard", b"guard"], True),
        ([b"/v/bin/python", b"-Im", b"envguard", b"-q", b"guard"], True),
        ([b"/v/bin/python", b"-Wignore", b"/v/bin/envguard", b"guard"], True),
        ([b"python3", b"-m", b"envguard.__main__", b"guard"], True),
        # Programs that start a guard are not one (issue 38: `timeout 120 envguard guard`
        # was refused as running inside another guard).
        ([b"timeout", b"120", b"envguard", b"guard", b"--venv", b"v"], False),
        ([b"/usr/bin/sudo", b"-E", b"/v/bin/envguard", b"guard"], False),
        ([b"flock", b"/tmp/l", b"python", b"-m", b"envguard", b"guard"], False),
        ([b"uv", b"run", b"envguard", b"guard", b"--", b"uv", b"pip"], False),
        ([b"/bin/bash", b"/v/bin/envguard", b"guard"], False),
        ([b"/v/bin/python", b"-c", b"x", b"envguard", b"guard"], False),
        ([b"/v/bin/python", b"-m", b"timeit", b"envguard", b"guard"], False),
        ([b"/v/bin/python", b"run.py", b"envguard", b"guard"], False),
        ([b"/v/bin/python", b"-X"], False),
        ([], False),
    ],
)
def test_a_guard_is_known_by_its_command_line(argv: list[bytes], guard: bool) -> None:
    assert nesting.is_guard(argv) is guard


def test_the_guard_never_runs_protects_shim_itself(protected: tuple[Path, Path]) -> None:
    """The venv's bin first on PATH (active): its uv is the shim, the guard runs the uv
    past it; a shim named by its path too."""
    venv, tools = protected
    env = {"PATH": f"{venv / 'bin'}{os.pathsep}{tools}"}
    assert find_program("uv", env) == str(tools / "uv")
    assert find_program(str(venv / "bin" / "uv"), env) == str(tools / "uv")
    assert which("uv", path=env["PATH"]) == str(tools / "uv")
    assert which("uv", path=str(venv / "bin")) is None


def test_the_shim_and_the_hook_spell_the_marker_as_the_guard_sets_it(
    protected: tuple[Path, Path],
) -> None:
    venv, _ = protected
    written = next(venv.glob("lib/python3*/site-packages/_envguard_protect.py"))
    assert f'TOKEN = "{nesting.TOKEN}"' in written.read_text()
    assert "import _envguard_protect as hook" in (venv / "bin" / "uv").read_text()


@pytest.mark.parametrize("planted", ["link", "file", "open"])
def test_a_guard_folder_planted_by_another_refuses_in_a_whole_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: str
) -> None:
    """$TMPDIR/envguard-UID planted before the guard (a link to another folder, a file, a
    folder others can write): refused in one line that reads whole (the redactor took
    "token cannot" for a secret and printed "token <redacted> be written")."""
    venv = tmp_path / ".venv"
    make_venv(venv)
    folder = tmp_path / "tmp" / f"envguard-{os.getuid()}"
    folder.parent.mkdir()
    if planted == "link":
        (tmp_path / "theirs").mkdir()
        folder.symlink_to(tmp_path / "theirs")
    elif planted == "file":
        folder.write_text("")
    else:
        folder.mkdir(mode=0o777)
        folder.chmod(0o777)
    monkeypatch.setenv("TMPDIR", str(folder.parent))
    monkeypatch.setattr(nesting, "_token", [])
    result = runner.invoke(app, ["guard", "--venv", str(venv), "--format", "json", "--", *GUARDED])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"error: {folder}: envguard guard cannot keep its nonce file")
    assert "<redacted>" not in result.stderr and not list((tmp_path / "theirs").glob("*"))
