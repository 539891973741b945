"""`envguard guard`, `history` and `undo` on real venvs (tiny wheels, real uv): the
sglang-style install refused before it touches torch, let through with --allow, a harmless
one passed through, and an unguarded pollution undone."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.guard import journal
from factories import UV, make_venv, run, uv_install

runner = CliRunner()


def _install(wh: Path, *reqs: str) -> list[str]:
    return ["--", UV, "pip", "install", "--no-index", "--find-links", str(wh), *reqs]


def _freeze(venv: Path) -> str:
    return run([UV, "pip", "freeze", "--python", str(venv)]).stdout


def guard(venv: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["guard", "--venv", str(venv), *args])
    return result.exit_code, result.stdout, result.stderr


def test_the_sglang_install_is_refused_and_torch_is_untouched(stack: tuple[Path, Path]) -> None:
    venv, wh = stack
    before = _freeze(venv)
    code, out, err = guard(venv, *_install(wh, "sglang"))
    assert code == 1, err
    assert out.splitlines()[0].startswith(
        "this install would change torch 2.13.0+cpu -> 2.14.1 (critical, pulled in by sglang),"
        " add 3 packages, downgrade 1 package"
    )
    assert "sglang 0.5.23 installed with 4 packages it pulled in" in out
    assert "refused (--fail-on critical): nothing was installed or removed" in err
    assert "--allow torch" in err
    assert _freeze(venv) == before
    assert journal.records(venv) == []  # nothing ran, nothing recorded


def test_allow_torch_lets_it_through_and_it_is_recorded(stack: tuple[Path, Path]) -> None:
    venv, wh = stack
    code, _, err = guard(venv, "--allow", "torch", *_install(wh, "sglang"))
    assert code == 0, err
    assert "torch==2.14.1" in _freeze(venv)
    result = runner.invoke(app, ["history", "--venv", str(venv)])
    assert result.exit_code == 0
    first, change = result.stdout.splitlines()[:2]
    assert "sglang (allowed: torch)" in first
    # Measured after the install: torch's build is what its version.py says now.
    assert "change torch 2.13.0+cpu -> 2.14.1" in change and "pulled in by sglang" in change


@pytest.mark.slow
def test_a_harmless_install_passes_through_and_undo_reverts_later_pollution(
    stack: tuple[Path, Path],
) -> None:
    venv, wh = stack
    before = _freeze(venv)
    code, out, err = guard(venv, *_install(wh, "six"))
    assert code == 0, err
    assert out.startswith("this install would add 1 package")
    assert "six==1.17.0" in _freeze(venv)
    uv_install(venv, wh, "sglang")  # unguarded: the pollution happens anyway
    assert "torch==2.14.1" in _freeze(venv)
    result = runner.invoke(app, ["undo", "--venv", str(venv), "--find-links", str(wh), "--offline"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("back to before #1 (")
    assert _freeze(venv) == before
    # The undo is recorded like any change: undoing it brings the pollution back.
    assert journal.records(venv)[0].command[:2] == ("envguard", "undo")


@pytest.mark.slow
def test_an_undo_interrupted_once_swapped_is_recorded_finished(
    stack: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C after the rebuild swapped the venv in, while the undo words its record: the
    record that makes the undo undoable is kept, and finished as interrupted."""
    from envguard import api
    from envguard.guard import preview

    venv, wh = stack
    assert guard(venv, *_install(wh, "six"))[0] == 0
    uv_install(venv, wh, "sglang")

    def interrupted(*args: object, **kwargs: object) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(preview, "headline", interrupted)
    sources = api.sources(find_links=[str(wh)], offline=True)
    with pytest.raises(KeyboardInterrupt):
        api.undo(venv=venv, sources=sources)
    assert "sglang" not in _freeze(venv)  # swapped in
    undone = journal.records(venv)[0]
    assert undone.command[:2] == ("envguard", "undo")
    assert (undone.change, undone.exit_code) == ("interrupted; see envguard diff", 130)


def test_shell_syntax_is_refused_unless_shell(tmp_path: Path) -> None:
    venv = tmp_path / ".venv"
    make_venv(venv)
    code, _, err = guard(venv, "uv pip install six; touch pwned")
    assert code == 2
    assert "holds shell syntax" in err and "--shell" in err
    assert not (tmp_path / "pwned").exists()


def test_installers_guard_cannot_preview_are_refused(tmp_path: Path) -> None:
    venv = tmp_path / ".venv"
    make_venv(venv)
    for argv, said in (
        (["--", "uv", "tool", "install", "six"], "not `uv tool`"),
        (["--", "uv", "add", "--script", "x.py", "six"], "--script"),
        (["--", "conda", "install", "six"], "does not know the installer"),
        (["--", "pip", "install", "--target", "/tmp/x", "six"], "--target"),
    ):
        code, _, err = guard(venv, *argv)
        assert code == 2 and said in err, err


def test_requirements_files_are_confined(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    venv = tmp_path / ".venv"
    make_venv(venv)
    monkeypatch.chdir(tmp_path)
    fifo = tmp_path / "reqs.txt"
    os.mkfifo(fifo)
    nested = tmp_path / "outer.txt"
    nested.write_text("six\n-r /proc/self/environ\n")
    for req, said in (
        ("/proc/self/environ", "a requirements file in proc/; not read"),
        (str(fifo), "not a regular file"),
        (str(nested), "a requirements file in proc/; not read"),
        ("missing.txt", "no such requirements file"),
    ):
        code, _, err = guard(venv, "--", "uv", "pip", "install", "-r", req)
        assert code == 2 and said in err, err


def test_a_dry_run_that_hangs_meets_its_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv = tmp_path / ".venv"
    make_venv(venv)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    hanging = bin_dir / "uv"
    hanging.write_text("#!/bin/sh\nexec sleep 30\n")
    hanging.chmod(0o755)
    code, _, err = guard(venv, "--timeout", "0.3", "--", str(hanging), "pip", "install", "six")
    assert code == 2
    assert "the uv dry run did not finish in 0.3 s; nothing was installed" in err


def test_a_hostile_snapshot_is_refused_before_anything_runs(tmp_path: Path) -> None:
    venv = tmp_path / ".venv"
    make_venv(venv)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema_version": 1, "name": "x\u202e", "packages": "no"}))
    code, _, err = guard(venv, str(bad), "--", "uv", "pip", "install", "six")
    assert code == 2 and err.startswith("error: ") and "bad.json" in err


def test_history_bounds_its_records_and_names_a_damaged_one(tmp_path: Path) -> None:
    venv = tmp_path / ".venv"
    make_venv(venv)
    for n in range(4):
        journal.begin(venv, "{}", command=("pip", "install", f"p{n}"), allowed=(), planned="x")
    assert journal.collect(venv, keep=2) == [2, 1]
    assert [r.number for r in journal.records(venv)] == [4, 3]
    assert sorted(p.name for p in journal.folder(venv).iterdir()) == [
        ".gitignore",  # git leaves the history alone
        "0003.json",
        "0003.record.json",
        "0004.json",
        "0004.record.json",
    ]
    (journal.folder(venv) / "0004.record.json").write_text('{"schema_version": 1}')
    result = runner.invoke(app, ["history", "--venv", str(venv)])
    assert result.exit_code == 2
    assert "0004.record.json: a damaged guard record" in result.stderr


def _with_pip(venv: Path) -> None:
    """The venv's own pip, from the wheel Python bundles (offline)."""
    import ensurepip

    uv_install(venv, Path(ensurepip.__file__).parent / "_bundled", "pip")


@pytest.mark.slow
def test_pip_installs_and_uninstalls_are_previewed_with_the_venvs_own_pip(
    stack: tuple[Path, Path],
) -> None:
    venv, wh = stack
    _with_pip(venv)
    before = _freeze(venv)
    pip = ["python", "-m", "pip", "install", "--no-index", "--find-links", str(wh), "sglang"]
    code, out, err = guard(venv, "--", *pip)
    assert code == 1, err
    # pip's report says what requires what: torch is pulled in by sglang.
    assert "change torch 2.13.0+cpu -> 2.14.1 (critical, pulled in by sglang)" in out
    code, out, err = guard(venv, "--", "pip", "uninstall", "-y", "torch")
    assert code == 1, err
    assert out.startswith("this uninstall would remove torch 2.13.0+cpu (critical)")
    assert _freeze(venv) == before
    code, _, err = guard(venv, "--", "pip", "uninstall", "-y", "numpy")
    assert code == 0, err
    assert "numpy" not in _freeze(venv)


def test_a_pip_from_another_environment_is_refused(tmp_path: Path) -> None:
    venv = tmp_path / ".venv"
    make_venv(venv)  # uv's: no pip of its own
    code, _, err = guard(venv, "--", "pip", "uninstall", "-y", "torch")
    assert code == 2
    assert "the venv has no pip of its own" in err


def test_a_dry_run_that_says_something_hostile_is_refused(tmp_path: Path) -> None:
    venv = tmp_path / ".venv"
    make_venv(venv)
    fake = tmp_path / "bin" / "uv"
    fake.parent.mkdir()
    report = {"changes": [{"name": "torch\u001b[2J", "version": "1", "action": "installed"}]}
    fake.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(report)}\nEOF\n")
    fake.chmod(0o755)
    code, out, err = guard(venv, "--", str(fake), "pip", "install", "torch")
    assert code == 2 and out == ""
    assert err.startswith("error: the uv dry run said something envguard does not read")
    assert "\x1b" not in err


FAKE_UV = """#!/bin/sh
case " $* " in
  *" --dry-run "*) [ -n "$HANG" ] && echo $$ > "$MARK.started" && exec sleep 30
     echo '{"changes": [{"name": "six", "version": "1.17.0", "action": "installed"}]}' ;;
  *) echo $$ > "$MARK.started"; sleep 1; touch "$MARK" ;;
esac
"""


@pytest.mark.slow
@pytest.mark.parametrize("during", ["preview", "install"])
def test_ctrl_c_leaves_the_venv_untouched_or_fully_installed(tmp_path: Path, during: str) -> None:
    import signal
    import subprocess
    import sys
    import time

    venv = tmp_path / ".venv"
    make_venv(venv)
    fake = tmp_path / "bin" / "uv"
    fake.parent.mkdir()
    fake.write_text(FAKE_UV)
    fake.chmod(0o755)
    mark = tmp_path / "installed"
    env = {**os.environ, "MARK": str(mark), "HANG": "1" if during == "preview" else ""}
    argv = [sys.executable, "-m", "envguard", "guard", "--venv", str(venv), "--", str(fake)]
    proc = subprocess.Popen(
        [*argv, "pip", "install", "six"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started = tmp_path / "installed.started"
    deadline = time.monotonic() + 20
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # as a terminal's Ctrl-C reaches envguard alone
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, (out, err)
    assert "error: interrupted (SIGINT)" in err
    if during == "preview":
        assert not mark.exists()  # nothing ran
        assert journal.records(venv) == []
        with pytest.raises(ProcessLookupError):  # the dry run was stopped with envguard
            os.kill(int(started.read_text()), 0)
    else:
        assert mark.exists()  # the installer was let finish
        assert "envguard undo" in err
        assert journal.records(venv)[0].change == "interrupted; not measured"


def _project_files() -> dict[str, bytes]:
    return {name: Path(name).read_bytes() for name in ("pyproject.toml", "uv.lock")}


def test_uv_add_of_the_sglang_stack_is_refused_and_the_project_left_as_it_was(
    project: tuple[Path, Path],
) -> None:
    venv, _ = project
    # Any torch from 2.13 on: the lock's 2.13.0+cpu still fits, sglang's 2.14.1 too.
    manifest = Path("pyproject.toml")
    manifest.write_text(manifest.read_text().replace("torch>=2.13,<2.14", "torch>=2.13"))
    before, files = _freeze(venv), _project_files()
    code, out, err = guard(venv, "--", UV, "add", "sglang")
    assert code == 1, err
    assert out.startswith("this add would change torch"), out
    assert "(critical, pulled in by sglang)" in out.splitlines()[0]
    assert "refused (--fail-on critical)" in err
    assert _freeze(venv) == before
    # uv add has no dry run: the preview's edits of pyproject.toml and uv.lock are undone.
    assert _project_files() == files


def test_uv_add_of_a_harmless_package_runs_and_is_recorded(project: tuple[Path, Path]) -> None:
    venv, _ = project
    code, out, err = guard(venv, "--", UV, "add", "six")
    assert code == 0, err
    assert out.startswith("this add would add 1 package"), out
    assert "six==1.17.0" in _freeze(venv)
    assert '"six' in Path("pyproject.toml").read_text()  # the real uv add ran
    (record,) = journal.records(venv)
    assert record.command == (UV, "add", "six")


def test_uv_sync_previews_the_removal_of_what_the_lock_lacks(project: tuple[Path, Path]) -> None:
    venv, wh = project
    uv_install(venv, wh, "six")  # installed beside the project: uv sync removes it
    code, out, err = guard(venv, "--preview", "--", UV, "sync")
    assert code == 0, err
    assert out.startswith("this sync would remove six 1.17.0"), out  # named, not counted
    assert "six==1.17.0" in _freeze(venv)  # a preview changes nothing


def test_a_failing_uv_add_preview_puts_the_project_files_back(
    project: tuple[Path, Path], tmp_path: Path
) -> None:
    """uv add writes pyproject.toml and uv.lock before it fails (or is interrupted): the
    preview leaves them as they were, and creates no lock that was not there."""
    venv, _ = project
    Path("uv.lock").unlink()
    files = {"pyproject.toml": Path("pyproject.toml").read_bytes()}
    fake = tmp_path / "fakebin" / "uv"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\necho 'dependencies = [broken' > pyproject.toml\necho lock > uv.lock\n"
        "echo 'error: no' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    code, _, err = guard(venv, "--", str(fake), "add", "six")
    assert code == 2
    assert "the uv add dry run failed (exit 1); nothing was installed" in err
    assert {"pyproject.toml": Path("pyproject.toml").read_bytes()} == files
    assert not Path("uv.lock").exists()


def test_an_install_that_does_more_than_its_dry_run_said_is_recorded_as_it_was(
    stack: tuple[Path, Path], tmp_path: Path
) -> None:
    """The record is measured on the venv after the install, also when the dry run said
    nothing would change (an installer reading stdin, a resolver that differs at run time)."""
    venv, wh = stack
    fake = _uv_whose_dry_run_says_nothing(tmp_path)
    code, out, err = guard(
        venv, "--", str(fake), "pip", "install", "--no-index", "--find-links", str(wh), "six"
    )
    assert code == 0, err
    assert out.startswith("this install would change no package")
    assert "six==1.17.0" in _freeze(venv)
    (record,) = journal.records(venv)
    assert record.change == "add 1 package (the dry run said: no package change)"


def test_a_snapshot_left_without_its_record_does_not_block_the_next_change(
    tmp_path: Path,
) -> None:
    """envguard stopped between writing a change's snapshot and its record: the next
    guarded change (or undo) is recorded under the next number, not refused."""
    venv = tmp_path / ".venv"
    first = journal.begin(venv, "{}", command=("pip", "install", "six"), allowed=(), planned="")
    journal.finish(venv, first, change="add 1 package", exit_code=0)
    (journal.folder(venv) / "0002.json").write_text("{}")  # its record never written
    record = journal.begin(venv, "{}", command=("pip", "install", "x"), allowed=(), planned="")
    assert [r.number for r in journal.records(venv)] == [record.number, 1]
    assert record.number == 3


def test_a_reinstall_of_another_build_of_the_same_version_is_measured(
    stack: tuple[Path, Path], tmp_path: Path
) -> None:
    """Same name, same version, other files (a local rebuild): the versions agree, the
    RECORD fingerprint does not, and the record says what happened."""
    from envguard.testing import make_wheel

    venv, _ = stack
    other = tmp_path / "other-build"
    make_wheel(other, "numpy", "2.1.0", files={"numpy/__init__.py": "PATCHED = True\n"})
    fake = _uv_whose_dry_run_says_nothing(tmp_path)
    argv = [str(fake), "pip", "install", "--no-index", "--find-links", str(other)]
    code, _, err = guard(venv, "--", *argv, "--reinstall", "numpy==2.1.0")
    assert code == 0, err
    (record,) = journal.records(venv)
    assert record.change.endswith("(the dry run said: no package change)"), record.change


def test_an_install_whose_measurement_is_interrupted_still_ends_its_record(
    stack: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from envguard import api
    from envguard.api import guarding

    venv, wh = stack

    def interrupted(*_: object) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(guarding, "_measured_change", interrupted)
    options = api.GuardOptions(venv=venv)
    with pytest.raises(KeyboardInterrupt):
        api.guard([UV, "pip", "install", "--no-index", "--find-links", str(wh), "six"], options)
    (record,) = journal.records(venv)
    assert (record.change, record.exit_code) == ("not measured; see envguard diff", 0)


def _uv_whose_dry_run_says_nothing(tmp_path: Path) -> Path:
    """A uv whose dry run reports no change and which then installs for real."""
    fake = tmp_path / "fakebin" / "uv"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        'case " $* " in *" --dry-run "*) echo \'{"changes": []}\'; exit 0;; esac\n'
        f'exec {UV} "$@"\n'
    )
    fake.chmod(0o755)
    return fake


def test_an_install_that_would_split_torch_and_torchvision_is_refused(
    stack: tuple[Path, Path],
) -> None:
    """torchvision 0.29 (torch 2.14's) with --no-deps beside torch 2.13: no package of the
    venv changes, the pair is left split (compare/sections/siblings.py)."""
    venv, wh = stack
    from envguard.testing import make_wheel

    make_wheel(wh, "torchvision", "0.29.1", requires=["torch>=2.14.0"])
    before = _freeze(venv)
    code, out, err = guard(venv, *_install(wh, "--no-deps", "torchvision==0.29.1"))
    assert code == 1, out + err
    assert "torchvision 0.29.1 goes with torch 2.14, and torch 2.13.0+cpu is installed" in out
    assert "refused (--fail-on critical)" in err and "--allow torch " in err
    assert _freeze(venv) == before


def test_an_install_that_writes_over_a_kept_packages_file_is_refused(
    stack: tuple[Path, Path],
) -> None:
    """A wheel shipping one of torch's files (torch stays installed): the install would
    leave torch's torch/version.py as the other wheel's bytes. The would-be venv's incoming
    files are read against the venv's own RECORDs; --allow of a claimant lets it through."""
    venv, wh = stack
    from envguard.testing import make_wheel

    make_wheel(wh, "torchfix", "1.0", files={"torch/version.py": "__version__ = 'mine'\n"})
    make_wheel(wh, "harmless", "1.0", files={"harmless/__init__.py": ""})
    before = _freeze(venv)
    code, out, err = guard(venv, *_install(wh, "torchfix"))
    assert code == 1, out + err
    assert "torch/version.py is claimed by torch 2.13.0+cpu and torchfix 1.0" in out, out + err
    assert "refused (--fail-on critical)" in err and " --allow torchfix -- " in err
    assert _freeze(venv) == before
    code, out, err = guard(venv, *_install(wh, "harmless"))  # nothing of torch's
    assert code == 0, out + err
    # allowing the package written over allows nothing: the writer is the one to name
    code, out, err = guard(venv, "--allow", "torch", *_install(wh, "torchfix"))
    assert code == 1 and " --allow torchfix -- " in err, out + err
    code, out, err = guard(venv, "--allow", "torchfix", *_install(wh, "torchfix"))
    assert code == 0, out + err
    assert "torchfix==1.0" in _freeze(venv)


def test_two_incoming_wheels_sharing_a_file_do_not_stop_the_install(
    stack: tuple[Path, Path],
) -> None:
    """flashinfer-python and torch-c-dlpack-ext (sglang's) both ship build_backend.py: a
    clash of the install's own, which check names once it ran, not a kept file written
    over."""
    venv, wh = stack
    from envguard.testing import make_wheel

    make_wheel(wh, "wheel-a", "1.0", files={"build_backend.py": "A = 1\n"})
    make_wheel(wh, "wheel-b", "1.0", files={"build_backend.py": "B = 22\n"})
    make_wheel(wh, "bundle", "1.0", requires=["wheel-a", "wheel-b"])
    code, out, err = guard(venv, "--preview", *_install(wh, "bundle"))
    assert code == 0, out + err
    assert "build_backend.py" not in out


def _slow_uv(tmp_path: Path, seconds: float) -> Path:
    """A uv whose dry run takes ``seconds`` to answer that nothing changes."""
    fake = tmp_path / "bin" / "uv"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(f"#!/bin/sh\nsleep {seconds}\necho '{{\"changes\": []}}'\n")
    fake.chmod(0o755)
    return fake


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_a_dry_run_still_resolving_after_the_probe_is_said_on_stderr(
    tmp_path: Path, fmt: str
) -> None:
    """pip's resolver can take a minute against an index: once the venv is probed, a line
    on stderr says what guard waits for (stdout stays the report, plain for a log)."""
    venv = tmp_path / ".venv"
    make_venv(venv)
    fake = _slow_uv(tmp_path, 2)
    argv = ["--preview", "--format", fmt, "--", str(fake), "pip", "install", "six"]
    code, out, err = guard(venv, *argv)
    assert code == 0, err
    assert "uv is resolving (its dry run) ...\n" in err
    assert "\x1b" not in err  # not a terminal
    if fmt == "json":
        assert json.loads(out)["headline"]


def test_a_dry_run_done_before_the_probe_is_not_waited_for_aloud(tmp_path: Path) -> None:
    venv = tmp_path / ".venv"
    make_venv(venv)
    fake = _slow_uv(tmp_path, 0)
    code, _, err = guard(venv, "--preview", "--", str(fake), "pip", "install", "six")
    assert code == 0, err
    assert "resolving" not in err


@pytest.mark.parametrize(
    ("tty", "no_color", "dim"), [(True, "", True), (True, "1", False), (False, "", False)]
)
def test_the_waiting_line_is_dimmed_only_on_a_terminal_without_no_color(
    monkeypatch: pytest.MonkeyPatch, tty: bool, no_color: str, dim: bool
) -> None:
    import io

    from envguard.cli import guard as cli_guard

    class Stream(io.StringIO):
        def isatty(self) -> bool:
            return tty

    stream = Stream()
    monkeypatch.setattr("sys.stderr", stream)
    monkeypatch.setenv("NO_COLOR", no_color)
    cli_guard._waiting("pip is resolving (its dry run) ...")
    text = stream.getvalue()
    assert ("\x1b[2m" in text) == dim
    assert text.replace("\x1b[2m", "").replace("\x1b[0m", "") == (
        "pip is resolving (its dry run) ...\n"
    )
