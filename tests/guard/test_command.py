"""How guard reads an install command: as pip and uv read it, so that the file it checks
and the place it previews are the ones the installer then uses."""

from __future__ import annotations

from pathlib import Path

import pytest

from envguard.errors import UsageError
from envguard.guard.command import check_files, parse


@pytest.mark.parametrize(
    "argv",
    [
        "pip install -qr /dev/stdin",
        "pip install -Ur/dev/stdin six",
        "uv pip install -qc /proc/self/environ six",
        "uv pip install --excludes /dev/stdin six",
    ],
)
def test_a_requirements_file_in_run_together_short_options_is_checked(
    argv: str, tmp_path: Path
) -> None:
    """``-qr /dev/stdin`` is -q -r /dev/stdin: the dry run would read an empty stdin, the
    install the user's."""
    command = parse(tuple(argv.split()))
    with pytest.raises(UsageError, match=r"a requirements file in (dev|proc)/|from stdin"):
        check_files(command, cwd=tmp_path, env={})


@pytest.mark.parametrize("name", ["-", "/dev/stdin"])
def test_requirements_from_stdin_are_refused_with_the_reason(name: str, tmp_path: Path) -> None:
    command = parse(("uv", "pip", "install", "-r", name))
    with pytest.raises(UsageError, match="requirements read from stdin cannot be previewed"):
        check_files(command, cwd=tmp_path, env={})


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        ("pip install --targ /tmp/elsewhere six", "--targ: pip reads it as --target"),
        ("pip install --constr /dev/stdin six", "--constr: pip reads it as --constraint"),
        ("pip install -qt /tmp/elsewhere six", "-t: envguard guard installs into the venv"),
        ("pip install -t/tmp/elsewhere six", "-t: envguard guard installs into the venv"),
        ("uv pip install -Up/usr/bin/python3 six", "-p: envguard guard installs into the venv"),
    ],
)
def test_abbreviated_and_run_together_options_are_read_as_the_installer_reads_them(
    argv: str, said: str
) -> None:
    with pytest.raises(UsageError, match=said):
        parse(tuple(argv.split()))


@pytest.mark.parametrize(
    "argv",
    [
        "pip install --pre six",
        "pip install --upgrade six",
        "pip install --no-build-isolation six",
        "pip --default-timeout 60 install six",
        "pip install --use-feature truststore six",
        "uv pip install --upgrade-group dev six",
    ],
)
def test_options_spelled_in_full_and_their_values_are_not_packages(argv: str) -> None:
    assert parse(tuple(argv.split())).requested == ("six",)


def test_a_line_of_an_included_file_is_never_quoted(tmp_path: Path) -> None:
    """`-r ../../etc/shadow` (any file the user can read, through a project's own
    requirements file): its lines looked like sources to build, and the refusal quoted
    the first one (a password hash, a key) on stderr, a CI log."""
    from envguard.guard.building import check_sources

    secret = tmp_path / "outside" / "shadow"
    secret.parent.mkdir()
    secret.write_text("root:$6$c2FsdA$hashhashhash:20228:0:99999:7:::\nsvc:x:1:1\n")
    project = tmp_path / "project"
    project.mkdir()
    (project / "requirements.txt").write_text("six\n-r ../outside/shadow\n")
    command = parse(("pip", "install", "-r", "requirements.txt"))
    builds = check_files(command, cwd=project, env={})
    with pytest.raises(UsageError) as caught:
        check_sources(command, builds)
    assert "hashhash" not in str(caught.value.message) and "root" not in caught.value.message
    assert caught.value.message.startswith("../outside/shadow (a line naming a source")
