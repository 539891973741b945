"""I2 and I3 for edits of installed files: an edit in place is named whether uv linked the
file to its cache or copied it, a venv built later from a cache that holds the edit is
named too, and a repair leaves every file of the repaired packages equal to its RECORD
(hashed here, not by envguard's quick rule), the edited ones taken from their wheels."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from field.corpus import MACHINE_WHEELS, envguard, load_json, record_mismatches, uv, uv_env

PINS = ("six==1.17.0", "markupsafe==3.0.2")
EDITED = {"six", "markupsafe"}


def _venv(where: Path, env: dict[str, str]) -> Path:
    uv("venv", "--quiet", "--python", sys.executable, str(where), env=env)
    uv("pip", "install", "--quiet", "--python", str(where / "bin" / "python"), *PINS, env=env)
    return where


def _site(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def _patch(py: Path, old: bytes, new: bytes, so: Path, at: float) -> None:
    """Same-size edits through the open file (the inode stays: an editor that saves in
    place, open(p, "r+")): ``old`` -> ``new`` in ``py``, and the byte of ``so`` at the
    fraction ``at`` of its size flipped."""
    assert len(old) == len(new)
    with open(py, "r+b") as f:
        text = f.read()
        f.seek(0)
        f.write(text.replace(old, new))
    with open(so, "r+b") as f:
        f.seek(int(os.path.getsize(so) * at))
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))


def _edit_in_place(venv: Path) -> tuple[Path, Path]:
    """six.py's code and one byte of markupsafe's extension, edited in place."""
    site = _site(venv)
    py = site / "six.py"
    so = next((site / "markupsafe").glob("_speedups*.so"))
    _patch(py, b'__version__ = "1.17.0"', b'__version__ = "1.17.9"', so, 0.5)
    return py, so


def _named(report: dict[str, object]) -> set[str]:
    changes = report["changes"]
    assert isinstance(changes, list)
    return {str(c["name"]) + " " + str(c["message"]) for c in changes}


def _drift(venv: Path, env: dict[str, str]) -> tuple[int, str, dict[str, object]]:
    done = envguard("diff", "good", "--python", str(venv), "--format", "json", env=env)
    return done.returncode, done.stderr, load_json(done.stdout)


REPAIRS = {
    "restore": ("restore", "good", "--execute", "--venv"),
    "rebuild": ("rebuild", "good", "--execute", "--venv"),
    "rebuild-in-place": ("rebuild", "good", "--execute", "--in-place", "--venv"),
}


@pytest.mark.parametrize("repair", sorted(REPAIRS))
@pytest.mark.parametrize("link_mode", ["hardlink", "copy"])
def test_an_edit_in_place_is_named_and_the_repair_takes_it_from_the_wheel(
    link_mode: str, repair: str, field_env: Path, private_cache: Path
) -> None:
    env = uv_env(private_cache, UV_LINK_MODE=link_mode)
    venv = _venv(field_env / "a", env)
    taken = envguard("snapshot", "--name", "good", "--python", str(venv), env=env)
    assert taken.returncode == 0, taken.stderr
    py, so = _edit_in_place(venv)
    linked = py.stat().st_nlink > 1
    assert linked == (link_mode == "hardlink")  # uv's own default here links

    code, err, report = _drift(venv, env)
    text = " ".join(_named(report))
    assert code == 1, err
    assert "six.py" in text and so.name in text, text

    restored = envguard(*REPAIRS[repair], str(venv), env=env)
    out = restored.stdout + restored.stderr
    assert restored.returncode == 0, out
    assert ("uv's cache" in out) == linked, out  # told when the cache held the edit
    assert record_mismatches(_site(venv), EDITED) == {}
    code, err, report = _drift(venv, env)
    assert code == 0, (err, report)


def test_a_venv_built_later_from_a_cache_holding_an_edit_is_named(
    field_env: Path, private_cache: Path
) -> None:
    """The edit reached uv's cache through venv a's links; venv b, built afterwards, links
    the edited bytes with an mtime older than its own fresh RECORD."""
    env = uv_env(private_cache)
    first = _venv(field_env / "a", env)
    taken = envguard("snapshot", "--name", "good", "--python", str(first), env=env)
    assert taken.returncode == 0, taken.stderr
    py, so = _edit_in_place(first)
    later = _venv(field_env / "b", env)
    later_py = _site(later) / "six.py"
    assert later_py.read_bytes() == py.read_bytes()  # uv's cache carried the edit
    record = next(_site(later).glob("six-*.dist-info/RECORD"))
    assert later_py.stat().st_mtime_ns < record.stat().st_mtime_ns

    code, err, report = _drift(later, env)
    text = " ".join(_named(report))
    assert code == 1, err
    assert "six.py" in text and so.name in text, text
    # And a check of the venv on its own, against a snapshot of itself, still says so.
    own = envguard("snapshot", "--name", "later", "--python", str(later), env=env)
    assert own.returncode == 0, own.stderr
    snap = load_json((field_env / "snapshots" / "later.json").read_text())
    packages = {p["name"]: p for p in snap["packages"]}  # type: ignore[union-attr]
    assert packages["six"]["on_disk"]["modified"] == ["six.py"]


def test_a_removed_file_a_stray_pth_and_a_clobbered_library_are_named(
    field_env: Path, private_cache: Path
) -> None:
    """The rest of I2 on real wheels: a file of markupsafe removed, a .pth nobody installed
    (it runs at every start-up), and NVIDIA's cu12 NCCL written over cu13's libnccl.so.2."""
    env = uv_env(private_cache)
    venv = _venv(field_env / "a", env)
    python = str(venv / "bin" / "python")
    uv("pip", "install", "--quiet", "--python", python, "nvidia-nccl-cu13", env=env)
    taken = envguard("snapshot", "--name", "good", "--python", python, env=env)
    assert taken.returncode == 0, taken.stderr
    site = _site(venv)
    (site / "markupsafe" / "_native.py").unlink(missing_ok=True)
    gone = "markupsafe/__init__.py"
    (site / gone).unlink()
    (site / "zz-patch.pth").write_text("import os\n")
    uv("pip", "install", "--quiet", "--python", python, "nvidia-nccl-cu12", env=env)

    code, err, report = _drift(venv, env)
    text = " ".join(_named(report))
    assert code == 1, err
    assert gone in text, text
    assert "zz-patch.pth" in text, text
    assert "libnccl.so.2" in text and "nvidia-nccl-cu12" in text, text


def test_undo_after_a_guarded_install_leaves_every_file_as_its_wheel(
    field_env: Path, private_cache: Path
) -> None:
    env = uv_env(private_cache)
    venv = _venv(field_env / ".venv", env)
    python = str(venv / "bin" / "python")
    taken = envguard("snapshot", "--name", "good", "--python", python, env=env)
    assert taken.returncode == 0, taken.stderr
    install = ("uv", "pip", "install", "six==1.16.0", "markupsafe==2.1.5")
    guarded = envguard("guard", "--venv", str(venv), "--fail-on", "never", "--", *install, env=env)
    assert guarded.returncode == 0, guarded.stdout + guarded.stderr
    undone = envguard("undo", "--venv", str(venv), env=env)
    assert undone.returncode == 0, undone.stdout + undone.stderr
    assert record_mismatches(_site(venv), EDITED) == {}
    code, err, report = _drift(venv, env)
    assert code == 0, (err, report)


def test_an_edit_of_torch_through_uv_links_is_repaired_from_the_wheel(
    field_env: Path, private_cache: Path
) -> None:
    """The same on torch's own files (the machine's CPU wheel, unpacked into a cache of
    this test's): torch/version.py and a byte of libtorch_cpu.so edited through the links."""
    env = uv_env(private_cache)
    venv = field_env / ".venv"
    python = str(venv / "bin" / "python")
    links = ("--find-links", str(MACHINE_WHEELS))
    uv("venv", "--quiet", "--python", sys.executable, str(venv), env=env)
    uv("pip", "install", "--quiet", "--python", python, *links, "torch==2.13.0+cpu", env=env)
    taken = envguard("snapshot", "--name", "good", "--python", python, env=env)
    assert taken.returncode == 0, taken.stderr
    site = _site(venv)
    py, so = site / "torch" / "version.py", site / "torch" / "lib" / "libtorch_cpu.so"
    assert py.stat().st_nlink > 1 and so.stat().st_nlink > 1
    _patch(py, b"debug = False", b"debug = True ", so, 1 / 3)

    code, err, report = _drift(venv, env)
    text = " ".join(_named(report))
    assert code == 1, err
    assert "torch/version.py" in text and "libtorch_cpu.so" in text, text

    restored = envguard("restore", "good", "--execute", "--venv", str(venv), *links, env=env)
    out = restored.stdout + restored.stderr
    assert restored.returncode == 0, out
    assert "uv's cache" in out, out
    assert record_mismatches(_site(venv), {"torch"}) == {}
