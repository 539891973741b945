"""`envguard protect`: pip and uv in a protected venv go through the guard by themselves
(real subprocesses: the hook runs in the venv's own Python), and `--off` leaves nothing."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.guard import hook
from factories import UV, make_venv, run

runner = CliRunner()


def _files(venv: Path) -> set[str]:
    return {
        str(p.relative_to(venv))
        for p in venv.rglob("*")
        if "__pycache__" not in p.parts and not p.is_dir()
    }


def _env(venv: Path, *, active: bool) -> dict[str, str]:
    env = dict(os.environ)
    if active:
        env["VIRTUAL_ENV"] = str(venv)
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{Path(UV).parent}{os.pathsep}{env['PATH']}"
    return env


@pytest.mark.slow
def test_pip_and_uv_in_a_protected_venv_go_through_the_guard(
    stack: tuple[Path, Path], tmp_path: Path
) -> None:
    import ensurepip

    from factories import uv_install

    venv, wh = stack
    uv_install(venv, Path(ensurepip.__file__).parent / "_bundled", "pip")
    before = _files(venv)
    result = runner.invoke(app, ["protect", "--venv", str(venv)])
    assert result.exit_code == 0, result.stderr
    reqs = tmp_path / "reqs.txt"
    reqs.write_text("sglang\n")
    python = str(venv / "bin" / "python")
    links = ["--no-index", "--find-links", str(wh)]
    for argv, active in (
        ([python, "-m", "pip", "install", *links, "sglang"], False),
        ([str(venv / "bin" / "pip"), "install", *links, "-r", str(reqs)], False),
        ([str(venv / "bin" / "pip"), "uninstall", "-y", "torch"], False),
        (["uv", "pip", "install", *links, "sglang"], True),
        (["uv", "--color", "never", "pip", "install", *links, "sglang"], True),
    ):
        proc = subprocess.run(
            argv, capture_output=True, text=True, env=_env(venv, active=active), check=False
        )
        assert proc.returncode == 1, (argv, proc.stdout, proc.stderr)
        assert "torch 2.13.0+cpu" in proc.stdout and "refused" in proc.stderr, argv
    freeze = run([UV, "pip", "freeze", "--python", str(venv)]).stdout
    assert "torch==2.13.0+cpu" in freeze and "sglang" not in freeze
    # Other pip commands, and the venv's Python, are left alone.
    assert "pip" in run([python, "-m", "pip", "--version"]).stdout
    result = runner.invoke(app, ["protect", "--off", "--venv", str(venv)])
    assert result.exit_code == 0, result.stderr
    assert _files(venv) == before
    assert not list(venv.rglob("_envguard_protect*"))


def test_a_shim_edited_by_hand_is_found_and_said(tmp_path: Path) -> None:
    venv = tmp_path / ".venv"
    make_venv(venv)
    assert runner.invoke(app, ["protect", "--venv", str(venv)]).exit_code == 0
    assert runner.invoke(app, ["protect", "--check", "--venv", str(venv)]).exit_code == 0
    shim = venv / "bin" / "uv"
    shim.write_text(shim.read_text().replace("hook.uv_main(", "print("))
    result = runner.invoke(app, ["protect", "--check", "--venv", str(venv)])
    assert result.exit_code == 1
    assert f"edited by hand: {shim}" in result.stdout
    result = runner.invoke(app, ["protect", "--off", "--venv", str(venv)])
    assert result.exit_code == 0
    assert f"{shim} had been edited by hand" in result.stderr
    assert not shim.exists() and not (venv / "envguard-protect.json").exists()


def test_the_hook_is_python_38_and_standard_library_only() -> None:
    source = Path(hook.__file__).read_text()
    tree = ast.parse(source, feature_version=(3, 8))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert imported <= set(sys.stdlib_module_names)


@pytest.mark.slow
def test_pip_from_another_interpreter_is_held_to_the_pinned_gpu_stack(
    stack: tuple[Path, Path], tmp_path: Path
) -> None:
    """`pip --python VENV install ...` from another interpreter never imports the hook, but
    it reads the venv's pip.conf: the torch pin (with its +cpu build) refuses the swap. The
    guard itself is not held by it, and pins the new torch once it was allowed."""
    import ensurepip

    from factories import uv_install

    if subprocess.run([sys.executable, "-m", "pip", "--version"], check=False).returncode:
        pytest.skip("this interpreter has no pip of its own to act as the outsider")
    venv, wh = stack
    uv_install(venv, Path(ensurepip.__file__).parent / "_bundled", "pip")
    assert runner.invoke(app, ["protect", "--venv", str(venv)]).exit_code == 0
    assert "torch==2.13.0+cpu" in (venv / "envguard-constraints.txt").read_text().splitlines()
    links = ["--no-index", "--find-links", str(wh)]
    outsider = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    proc = subprocess.run(
        [*outsider, "install", "--disable-pip-version-check", *links, "sglang"],
        capture_output=True,
        text=True,
        env=_env(venv, active=False),
        check=False,
    )
    assert proc.returncode != 0, proc.stdout
    freeze = run([UV, "pip", "freeze", "--python", str(venv)]).stdout
    assert "torch==2.13.0+cpu" in freeze and "sglang" not in freeze
    pip = str(venv / "bin" / "pip")
    result = runner.invoke(
        app,
        ["guard", "--venv", str(venv), "--allow", "torch", "--", pip, "install", *links, "sglang"],
    )
    assert result.exit_code == 0, result.stderr
    assert "torch==2.14.1" in run([UV, "pip", "freeze", "--python", str(venv)]).stdout
    assert "torch==2.14.1" in (venv / "envguard-constraints.txt").read_text().splitlines()
    assert runner.invoke(app, ["protect", "--check", "--venv", str(venv)]).exit_code == 0
    assert runner.invoke(app, ["protect", "--off", "--venv", str(venv)]).exit_code == 0
    assert not (venv / "pip.conf").exists() and not (venv / "envguard-constraints.txt").exists()


def test_a_venv_with_its_own_pip_conf_keeps_it(tmp_path: Path) -> None:
    venv = tmp_path / ".venv"
    make_venv(venv)
    own = "[global]\nindex-url = https://mirror.example/simple\n"
    (venv / "pip.conf").write_text(own)
    result = runner.invoke(app, ["protect", "--venv", str(venv)])
    assert result.exit_code == 0, result.stderr
    assert "pip.conf is the venv's own: left alone" in result.stderr
    assert not (venv / "envguard-constraints.txt").exists()
    assert runner.invoke(app, ["protect", "--off", "--venv", str(venv)]).exit_code == 0
    assert (venv / "pip.conf").read_text() == own


@pytest.mark.slow
def test_an_undo_rebuilds_the_venv_protected_as_it_was(stack: tuple[Path, Path]) -> None:
    """undo swaps in a new venv: the hook, the shim and the pins come with it."""
    from factories import uv_install

    venv, wh = stack
    assert runner.invoke(app, ["protect", "--venv", str(venv)]).exit_code == 0
    guarded = ["guard", "--venv", str(venv), "--", UV, "pip", "install", "--no-index"]
    assert runner.invoke(app, [*guarded, "--find-links", str(wh), "six"]).exit_code == 0
    uv_install(venv, wh, "sglang")  # unguarded (uv from elsewhere): torch swapped
    result = runner.invoke(app, ["undo", "--venv", str(venv), "--find-links", str(wh), "--offline"])
    assert result.exit_code == 0, result.stderr
    assert "protected again" in result.stdout
    check = runner.invoke(app, ["protect", "--check", "--venv", str(venv)])
    assert check.exit_code == 0, check.stdout
    assert "torch==2.13.0+cpu" in (venv / "envguard-constraints.txt").read_text().splitlines()


@pytest.mark.parametrize("name", ["constraint.txt", 'it\'s"pinned".txt'])
def test_constraint_files_pip_is_configured_with_still_apply_in_a_protected_venv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The venv's pip.conf would replace a constraint file named in /etc/pip.conf or the
    user's (NGC containers pin every package that way): it names them after its own, and
    the guard's own pip runs keep them without protect's pins. `pip config list` quotes
    a name as Python does (both quotes: one escaped)."""
    from envguard.guard.protect import guard_constraints

    if subprocess.run([sys.executable, "-m", "pip", "--version"], check=False).returncode:
        pytest.skip("this interpreter has no pip to read pip's configuration")
    site_wide = tmp_path / name
    site_wide.write_text("numpy<2\n")
    conf = tmp_path / "pip-global.conf"
    conf.write_text(f"[global]\nconstraint = {site_wide}\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    venv = tmp_path / ".venv"
    make_venv(venv)
    assert runner.invoke(app, ["protect", "--venv", str(venv)]).exit_code == 0
    written = (venv / "pip.conf").read_text()
    assert f"constraint = {venv / 'envguard-constraints.txt'} {site_wide}" in written
    assert guard_constraints(venv) == str(site_wide)


def test_the_hook_is_not_a_stray_file_unless_it_was_edited(stack: tuple[Path, Path]) -> None:
    """protect's .pth and hook are no distribution's: as written (the manifest's hashes)
    they are not reported as files nobody owns; edited, they are."""
    from envguard import api

    venv, _ = stack
    assert runner.invoke(app, ["protect", "--venv", str(venv)]).exit_code == 0
    assert api.snapshot(python=venv / "bin" / "python", name="s").unowned == ()
    pth = next(venv.glob("lib/python3*/site-packages/_envguard_protect.pth"))
    pth.write_text(pth.read_text() + "import os\n")
    assert api.snapshot(python=venv / "bin" / "python", name="s").unowned == (
        "_envguard_protect.pth",
    )


def test_a_manifest_naming_other_files_is_refused_and_they_are_kept(tmp_path: Path) -> None:
    """The manifest lies in the venv: one that lists the venv's python is not protect's,
    and --off removes nothing it names."""
    import json

    venv = tmp_path / ".venv"
    make_venv(venv)
    assert runner.invoke(app, ["protect", "--venv", str(venv)]).exit_code == 0
    manifest = venv / "envguard-protect.json"
    data = json.loads(manifest.read_text())
    data["files"]["bin/python"] = "0" * 64
    manifest.write_text(json.dumps(data))
    for args in (["--check"], ["--off"]):
        result = runner.invoke(app, ["protect", "--venv", str(venv), *args])
        assert result.exit_code == 2, result.stdout
        assert "a damaged protection manifest (a file protect does not write: 'bin/python')" in (
            result.stderr
        )
    assert (venv / "bin" / "python").exists() and (venv / "pyvenv.cfg").exists()


def test_off_keeps_what_was_added_to_pip_conf_by_hand(tmp_path: Path) -> None:
    """--off removes protect's constraint line (its file goes too), not the user's lines."""
    venv = tmp_path / ".venv"
    make_venv(venv)
    assert runner.invoke(app, ["protect", "--venv", str(venv)]).exit_code == 0
    conf = venv / "pip.conf"
    conf.write_text("[global]\nindex-url = https://mirror.example/simple\n\n" + conf.read_text())
    result = runner.invoke(app, ["protect", "--off", "--venv", str(venv)])
    assert result.exit_code == 0, result.stderr
    assert "protect's constraint line removed" in result.stderr
    assert conf.read_text() == "[global]\nindex-url = https://mirror.example/simple\n"
    assert not (venv / "envguard-constraints.txt").exists()


def test_a_forged_manifest_hides_no_stray_file(stack: tuple[Path, Path]) -> None:
    """A .pth of anyone's, or protect's hook with code added, listed in the manifest with
    its hash: still a file nobody owns (the manifest lies in the venv too)."""
    import hashlib
    import json

    from envguard import api

    venv, _ = stack
    assert runner.invoke(app, ["protect", "--venv", str(venv)]).exit_code == 0
    site = next(venv.glob("lib/python3*/site-packages"))
    evil = site / "zz_evil.pth"
    evil.write_text("import os; os.environ['EVIL'] = '1'\n")
    hook = site / "_envguard_protect.py"
    lines = hook.read_text().splitlines(keepends=True)
    at = next(n for n, line in enumerate(lines) if line.startswith("VENV = "))
    lines[at] = "VENV = __import__('os').getcwd()\n"  # code where a literal was filled in
    hook.write_text("".join(lines))
    manifest = venv / "envguard-protect.json"
    data = json.loads(manifest.read_text())
    for path in (evil, hook):
        rel = str(path.relative_to(venv))
        data["files"][rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    manifest.write_text(json.dumps(data))
    unowned = api.snapshot(python=venv / "bin" / "python", name="s").unowned
    assert unowned == ("_envguard_protect.py", "zz_evil.pth")


def test_the_probe_knows_the_hook_as_protect_writes_it(tmp_path: Path) -> None:
    """The probe recognises protect's hook by its text, not by the manifest: the two must
    agree (after a change of guard/hook.py, set PROTECT_HOOK_SHA256 to its sha256)."""
    import hashlib

    from envguard.guard import protect
    from factories import load_target

    installed = load_target()
    source = Path(hook.__file__).read_bytes()
    assert hashlib.sha256(source).hexdigest() == installed.PROTECT_HOOK_SHA256
    venv = tmp_path / "my venv"
    make_venv(venv)
    protect.protect(venv, envguard=["/opt/env guard/bin/python", "-m", "envguard"], uv="uv")
    site = next(venv.glob("lib/python3*/site-packages"))
    for name in (installed.PROTECT_HOOK, installed.PROTECT_PTH):
        assert installed._is_protect_hook(str(site / name), name)
    assert (site / installed.PROTECT_PTH).read_bytes() == installed.PROTECT_PTH_TEXT


@pytest.mark.slow
def test_a_protected_venv_whose_path_has_a_blank_still_installs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip splits pip.conf's constraint line at blanks: protect names its own file so that
    pip reads it whole, once, however often the venv is protected; and the venv's pip, by a
    path with a blank or a relative one, is its own."""
    import ensurepip

    from envguard.testing import make_wheel
    from factories import uv_install

    wh = tmp_path / "wh"
    make_wheel(wh, "six", "1.17.0")
    project = tmp_path / "my project"
    venv = project / ".venv"
    make_venv(venv)
    uv_install(venv, Path(ensurepip.__file__).parent / "_bundled", "pip")
    for _ in range(2):
        result = runner.invoke(app, ["protect", "--venv", str(venv)])
        assert result.exit_code == 0, result.stderr
    line = next(ln for ln in (venv / "pip.conf").read_text().splitlines() if "constraint" in ln)
    assert line.split()[2:3] == [(venv / "envguard-constraints.txt").as_uri()]
    assert line.count("envguard-constraints.txt") == 1
    monkeypatch.chdir(project)
    links = ["--no-index", "--find-links", str(wh)]
    for pip in (str(venv / "bin" / "pip"), ".venv/bin/pip"):
        result = runner.invoke(
            app, ["guard", "--venv", str(venv), "--", pip, "install", *links, "six"]
        )
        assert result.exit_code == 0, result.stderr
        assert "six==1.17.0" in run([UV, "pip", "freeze", "--python", str(venv)]).stdout
        run([UV, "pip", "uninstall", "--python", str(venv), "six"])


@pytest.mark.slow
def test_an_undo_in_place_pins_the_gpu_stack_it_brought_back(stack: tuple[Path, Path]) -> None:
    """The protection stays in the venv through `uv pip sync`: its pins must follow, or pip
    would be held to the torch the undo took away."""
    venv, wh = stack
    assert runner.invoke(app, ["protect", "--venv", str(venv)]).exit_code == 0
    links = ["--no-index", "--find-links", str(wh)]
    guarded = ["guard", "--venv", str(venv), "--allow", "torch", "--allow", "numpy", "--"]
    result = runner.invoke(app, [*guarded, UV, "pip", "install", *links, "sglang"])
    assert result.exit_code == 0, result.stderr
    pins = venv / "envguard-constraints.txt"
    assert "torch==2.14.1" in pins.read_text().splitlines()
    result = runner.invoke(
        app, ["undo", "--in-place", "--venv", str(venv), "--find-links", str(wh), "--offline"]
    )
    assert result.exit_code == 0, result.stderr
    assert "torch==2.13.0+cpu" in pins.read_text().splitlines()
    assert runner.invoke(app, ["protect", "--check", "--venv", str(venv)]).exit_code == 0


@pytest.mark.slow
def test_a_rebuild_stopped_right_after_its_swap_leaves_the_venv_protected(
    stack: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C as the new venv is swapped in: the interrupt is reported, and the venv in
    place is protected as the old one was, not silently bare."""
    import signal

    from envguard import api
    from envguard.errors import StoppedError
    from envguard.lifecycle import signals_handled
    from envguard.recovery import execute

    venv, wh = stack
    good = api.snapshot(python=venv / "bin" / "python", name="good")
    path = Path("good.json")
    path.write_text(good.model_dump_json())
    assert runner.invoke(app, ["protect", "--venv", str(venv)]).exit_code == 0
    checked = execute._check_python

    def interrupted(venv: Path, outcome: object) -> None:
        checked(venv, outcome)
        os.kill(os.getpid(), signal.SIGINT)  # inside the swap's deferral: raised as it ends

    monkeypatch.setattr(execute, "_check_python", interrupted)
    sources = api.sources(find_links=[str(wh)], offline=True)
    with signals_handled(), pytest.raises(StoppedError, match="right after the swap"):
        api.rebuild(path, venv=venv, sources=sources)
    check = runner.invoke(app, ["protect", "--check", "--venv", str(venv)])
    assert check.exit_code == 0, check.stdout


@pytest.mark.slow
@pytest.mark.parametrize("after", ["prune_backups", "not_restored"])
def test_a_rebuild_interrupted_once_swapped_leaves_the_venv_protected(
    stack: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, after: str
) -> None:
    """Ctrl-C after the swap's deferral ended (old backups pruned, what the rebuild does
    not restore listed): the venv in place is protected as the old one was."""
    import signal

    from envguard import api
    from envguard.lifecycle import Interrupted, signals_handled
    from envguard.recovery import execute

    venv, wh = stack
    good = api.snapshot(python=venv / "bin" / "python", name="good")
    path = Path("good.json")
    path.write_text(good.model_dump_json())
    assert runner.invoke(app, ["protect", "--venv", str(venv)]).exit_code == 0
    original = getattr(execute, after)

    def interrupted(*args: object, **kwargs: object) -> object:
        found = original(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return found

    monkeypatch.setattr(execute, after, interrupted)
    sources = api.sources(find_links=[str(wh)], offline=True)
    with signals_handled(), pytest.raises(Interrupted):
        api.rebuild(path, venv=venv, sources=sources)
    assert "numpy==2.1.0" in run([UV, "pip", "freeze", "--python", str(venv)]).stdout
    check = runner.invoke(app, ["protect", "--check", "--venv", str(venv)])
    assert check.exit_code == 0, check.stdout


def test_protect_writes_a_damaged_manifest_again_as_its_hint_says(tmp_path: Path) -> None:
    """The shim and pip.conf are known as protect's by what they hold: --off then removes
    them, not left behind as the venv's own."""
    venv = tmp_path / ".venv"
    make_venv(venv)
    before = _files(venv)
    assert runner.invoke(app, ["protect", "--venv", str(venv)]).exit_code == 0
    (venv / "envguard-protect.json").write_text("[1, 2]\n")
    check = runner.invoke(app, ["protect", "--check", "--venv", str(venv)])
    assert check.exit_code == 2
    assert "hint: envguard protect writes it again" in check.stderr
    result = runner.invoke(app, ["protect", "--venv", str(venv)])
    assert result.exit_code == 0, result.stderr
    assert "envguard-protect.json was damaged: written again" in result.stderr
    assert runner.invoke(app, ["protect", "--check", "--venv", str(venv)]).exit_code == 0
    assert runner.invoke(app, ["protect", "--off", "--venv", str(venv)]).exit_code == 0
    assert _files(venv) == before
