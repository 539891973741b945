"""Real rebuilds, offline from tiny wheels: plan, execute, verify, swap; and failure safety."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import POLLUTION
from envguard.cli import app
from factories import make_simple_index, make_torch_wheel, run, uv_freeze, uv_install

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def torch_index(tmp_path: Path, wheelhouse: Path) -> str:
    """Local stand-ins for download.pytorch.org/whl/cu128 and /cu130."""
    return make_simple_index(
        tmp_path / "torch-index",
        {
            "cu128": [next(wheelhouse.glob("torch-2.11.0+cu128-*.whl"))],
            "cu130": [next(wheelhouse.glob("torch-2.11.0+cu130-*.whl"))],
        },
    )


def pypi_like(wheelhouse: Path) -> Path:
    """The wheelhouse as PyPI looks to this test: no +cu128/+cu130 torch builds in it, so
    torch can only come from the stand-in PyTorch index."""
    folder = wheelhouse.parent / f"{wheelhouse.name}-pypi-like"
    if not folder.exists():
        folder.mkdir()
        for wheel in wheelhouse.glob("*.whl"):
            if not wheel.name.startswith("torch-"):
                (folder / wheel.name).symlink_to(wheel)
    return folder


def offline_args(wheelhouse: Path, torch_index: str) -> list[str]:
    return [
        "--no-index",
        "--find-links",
        str(pypi_like(wheelhouse)),
        "--offline",
        "--torch-index",
        torch_index,
    ]


@pytest.fixture
def good(in_tmp: Path, good_venv: Path) -> Path:
    code, _, err = invoke("snapshot", "--python", str(good_venv), "--name", "good")
    assert code == 0, err
    return good_venv


def snapshot_pairs(in_tmp: Path) -> set[tuple[str, str]]:
    data = json.loads((in_tmp / "snapshots" / "good.json").read_text())
    return {(p["name"], p["version"]) for p in data["packages"]}


def test_plan_only_prints_and_changes_nothing(
    good: Path, wheelhouse: Path, torch_index: str
) -> None:
    before = uv_freeze(good)
    code, out, _ = invoke(
        "rebuild",
        "good",
        "--venv",
        str(good),
        "--format",
        "json",
        *offline_args(wheelhouse, torch_index),
    )
    assert code == 0
    plan = json.loads(out)
    kinds = [s["kind"] for s in plan["steps"]]
    assert kinds == ["venv", "install", "sync", "verify", "swap"]
    install = next(s for s in plan["steps"] if s["kind"] == "install")
    assert install["argv"][install["argv"].index("--index-url") + 1] == f"{torch_index}/cu128"
    files = {Path(f["path"]).name: f["content"] for f in plan["files"]}
    assert "torch==2.11.0+cu128" in files["torch-cu128.txt"]
    assert "torch==2.11.0+cu128" in files["requirements.txt"]  # kept by the sync, not fetched
    assert uv_freeze(good) == before
    code, out, _ = invoke("rebuild", "good", "--venv", str(good), "--format", "shell")
    assert code == 0 and out.startswith("#!/usr/bin/env bash") and "uv pip sync" in out


def test_fresh_rebuild_restores_polluted_venv(
    good: Path, in_tmp: Path, wheelhouse: Path, torch_index: str
) -> None:
    uv_install(good, wheelhouse, *POLLUTION)
    uv_install(good, wheelhouse, "torch==2.11.0+cu130", extra=["--reinstall-package", "torch"])
    code, out, err = invoke(
        "rebuild", "good", "--venv", str(good), "--execute", *offline_args(wheelhouse, torch_index)
    )
    assert code == 0, err
    assert uv_freeze(good) == snapshot_pairs(in_tmp)
    backups = list(in_tmp.glob(".venv.envguard-backup-*"))
    assert len(backups) == 1 and "kept at" in out
    assert backups[0].name.endswith(f"-{os.getpid()}")  # unique: two rebuilds in one second
    assert ("sglang", "0.4.0") in uv_freeze(backups[0])  # the old venv, intact for rollback
    code, out, err = invoke(
        "diff", "good", "--format", "json", "--only", "packages", "--only", "interpreter"
    )
    assert code == 0, out + err
    assert [c for c in json.loads(out)["changes"] if c["severity"] != "info"] == []
    assert not list(in_tmp.glob(".venv.envguard-build-*"))
    assert not list(in_tmp.glob(".venv.envguard-plan-*"))


def test_a_fresh_rebuild_replaces_a_venv_whose_python_does_not_start(
    good: Path, in_tmp: Path, wheelhouse: Path, torch_index: str
) -> None:
    """The old venv's installed files are read first (edits uv's cache may hold); a venv
    that cannot be measured is what a rebuild is for, so it is said and the build goes on."""
    python = good / "bin" / "python"
    python.unlink()
    python.write_text("#!/bin/sh\nexit 1\n")
    python.chmod(0o755)
    code, out, err = invoke(
        "rebuild", "good", "--venv", str(good), "--execute", *offline_args(wheelhouse, torch_index)
    )
    assert code == 0, out + err
    assert "installed files were not read" in out + err
    assert uv_freeze(good) == snapshot_pairs(in_tmp)


def test_in_place_removes_pollution(
    good: Path, in_tmp: Path, wheelhouse: Path, torch_index: str
) -> None:
    uv_install(good, wheelhouse, *POLLUTION)
    code, _, err = invoke(
        "rebuild",
        "good",
        "--venv",
        str(good),
        "--execute",
        "--in-place",
        *offline_args(wheelhouse, torch_index),
    )
    assert code == 0, err
    assert uv_freeze(good) == snapshot_pairs(in_tmp)
    assert not list(in_tmp.glob(".venv.envguard-backup-*"))


def venv_state(venv: Path) -> dict[str, bytes]:
    """Every file of a venv, byte for byte (symlinks by target)."""
    state = {}
    for path in sorted(venv.rglob("*")):
        if path.is_symlink():
            state[str(path)] = os.readlink(path).encode()
        elif path.is_file() and "__pycache__" not in path.parts:
            state[str(path)] = path.read_bytes()
    return state


def test_failed_install_leaves_old_venv_byte_for_byte(
    good: Path, in_tmp: Path, tmp_path: Path, wheelhouse: Path, torch_index: str
) -> None:
    uv_install(good, wheelhouse, *POLLUTION)
    before = venv_state(good)
    thin = tmp_path / "thin-wheelhouse"  # lacks transformers 4.46.0: the sync must fail
    thin.mkdir()
    for wheel in wheelhouse.glob("*.whl"):
        if not wheel.name.startswith("transformers-4.46.0"):
            (thin / wheel.name).symlink_to(wheel)
    code, _, err = invoke(
        "rebuild", "good", "--venv", str(good), "--execute", *offline_args(thin, torch_index)
    )
    assert code == 1
    first = err.strip().splitlines()
    line = next(ln for ln in first if ln.startswith("error:"))
    assert "install exactly the" in line and "transformers" in err
    assert venv_state(good) == before
    assert not list(in_tmp.glob(".venv.envguard-*"))


def _running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killed_rebuild_leaves_venv_intact(
    good: Path, in_tmp: Path, tmp_path: Path, wheelhouse: Path, torch_index: str, sig: int
) -> None:
    uv_install(good, wheelhouse, *POLLUTION)
    before = venv_state(good)
    marker = tmp_path / "sync-started"
    slow_uv = tmp_path / "slow-uv"
    real = run([sys.executable, "-c", "import uv; print(uv.find_uv_bin())"]).stdout.strip()
    child = tmp_path / "uv-child.pid"  # what uv starts (a build backend): ended with it
    slow_uv.write_text(
        f'#!/bin/sh\nif [ "$2" = sync ]; then sleep 30 & echo $! > {child}; touch {marker};'
        f' wait; fi\nexec {real} "$@"\n'
    )
    slow_uv.chmod(0o755)
    env = {**os.environ, "ENVGUARD_UV": str(slow_uv)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "envguard",
            "rebuild",
            "good",
            "--venv",
            str(good),
            "--execute",
            *offline_args(wheelhouse, torch_index),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert venv_state(good) == before
    if sig == signal.SIGTERM:
        assert proc.returncode == 143 and "interrupted" in err and "not touched" in err
        assert not list(in_tmp.glob(".venv.envguard-build-*"))
        pid = int(child.read_text())
        deadline = time.monotonic() + 10
        while _running(pid):
            assert time.monotonic() < deadline, f"uv's child {pid} outlived the rebuild"
            time.sleep(0.05)
    else:
        # A SIGKILL cannot be caught: the next rebuild removes what it left.
        assert list(in_tmp.glob(".venv.envguard-build-*"))
        code, _, err = invoke(
            "rebuild",
            "good",
            "--venv",
            str(good),
            "--execute",
            *offline_args(wheelhouse, torch_index),
        )
        assert code == 0, err
        assert not list(in_tmp.glob(".venv.envguard-build-*"))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("name", "torch; rm -rf ~", "is not a valid PEP 508 distribution name"),
        ("name", "--index-url=http://evil", "is not a valid PEP 508 distribution name"),
        ("name", "torch\n--index-url http://evil", "is not a valid PEP 508 distribution name"),
        ("version", "2.0\n--extra-index-url http://evil", "is not a valid PEP 440 version"),
        ("source", {"kind": "url", "url": "https://x/y.whl\n-e /"}, "characters a requirement"),
        ("source", {"kind": "url", "url": "ftp://evil/x.whl"}, "scheme 'ftp' is not allowed"),
        ("source", {"kind": "vcs", "url": "https://x/r", "commit": "$(reboot)"}, "not a commit"),
        ("source", {"kind": "editable", "path": "relative/path"}, "not an absolute local path"),
    ],
)
def test_hostile_snapshot_values_are_refused(
    in_tmp: Path, field: str, value: object, message: str
) -> None:
    from envguard.snapshots import store
    from factories import package, snapshot

    data = json.loads(store.dumps(snapshot([package("torch", "2.11.0")])))
    data["packages"][0][field] = value
    (in_tmp / "evil.json").write_text(json.dumps(data))
    for extra in ([], ["--execute"]):
        code, _, err = invoke("rebuild", "evil.json", "--venv", str(in_tmp / "v"), *extra)
        assert code == 2, err
        assert message in err.splitlines()[0]
    assert not (in_tmp / "v").exists()


def test_missing_editable_is_a_clear_error(in_tmp: Path) -> None:
    from envguard.snapshots import store
    from envguard.snapshots.models import Source
    from factories import package, snapshot

    gone = str(in_tmp / "gone")
    snap = snapshot(
        [package("mine", "0.1", source=Source(kind="editable", path=gone, url=f"file://{gone}"))]
    )
    (in_tmp / "s.json").write_text(store.dumps(snap))
    code, _, err = invoke("rebuild", "s.json", "--venv", str(in_tmp / "v"))
    assert code == 2 and f"editable mine: {gone} no longer exists" in err
    assert "--skip-editables" in err
    code, out, _ = invoke("rebuild", "s.json", "--venv", str(in_tmp / "v"), "--skip-editables")
    assert code == 0 and "skipped: mine" in out


def test_exported_requirements_and_pylock_install_the_exact_set(
    good: Path, in_tmp: Path, wheelhouse: Path, torch_index: str, venv_factory: object
) -> None:
    from factories import UV

    expected = snapshot_pairs(in_tmp)
    args = [
        "--no-index",
        "--find-links",
        str(wheelhouse),
        "--offline",
        "--torch-index",
        torch_index,
    ]
    code, _, err = invoke("export", "good", "--format", "pylock", "-o", "pylock.toml", *args)
    assert code == 0, err
    target = venv_factory("from-pylock")  # type: ignore[operator]
    run([UV, "pip", "sync", "--offline", "--python", str(target), "pylock.toml"])
    assert uv_freeze(target) == expected
    code, _out, err = invoke(
        "export",
        "good",
        "-o",
        "requirements.txt",
        "--find-links",
        str(wheelhouse),
        "--torch-index",
        torch_index,
    )
    assert code == 0, err
    text = (in_tmp / "requirements.txt").read_text()
    assert "torch==2.11.0+cu128" in text and f"--extra-index-url {torch_index}/cu128" in text
    target = venv_factory("from-reqs")  # type: ignore[operator]
    run(
        [
            UV,
            "pip",
            "sync",
            "--offline",
            "--index-url",
            f"{torch_index}/empty",
            "--python",
            str(target),
            "requirements.txt",
        ]
    )
    assert uv_freeze(target) == expected


def test_then_runs_with_the_new_venv_and_bad_then_is_refused_first(
    good: Path, in_tmp: Path, wheelhouse: Path, torch_index: str
) -> None:
    code, _, err = invoke(
        "rebuild",
        "good",
        "--venv",
        str(good),
        "--execute",
        "--then",
        "python 'unclosed",
        *offline_args(wheelhouse, torch_index),
    )
    assert code == 2 and "--then" in err and "cannot split it" in err
    assert not list(in_tmp.glob(".venv.envguard-backup-*"))  # refused before building
    probe = in_tmp / "which.txt"
    code, _out, err = invoke(
        "rebuild",
        "good",
        "--venv",
        str(good),
        "--execute",
        "--no-backup",
        "--then",
        f"python -c \"import sys; open('{probe}', 'w').write(sys.prefix)\"",
        *offline_args(wheelhouse, torch_index),
    )
    assert code == 0, err
    assert probe.read_text() == str(good)
    code, _, err = invoke(
        "rebuild",
        "good",
        "--venv",
        str(good),
        "--execute",
        "--no-backup",
        "--then",
        "python -c 'raise SystemExit(3)'",
        *offline_args(wheelhouse, torch_index),
    )
    assert code == 1 and "--then command exited 3" in err
    assert uv_freeze(good) == snapshot_pairs(in_tmp)  # the rebuilt venv stays in place


def test_snapshot_text_never_reaches_a_requirements_file_or_script(in_tmp: Path) -> None:
    from envguard.snapshots import store
    from factories import package, snapshot

    data = json.loads(store.dumps(snapshot([package("numpy", "1.26.4")])))
    data["name"] = "x\n--index-url https://evil.example/simple"
    (in_tmp / "newline.json").write_text(json.dumps(data))
    code, _, err = invoke("rebuild", "newline.json", "--venv", str(in_tmp / "v"))
    assert code == 2 and "invalid snapshot at name" in err
    data["name"] = "a$(touch pwned)ENVGUARD_EOF;rm"
    (in_tmp / "odd.json").write_text(json.dumps(data))
    code, out, _ = invoke("rebuild", "odd.json", "--venv", str(in_tmp / "v"), "--format", "shell")
    assert code == 0
    assert "$(touch" not in out and "ENVGUARD_EOF;" not in out
    code, out, _ = invoke("rebuild", "odd.json", "--venv", str(in_tmp / "v"), "--format", "json")
    assert all("touch" not in f["content"] for f in json.loads(out)["files"])


def test_execute_refuses_a_target_that_is_not_a_venv(good: Path, in_tmp: Path) -> None:
    victim = in_tmp / "data"
    victim.mkdir()
    (victim / "notes.txt").write_text("precious")
    for target in (str(victim), "."):
        code, _, err = invoke("rebuild", "good", "--venv", target, "--execute", "--no-backup")
        assert code == 2, err
    assert "not a virtualenv" in invoke("rebuild", "good", "--venv", str(victim), "--execute")[2]
    assert (victim / "notes.txt").read_text() == "precious"


def test_a_venv_displaced_by_a_killed_swap_is_kept_not_deleted(in_tmp: Path) -> None:
    import os

    from envguard.recovery.execute import MARKER, remove_stale

    venv = in_tmp / ".venv"
    venv.mkdir()
    dead = 2**22 + 12345  # no such pid
    host = os.uname().nodename
    other_node = in_tmp / f".venv.envguard-build-{dead + 2}@another-node"
    other_node.mkdir()  # a rebuild running on another node sharing this file system
    displaced = in_tmp / f".venv.envguard-build-{dead}@{host}"
    displaced.mkdir()
    (displaced / "pyvenv.cfg").write_text("home = /usr/bin\n")
    half_built = in_tmp / f".venv.envguard-build-{dead + 1}@{host}"
    half_built.mkdir()
    (half_built / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (half_built / MARKER).touch()
    lines = remove_stale(venv)
    assert not half_built.exists() and not displaced.exists() and other_node.exists()
    kept = in_tmp / f".venv.envguard-backup-recovered-{dead}"
    assert (kept / "pyvenv.cfg").is_file()
    assert any("kept" in line for line in lines)


def test_a_second_rebuild_of_one_venv_refuses_at_once(in_tmp: Path) -> None:
    from envguard.errors import ActionError
    from envguard.recovery.execute import venv_lock

    venv = in_tmp / ".venv"
    refused = pytest.raises(ActionError, match="another envguard rebuild of this venv is running")
    with venv_lock(venv), refused, venv_lock(venv):
        pass
    with venv_lock(venv):  # released once the first one is done
        pass


@pytest.mark.parametrize("where", ["cleanup", "after"])
def test_a_signal_after_the_swap_still_says_where_both_venvs_are(
    good: Path,
    in_tmp: Path,
    wheelhouse: Path,
    torch_index: str,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    """Ctrl-C between the swap and the report: the new venv is in place, and the one line
    the user gets says so and where the old one went (it was silent before)."""
    from envguard.recovery import execute

    uv_install(good, wheelhouse, *POLLUTION)
    if where == "cleanup":  # a real signal while the build's plan folder is removed
        real_rmtree = execute.shutil.rmtree

        def rmtree_then_signal(path: object, **kwargs: object) -> None:
            real_rmtree(path, **kwargs)  # type: ignore[arg-type]
            os.kill(os.getpid(), signal.SIGINT)

        monkeypatch.setattr(execute.shutil, "rmtree", rmtree_then_signal)
    else:  # after the rebuild's signal gate, before the report: the CLI's own handler

        def interrupted(*args: object) -> list[str]:
            raise KeyboardInterrupt

        monkeypatch.setattr(execute, "not_restored", interrupted)
    code, _, err = invoke(
        "rebuild", "good", "--venv", str(good), "--execute", *offline_args(wheelhouse, torch_index)
    )
    monkeypatch.undo()
    [backup] = list(in_tmp.glob(".venv.envguard-backup-*"))
    assert uv_freeze(good) == snapshot_pairs(in_tmp)  # the rebuilt venv is in place
    assert ("sglang", "0.4.0") in uv_freeze(backup)
    lines = err.strip().splitlines()
    assert lines[-1] == f"hint: {good} is the rebuilt venv; the old one is at {backup}", err
    if where == "cleanup":
        assert (
            code == 130 and lines[-2] == "error: rebuild interrupted (SIGINT) right after the swap"
        )
    else:
        assert code == 130 and lines[-2] == "error: interrupted (SIGINT)"


def test_the_torch_build_comes_from_a_wheelhouse_that_holds_it(good: Path, in_tmp: Path) -> None:
    """Air-gapped clusters install from a wheelhouse: with --find-links holding the variant
    wheels, the PyTorch index is never contacted (no --index-url in that step)."""
    from envguard import api
    from envguard.recovery.plan import Sources

    wh = in_tmp / "wh"
    make_torch_wheel(wh, "2.11.0+cu128", "12.8")
    assert good.is_dir()  # the fixture wrote snapshots/good.json
    plan = api.plan_rebuild("good", venv=in_tmp / "new", sources=Sources(find_links=(str(wh),)))
    (install,) = [s for s in plan.steps if getattr(s, "kind", "") == "install"]
    assert "--no-index" in install.argv and "--index-url" not in install.argv
    elsewhere = api.plan_rebuild(
        "good", venv=in_tmp / "new", sources=Sources(find_links=(str(in_tmp),))
    )
    (install,) = [s for s in elsewhere.steps if getattr(s, "kind", "") == "install"]
    assert "--index-url" in install.argv  # not in the wheelhouse: its PyTorch index


def test_rebuild_settings_are_one_value_and_the_keywords_still_work(
    good: Path, in_tmp: Path
) -> None:
    """plan_rebuild() and rebuild() take their settings as one RebuildOptions (what the
    command line builds once) or as the keywords they took before; both at once is refused
    before anything is built."""
    from envguard import api
    from envguard.errors import UsageError
    from envguard.recovery.plan import Sources

    wh = in_tmp / "wh"
    make_torch_wheel(wh, "2.11.0+cu128", "12.8")
    sources = Sources(find_links=(str(wh),))
    options = api.RebuildOptions(venv=in_tmp / "new", sources=sources, skip_editables=True)
    by_value = api.plan_rebuild("good", options=options)
    by_keywords = api.plan_rebuild(
        "good", venv=in_tmp / "new", sources=sources, skip_editables=True
    )
    assert by_value.steps == by_keywords.steps and by_value.venv == str(in_tmp / "new")
    with pytest.raises(UsageError, match="not both"):
        api.rebuild("good", options=options, in_place=True)
    assert not (in_tmp / "new").exists()


def test_backups_are_pruned_and_sized(
    good: Path, in_tmp: Path, wheelhouse: Path, torch_index: str
) -> None:
    """A 9.6 GB backup kept with no word: now its size is said, and --keep-backups N keeps
    only the newest N envguard backups of the venv."""
    args = [
        "rebuild",
        "good",
        "--venv",
        str(good),
        "--execute",
        *offline_args(wheelhouse, torch_index),
    ]
    for _ in range(3):
        code, out, err = invoke(*args)
        assert code == 0, err
    backups = list(in_tmp.glob(".venv.envguard-backup-*"))
    assert len(backups) == 1 and "removed an older backup" in out
    assert re.search(r"kept at .*, [0-9.]+ (KiB|MiB)", out)
    code, out, err = invoke(*args, "--keep-backups", "2")
    assert code == 0, err
    assert len(list(in_tmp.glob(".venv.envguard-backup-*"))) == 2
    code, out, err = invoke(*args, "--keep-backups", "0")
    assert code == 0 and not list(in_tmp.glob(".venv.envguard-backup-*"))


def test_no_room_is_refused_before_building(
    good: Path, in_tmp: Path, wheelhouse: Path, torch_index: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = uv_freeze(good)

    class Full:
        f_bavail, f_frsize = 1, 4096

    monkeypatch.setattr(os, "statvfs", lambda _path: Full())
    code, _, err = invoke(
        "rebuild", "good", "--venv", str(good), "--execute", *offline_args(wheelhouse, torch_index)
    )
    assert code == 1 and "free, the new venv needs about" in err and "--keep-backups 0" in err
    assert uv_freeze(good) == before and not list(in_tmp.glob(".venv.envguard-build-*"))


def test_a_venv_that_cannot_be_locked_is_one_line(tmp_path: Path) -> None:
    from envguard.errors import ActionError
    from envguard.recovery.execute import venv_lock

    venv = tmp_path / ".venv"
    (tmp_path / ".venv.envguard.lock").mkdir()  # a folder where the lock file goes
    with pytest.raises(ActionError, match="cannot lock it for the rebuild"), venv_lock(venv):
        pass


def test_an_offline_repair_from_wheels_is_told_what_it_needs(tmp_path: Path) -> None:
    """--offline reads only uv's cache, and a package found edited never comes from it:
    the hint says so, not the PyTorch index's."""
    from envguard.recovery.execute import step_failure
    from envguard.recovery.plan import PlanOptions, RunStep, Sources, plan
    from factories import package, snapshot

    snap = snapshot([package("six", "1.17.0")])
    the_plan = plan(
        snap,
        PlanOptions(
            venv=tmp_path / "v",
            snapshot_ref="good.json",
            uv="uv",
            sources=Sources(offline=True),
            from_wheels=("six",),
        ),
    )
    step = next(s for s in the_plan.steps if isinstance(s, RunStep) and "--no-cache" in s.argv)
    tail = [
        "  \u00d7 No solution found when resolving dependencies:",
        "  ╰─▶ Because six was not found in the cache and you require six==1.17.0, we can"
        " conclude that your requirements are unsatisfiable.",
        "      hint: Packages were unavailable because the network was disabled.",
    ]
    error = step_failure(step, 1, tail)
    assert error.hint is not None
    assert "--find-links" in error.hint and "without --offline" in error.hint
    assert "PyTorch" not in error.hint and "torch" not in error.hint


def test_a_verify_that_finds_an_edit_says_where_it_came_from() -> None:
    """A new venv whose files differ from their RECORD got them from uv's cache (an edit
    through a venv it had linked): each rebuild fails alike until that entry is dropped.
    Names are labels, never shell text."""
    from envguard.compare.models import Change, Severity
    from envguard.recovery.execute import cache_hint

    def change(kind: str, name: str) -> Change:
        return Change(
            section="installed", kind=kind, name=name, severity=Severity.warning, message="m"
        )

    assert cache_hint([change("missing", "six")]) is None
    hint = cache_hint([change("modified_in_place", "six"), change("modified_in_place", "a;b\n")])
    assert hint is not None and "`uv cache clean a_b_ six`" in hint
    there = cache_hint([change("modified_in_place", "six")], there=" on gpu01")
    assert there is not None and "`uv cache clean six` on gpu01" in there
