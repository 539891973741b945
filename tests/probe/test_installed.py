"""What is on disk, not what the metadata says: installed files against RECORD, paths two
distributions claim, files no distribution owns; diff reports them, rebuild repairs them."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard import api
from envguard.cli import app
from factories import make_venv, make_wheel, uv_install

runner = CliRunner()

NCCL_12 = b"\x7fELF" + b"\x00" * 64 + b"NCCL version 2.28.9+cuda12.9" + b"\x00" * 16
NCCL_13 = b"\x7fELF" + b"\x00" * 96 + b"NCCL version 2.30.7+cuda13.0" + b"\x00" * 16


def _site(venv: Path) -> Path:
    return next((venv / "lib").glob("python*/site-packages"))


@pytest.fixture(scope="module")
def truth_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wh = tmp_path_factory.mktemp("truth-wheels")
    shared = {"nvidia/__init__.py": ""}  # claimed by both with the same bytes: no clash
    make_wheel(
        wh, "nvidia-nccl-cu12", "2.28.9", files={**shared, "nvidia/nccl/lib/libnccl.so.2": NCCL_12}
    )
    make_wheel(
        wh, "nvidia-nccl-cu13", "2.30.7", files={**shared, "nvidia/nccl/lib/libnccl.so.2": NCCL_13}
    )
    make_wheel(
        wh,
        "modeling",
        "4.57.1",
        files={
            "modeling/__init__.py": "from .llama import forward\n",
            "modeling/llama.py": "def forward(x):\n    return x * 2\n",
            "modeling/_kernels.so": b"\x7fELF" + b"\x01" * 200,
            "modeling/README.txt": "data, not code\n",
        },
    )
    return wh


def _install(venv: Path, wheels: Path, *names: str) -> None:
    for name in names:  # one at a time: the order decides who owns a shared path
        uv_install(venv, wheels, name)


def _own_copy(path: Path) -> Path:
    """``path`` as a file of its own: uv hardlinks installed files to its cache, so an edit
    in place would change the cache (and every venv linked to it) too."""
    data = path.read_bytes()
    stamp = path.stat()
    path.unlink()
    path.write_bytes(data)
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    return path


def _snap(python: Path, **kwargs: object) -> api.Snapshot:
    return api.snapshot(python=python, name="s", **kwargs)  # type: ignore[arg-type]


def _changes(drift: api.Drift, section: str = "installed") -> list[tuple[str, str, str]]:
    return [(c.kind, c.name, c.severity.value) for c in drift.changes if c.section == section]


@pytest.fixture
def model_venv(tmp_path: Path, truth_wheels: Path) -> Path:
    venv = tmp_path / "venv"
    make_venv(venv)
    _install(venv, truth_wheels, "modeling")
    return venv


def test_an_edit_in_place_of_the_same_size_is_found_by_its_time_and_hash(
    model_venv: Path, in_tmp: Path
) -> None:
    good = _snap(model_venv)
    assert good.package_map()["modeling"].on_disk.modified == ()  # type: ignore[union-attr]
    llama = _own_copy(_site(model_venv) / "modeling" / "llama.py")
    text = llama.read_text()
    llama.write_text(text.replace("x * 2", "x * 3"))  # same size: only the bytes differ
    drift = api.diff(good, _snap(model_venv))
    assert ("modified_in_place", "modeling", "warning") in _changes(drift)
    (change,) = [c for c in drift.changes if c.kind == "modified_in_place"]
    assert change.message == "modeling 4.57.1: 1 file modified in place (modeling/llama.py)"


def test_an_edited_shared_library_missing_and_added_files_are_each_named(
    model_venv: Path, in_tmp: Path
) -> None:
    good = _snap(model_venv)
    site = _site(model_venv)
    with _own_copy(site / "modeling" / "_kernels.so").open("ab") as fh:
        fh.write(b"patched")
    (site / "modeling" / "__init__.py").unlink()
    (site / "modeling" / "debug_patch.py").write_text("import pdb\n")
    live = _snap(model_venv)
    on_disk = live.package_map()["modeling"].on_disk
    assert on_disk is not None
    assert on_disk.modified == ("modeling/_kernels.so",)
    assert on_disk.missing == ("modeling/__init__.py",)
    assert on_disk.added == ("modeling/debug_patch.py",)
    kinds = {k for k, _, _ in _changes(api.diff(good, live))}
    assert kinds == {"modified_in_place", "files_missing", "files_added"}


def test_a_file_that_does_not_run_is_left_to_deep(model_venv: Path, in_tmp: Path) -> None:
    readme = _own_copy(_site(model_venv) / "modeling" / "README.txt")
    stamp = readme.stat()
    readme.write_text("DATA, NOT CODE\n")  # same size
    os.utime(readme, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # and its old time back
    quick = _snap(model_venv).package_map()["modeling"].on_disk
    deep = _snap(model_venv, deep=True).package_map()["modeling"].on_disk
    assert quick is not None and quick.modified == ()
    assert deep is not None and deep.modified == ("modeling/README.txt",)
    assert deep.checked > quick.checked


def test_an_edit_with_its_old_time_put_back_is_found_by_its_ctime(
    model_venv: Path, in_tmp: Path
) -> None:
    """The mtime can be put back (touch -r, os.utime), the ctime cannot: a file with one
    link whose ctime is later than RECORD's is hashed by the quick check too."""
    llama = _own_copy(_site(model_venv) / "modeling" / "llama.py")
    stamp = llama.stat()
    llama.write_text(llama.read_text().replace("x * 2", "x * 3"))
    os.utime(llama, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    quick = _snap(model_venv).package_map()["modeling"].on_disk
    assert quick is not None and quick.modified == ("modeling/llama.py",)
    result = runner.invoke(app, ["snapshot", "--python", str(model_venv), "--deep", "--out", "-"])
    assert result.exit_code == 0, result.stderr
    assert '"modified":["modeling/llama.py"]' in result.stdout.replace(" ", "").replace("\n", "")


def test_a_stray_pth_at_the_top_of_site_packages_is_reported(
    model_venv: Path, in_tmp: Path
) -> None:
    good = _snap(model_venv)
    (_site(model_venv) / "zz_debug.pth").write_text("import sys\n")
    drift = api.diff(good, _snap(model_venv))
    (change,) = [c for c in drift.changes if c.kind == "unowned_added"]
    assert change.name == "zz_debug.pth"
    assert change.message == (
        "site-packages/zz_debug.pth added: no installed distribution owns it"
        " (it runs at every start-up)"
    )


def test_programs_bitcode_and_c_sources_a_package_runs_are_checked(
    tmp_path: Path, in_tmp: Path
) -> None:
    """What triton runs besides Python: its ptxas (a program in a bin/ folder of its own),
    libdevice.10.bc (linked into every kernel) and driver.c (compiled at run time): each
    edited is named by the quick check. A header is left to --deep."""
    files = {
        "kern/__init__.py": "",
        "kern/backends/nvidia/bin/ptxas": b"\x7fELF" + b"\x00" * 64,
        "kern/backends/nvidia/lib/libdevice.10.bc": b"BC\xc0\xde" + b"\x00" * 64,
        "kern/backends/nvidia/driver.c": "int main(void) { return 0; }\n",
        "kern/include/prefix.h": "#define X 1\n",
    }
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "kern", "3.8.0", files=files)
    venv = tmp_path / "venv"
    make_venv(venv)
    _install(venv, wheels, "kern")
    good = _snap(venv)
    result = runner.invoke(app, ["snapshot", "--python", str(venv), "--name", "good"])
    assert result.exit_code == 0, result.stderr
    site = _site(venv)
    for rel in [p for p in files if p != "kern/__init__.py"]:
        with _own_copy(site / rel).open("ab") as fh:
            fh.write(b"#")
    on_disk = _snap(venv).package_map()["kern"].on_disk
    assert on_disk is not None
    assert on_disk.modified == (
        "kern/backends/nvidia/bin/ptxas",
        "kern/backends/nvidia/driver.c",
        "kern/backends/nvidia/lib/libdevice.10.bc",
    )
    deep = _snap(venv, deep=True).package_map()["kern"].on_disk
    assert deep is not None and "kern/include/prefix.h" in deep.modified
    assert ("modified_in_place", "kern", "warning") in _changes(api.diff(good, _snap(venv)))
    # the CI gate takes --deep too: the header is named there
    gate = ["check", "good", "--python", str(venv), "--format", "json"]
    quick, deep_run = runner.invoke(app, gate), runner.invoke(app, [*gate, "--deep"])
    assert quick.exit_code == deep_run.exit_code == 1, quick.stderr + deep_run.stderr
    assert "kern 3.8.0: 3 files modified in place" in quick.stdout, quick.stdout
    assert "kern 3.8.0: 4 files modified in place" in deep_run.stdout, deep_run.stdout


def test_code_in_a_folder_no_record_names_is_reported(
    tmp_path: Path, truth_wheels: Path, in_tmp: Path
) -> None:
    """Code import reaches that no RECORD names a file in: a package folder at the top
    (numpy/ where numpy.py would be caught), an __init__.py written into a namespace
    folder (cuda/, which runs at every import below it), and a package folder beside a
    module inside a distribution (modeling/llama/ shadows modeling/llama.py)."""
    venv = tmp_path / "venv"
    make_venv(venv)
    _install(venv, truth_wheels, "modeling")
    # a namespace folder no RECORD names a file in, as cuda-bindings' cuda/ is
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "cuda-bindings", "13.0.3", files={"cuda/bindings/driver.py": "x = 1\n"})
    _install(venv, wheels, "cuda-bindings")
    site = _site(venv)
    (site / "cuda" / "data").mkdir()  # no code: never reported
    (site / "cuda" / "data" / "table.bin").write_bytes(b"\0")
    (site / "cache_dir").mkdir()
    (site / "cache_dir" / "entry.json").write_text("{}")
    # an egg-info install (no RECORD) owns what its top_level.txt names
    (site / "legacy_pkg").mkdir()
    (site / "legacy_pkg" / "__init__.py").write_text("")
    egg = site / "legacy-1.0-py3.11.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: legacy\nVersion: 1.0\n")
    (egg / "top_level.txt").write_text("legacy_pkg\n")
    good = _snap(venv)
    assert good.unowned == ()
    (site / "numpy").mkdir()
    (site / "numpy" / "__init__.py").write_text("raise ImportError\n")
    (site / "cuda" / "__init__.py").write_text("import os\n")
    (site / "modeling" / "llama").mkdir()
    (site / "modeling" / "llama" / "__init__.py").write_text("forward = None\n")
    (site / "modeling" / "linked").symlink_to(site / "modeling" / "llama")  # import follows it
    live = _snap(venv)
    assert live.unowned == ("numpy/",)
    added = {n: p.on_disk.added for n, p in live.package_map().items() if p.on_disk}
    assert added["modeling"] == ("modeling/linked/", "modeling/llama/")
    assert added["cuda-bindings"] == ("cuda/__init__.py",)
    kinds = {(k, n) for k, n, _ in _changes(api.diff(good, live))}
    assert kinds == {
        ("unowned_added", "numpy/"),
        ("files_added", "modeling"),
        ("files_added", "cuda-bindings"),
    }
    assert _changes(api.diff(live, _snap(venv))) == []  # and each is said once, then known


@pytest.mark.slow
@pytest.mark.parametrize("good_order", [("cu13", "cu12"), ("cu12", "cu13")])
def test_install_order_decides_who_owns_a_shared_library_and_rebuild_restores_it(
    tmp_path: Path, truth_wheels: Path, in_tmp: Path, good_order: tuple[str, str]
) -> None:
    names = {o: f"nvidia-nccl-{o}" for o in ("cu12", "cu13")}
    good_venv, bad_venv = tmp_path / "good", tmp_path / "bad"
    make_venv(good_venv)
    _install(good_venv, truth_wheels, *(names[o] for o in good_order))
    make_venv(bad_venv)
    _install(bad_venv, truth_wheels, *(names[o] for o in reversed(good_order)))
    good = _snap(good_venv)
    winner, loser = names[good_order[1]], names[good_order[0]]
    (clash,) = good.clashes or ()
    assert clash.path == "nvidia/nccl/lib/libnccl.so.2"
    assert clash.owner == winner
    assert {c.name for c in clash.claimants} == set(names.values())
    assert any(
        "nvidia/nccl/lib/libnccl.so.2 is claimed by" in w and f"{winner}'s" in w
        for w in good.warnings
    )
    assert good.package_map()[loser].on_disk.clobbered == (clash.path,)  # type: ignore[union-attr]
    # Same packages, same versions, other order: the metadata agrees, the bytes do not.
    drift = api.diff(good, _snap(bad_venv))
    assert _changes(drift, "packages") == []
    assert ("owner_changed", clash.path, "critical") in _changes(drift)
    (change,) = [c for c in drift.changes if c.kind == "owner_changed"]
    assert f"the file on disk is {loser}'s, was {winner}'s" in change.message
    assert drift.verdict[0] == (
        f"installed over each other: {clash.path} is {loser}'s copy (was {winner})"
    )
    # rebuild puts the good environment's owner back; diff is clean afterwards.
    path = api.save(good, tmp_path / "good.json")
    outcome = api.rebuild(
        path, venv=bad_venv, sources=api.sources(find_links=[str(truth_wheels)], offline=True)
    )
    assert outcome.live is not None
    after = api.diff(good, _snap(bad_venv))
    assert [c for c in after.changes if c.section != "interpreter"] == []  # its prefix moved
    site = _site(bad_venv)
    expected = NCCL_13 if winner.endswith("cu13") else NCCL_12
    assert (site / "nvidia/nccl/lib/libnccl.so.2").read_bytes() == expected


@pytest.mark.slow
def test_rebuild_repairs_a_file_edited_in_place(
    model_venv: Path, tmp_path: Path, truth_wheels: Path, in_tmp: Path
) -> None:
    good = _snap(model_venv)
    path = api.save(good, tmp_path / "good.json")
    llama = _own_copy(_site(model_venv) / "modeling" / "llama.py")
    llama.write_text(llama.read_text().replace("x * 2", "x * 3"))
    assert api.diff(good, _snap(model_venv)).changes != ()
    result = runner.invoke(
        app,
        [
            "restore",
            str(path),
            "--venv",
            str(model_venv),
            "--find-links",
            str(truth_wheels),
            "--offline",
            "--execute",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "x * 2" in llama.read_text()
    assert api.diff(good, _snap(model_venv)).changes == ()


@pytest.mark.slow
def test_an_in_place_rebuild_reinstalls_the_edited_package_only(
    model_venv: Path, tmp_path: Path, truth_wheels: Path, in_tmp: Path
) -> None:
    uv_install(model_venv, truth_wheels, "nvidia-nccl-cu13")
    good = _snap(model_venv)
    path = api.save(good, tmp_path / "good.json")
    llama = _own_copy(_site(model_venv) / "modeling" / "llama.py")
    llama.write_text(llama.read_text().replace("x * 2", "x * 3"))
    plan = api.plan_rebuild(path, venv=model_venv, in_place=True)
    # Edited: taken from its wheel (--no-cache), never relinked from uv's unpacked cache,
    # which holds the edit when the file was a link to it; nothing else is reinstalled.
    (sync,) = [s for s in plan.steps if s.kind == "sync"]
    assert "--reinstall-package" not in sync.argv  # type: ignore[union-attr]
    (fresh,) = [s for s in plan.steps if s.kind == "install" and "--no-cache" in s.argv]  # type: ignore[union-attr]
    argv = fresh.argv  # type: ignore[union-attr]
    assert argv[argv.index("--reinstall-package") + 1] == "modeling"
    assert argv.count("--reinstall-package") == 1
    assert plan.steps.index(fresh) < plan.steps.index(sync)
    api.rebuild(
        path,
        venv=model_venv,
        in_place=True,
        sources=api.sources(find_links=[str(truth_wheels)], offline=True),
    )
    assert "x * 2" in llama.read_text()
    assert api.diff(good, _snap(model_venv)).changes == ()


# ---- hostile site-packages ---------------------------------------------------------------


def _record(site: Path, dist: str, rows: list[str]) -> None:
    record = next(site.glob(f"{dist}-*.dist-info")) / "RECORD"
    record.write_text(record.read_text() + "".join(row + "\n" for row in rows))


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda site, out: os.mkfifo(site / "modeling" / "llama.py"), id="fifo"),
        pytest.param(
            lambda site, out: os.symlink("/dev/zero", site / "modeling" / "llama.py"),
            id="dev-zero",
        ),
        pytest.param(
            lambda site, out: os.symlink(out / "elsewhere.py", site / "modeling" / "llama.py"),
            id="symlink-out",
        ),
    ],
)
def test_a_file_swapped_for_a_fifo_or_a_link_is_modified_never_read(
    model_venv: Path, in_tmp: Path, make: Callable[[Path, Path], None]
) -> None:
    site = _site(model_venv)
    (in_tmp / "elsewhere.py").write_text("def forward(x):\n    return x * 2\n")
    (site / "modeling" / "llama.py").unlink()
    make(site, in_tmp)
    start = time.monotonic()
    on_disk = _snap(model_venv, deep=True).package_map()["modeling"].on_disk
    assert time.monotonic() - start < 30
    assert on_disk is not None and on_disk.modified == ("modeling/llama.py",)


def test_record_rows_leading_out_of_site_packages_are_skipped_and_said(
    model_venv: Path, in_tmp: Path
) -> None:
    site = _site(model_venv)
    outside = in_tmp / "secret.py"
    outside.write_text("TOKEN = 1\n")
    _record(
        site,
        "modeling",
        [f"{outside},sha256=AAAA,3", "modeling/../../../../../etc/passwd.py,sha256=AAAA,3"],
    )
    snap = _snap(model_venv, deep=True)
    on_disk = snap.package_map()["modeling"].on_disk
    assert on_disk is not None and on_disk.modified == () and on_disk.missing == ()
    assert any("modeling 4.57.1: 2 RECORD rows name paths outside" in w for w in snap.warnings)


def test_a_package_folder_that_is_a_symlink_is_not_followed(model_venv: Path, in_tmp: Path) -> None:
    site = _site(model_venv)
    real = in_tmp / "real-modeling"
    (site / "modeling").rename(real)
    (site / "modeling").symlink_to(real)
    snap = _snap(model_venv, deep=True)
    on_disk = snap.package_map()["modeling"].on_disk
    # Its code runs from wherever the link leads: the folder is what changed.
    assert on_disk is not None and on_disk.modified == ("modeling",)
    assert any("modeling is a symlink or not a folder" in w for w in snap.warnings)


@pytest.mark.parametrize("linked", [None, "e", "a/b"])
def test_the_folder_pass_finds_what_looking_one_at_a_time_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, linked: str | None
) -> None:
    """The folders RECORD rows name, stat'ed a depth at a time at C speed, hold what the
    one-at-a-time pass holds (each folder's mtime and stamp; a symlinked folder and every
    folder below it unread), and nothing below a symlinked folder is stat'ed."""
    from types import SimpleNamespace

    from envguard.probe.payload import local_package

    installed, folders_pass = local_package().installed, local_package().sitefolders
    site = tmp_path / "site"
    for folder in ("a/b/c", "a/d", "e/f/g"):
        (site / folder).mkdir(parents=True)
    if linked is not None:
        real = tmp_path / "elsewhere"
        (site / linked).rename(real)
        (site / linked).symlink_to(real)
    dirs = {0: {"a/b/c", "a/d", ""}, 1: {"e/f/g", "a/b/c"}}

    def passed(fast: bool) -> tuple[object, ...]:
        checked = installed._Site(str(site))
        checked.dirs = {index: set(folders) for index, folders in dirs.items()}
        warnings: list[str] = []
        with monkeypatch.context() as patch:
            if not fast:
                patch.setattr(folders_pass, "real_folders", lambda *args: False)
            folders_pass.check_folders(checked, warnings)
        return checked.folders, checked.folder_stamps, checked.linked, warnings

    stated: list[str] = []

    def stat(path: str, **kwargs: object) -> os.stat_result:
        stated.append(path)
        return os.stat(path, **kwargs)  # type: ignore[arg-type]

    spy = SimpleNamespace(
        **{
            **vars(os),
            "stat": stat,
            "lstat": lambda path: stat(path, follow_symlinks=False),
            "supports_dir_fd": {stat} if os.stat in os.supports_dir_fd else set(),
        }
    )
    with monkeypatch.context() as patch:
        patch.setattr(folders_pass, "os", spy)
        fast = passed(True)
    assert fast == passed(False)
    folders = fast[0]
    assert isinstance(folders, dict)
    if linked is None:
        assert set(folders) == {"a", "a/b", "a/b/c", "a/d", "e", "e/f", "e/f/g"}
        assert None not in folders.values() and fast[2] is False
    else:
        assert folders[linked] is None and fast[2] is True
        below = [p for p in stated if p.rstrip("/").split("site/")[-1].startswith(linked + "/")]
        assert below == []


def test_a_forged_on_disk_record_in_a_snapshot_is_refused(tmp_path: Path, in_tmp: Path) -> None:
    path = tmp_path / "forged.json"
    text = (
        '{"schema_version": 1, "schema_minor": 2, "name": "f", "created":'
        ' "2026-01-01T00:00:00Z", "host": "h", "user": "u", "envguard_version": "1",'
        ' "interpreter": {"version": "3.11.7", "implementation": "CPython", "executable":'
        ' "/x/bin/python", "prefix": "/x", "base_prefix": "/usr", "is_venv": true, "os":'
        ' "linux", "machine": "x86_64"}, "packages": [{"name": "a", "display_name": "a",'
        ' "version": "1", "location": "/x", "on_disk": {"modified": ["a\\u001b[31m.py"]}}]}'
    )
    path.write_text(text)
    result = runner.invoke(app, ["show", str(path)])
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_a_file_hashed_once_is_not_hashed_again_until_it_changes(
    model_venv: Path, tmp_path: Path
) -> None:
    """A venv copied without its times (every file newer than RECORD) is hashed once; the
    kept verdict is tied to the file's stamp, so an edit afterwards is found all the same."""
    from envguard.probe.payload import local_package

    target = local_package()
    site = _site(model_venv)
    later = time.time() + 5
    for path in (site / "modeling").iterdir():
        _own_copy(path)
        os.utime(path, (later, later))

    def check() -> tuple[dict[str, object], object]:
        cache = target.distcache.DistCache(str(tmp_path / "cache"), [str(site)], code="t", quiet=0)
        warnings: list[str] = []
        packages = target.dists.scan_packages([str(site)], warnings, cache)
        target.installed.check_installed(packages, "quick", warnings, cache)
        cache.save()
        (found,) = [p["on_disk"] for p in packages if p["name"] == "modeling"]
        return found, cache

    first, cache = check()
    assert first["modified"] == [] and cache.used_verified  # type: ignore[attr-defined]
    second, cache = check()
    assert second["modified"] == [] and cache.verified == cache.used_verified  # type: ignore[attr-defined]
    llama = site / "modeling" / "llama.py"
    llama.write_text(llama.read_text().replace("x * 2", "x * 3"))
    os.utime(llama, (later, later))  # the same times as before: the ctime still moved
    third, _ = check()
    assert third["modified"] == ["modeling/llama.py"]


@pytest.mark.parametrize("deep", [False, True], ids=["quick", "deep"])
def test_a_sparse_file_of_terabyte_size_is_not_read_through(
    model_venv: Path, in_tmp: Path, deep: bool
) -> None:
    """A hostile site-packages' file whose RECORD size matches a sparse 1 TiB file written
    after the install: checked by its size, never read to the end (it would take hours)."""
    site = _site(model_venv)
    huge = site / "modeling" / "weights.so"
    with huge.open("wb") as out:
        out.truncate(1 << 40)
    _record(site, "modeling", [f"modeling/weights.so,sha256=AAAA,{1 << 40}"])
    later = time.time() + 5  # written after RECORD: the quick check would hash it
    os.utime(huge, (later, later))
    start = time.monotonic()
    snap = _snap(model_venv, deep=deep)
    assert time.monotonic() - start < 30
    on_disk = snap.package_map()["modeling"].on_disk
    assert on_disk is not None and "modeling/weights.so" not in on_disk.modified
    assert any("1 installed files were not hashed" in w for w in snap.warnings)


@pytest.mark.parametrize(
    ("field", "most"), [("modified", 50), ("clobbered", 50), ("unowned", 200), ("clashes", 1000)]
)
def test_a_snapshot_listing_more_than_the_probe_keeps_is_refused(
    tmp_path: Path, in_tmp: Path, field: str, most: int
) -> None:
    """The probe keeps at most 50 paths per list (the rest counted), 200 unowned files and
    1,000 clashes: a snapshot with more was forged (a million entries cost a diff minutes)."""
    import json

    def document(count: int) -> dict[str, object]:
        paths = [f"a/{i}.py" for i in range(count)]
        package: dict[str, object] = {
            "name": "a", "display_name": "a", "version": "1", "location": "/x"
        }  # fmt: skip
        doc: dict[str, object] = {
            "schema_version": 1, "schema_minor": 2, "name": "f",
            "created": "2026-01-01T00:00:00Z", "host": "h", "user": "u",
            "envguard_version": "1",
            "interpreter": {
                "version": "3.11.7", "implementation": "CPython",
                "executable": "/x/bin/python", "prefix": "/x", "base_prefix": "/usr",
                "is_venv": True, "os": "linux", "machine": "x86_64",
            },
            "packages": [package],
        }  # fmt: skip
        if field in ("modified", "clobbered"):
            package["on_disk"] = {field: paths}
        elif field == "unowned":
            doc["unowned"] = paths
        else:
            claimants = [{"name": "a", "version": "1"}, {"name": "b", "version": "2"}]
            doc["clashes"] = [{"path": p, "claimants": claimants} for p in paths]
        return doc

    for count, code in ((most, 0), (most + 1, 2)):
        path = tmp_path / f"s{count}.json"
        path.write_text(json.dumps(document(count)))
        result = runner.invoke(app, ["show", str(path)])
        assert result.exit_code == code, result.output
        assert "Traceback" not in result.output
    assert field in result.output


def test_a_verdict_on_a_linked_file_outlives_a_new_link_to_it(
    model_venv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file with several links (uv's cache and the venvs built from it) whose mtime is
    later than its METADATA (uv unpacks a local wheel's files in parallel; some wheels put
    their .dist-info first) is hashed once: each venv built or removed from the same cache
    moves its ctime, and the quick rule leaves a linked file's ctime out, so must the kept
    verdict (every such run hashed the wheel's files again)."""
    from envguard.probe.payload import local_package

    target = local_package()
    site = _site(model_venv)
    later = time.time() + 5
    elsewhere = tmp_path / "links"
    elsewhere.mkdir()
    for path in (site / "modeling").iterdir():
        _own_copy(path)
        os.utime(path, (later, later))
        os.link(path, elsewhere / path.name)  # uv's cache

    hashed: list[str] = []
    digest = target.installed._digest

    def counting(path: str, algorithm: str) -> str | None:
        hashed.append(path)
        return digest(path, algorithm)  # type: ignore[no-any-return]

    monkeypatch.setattr(target.installed, "_digest", counting)

    def check() -> dict[str, object]:
        cache = target.distcache.DistCache(str(tmp_path / "cache"), [str(site)], code="t", quiet=0)
        warnings: list[str] = []
        packages = target.dists.scan_packages([str(site)], warnings, cache)
        target.installed.check_installed(packages, "quick", warnings, cache)
        cache.save()
        (found,) = [p["on_disk"] for p in packages if p["name"] == "modeling"]
        return found  # type: ignore[no-any-return]

    assert check()["modified"] == [] and hashed
    hashed.clear()
    for path in elsewhere.iterdir():  # another venv links the same files: their ctime moves
        os.link(path, tmp_path / ("again-" + path.name))
    assert check()["modified"] == [] and hashed == []


def test_a_venv_copied_with_its_times_is_not_hashed_whole(
    model_venv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container image's layers (tar), cp -a, rsync -a, chown -R: every file's ctime moves,
    RECORD's too, the mtimes stay. The ctime rule compares with the copy (RECORD's ctime),
    not with the install: nothing is hashed. An edit afterwards still moves the mtime."""
    from envguard.probe.payload import local_package

    target = local_package()
    site = _site(model_venv)
    hour_ago = time.time() - 3600  # built an hour ago, copied here now
    for path in [*(site / "modeling").iterdir(), *site.glob("modeling-*.dist-info/*")]:
        _own_copy(path)
        os.utime(path, (hour_ago, hour_ago))

    hashed: list[str] = []
    digest = target.installed._digest

    def counting(path: str, algorithm: str) -> str | None:
        hashed.append(path)
        return digest(path, algorithm)  # type: ignore[no-any-return]

    monkeypatch.setattr(target.installed, "_digest", counting)

    def check() -> dict[str, object]:
        warnings: list[str] = []
        packages = target.dists.scan_packages([str(site)], warnings, None)
        target.installed.check_installed(packages, "quick", warnings, None)
        (found,) = [p["on_disk"] for p in packages if p["name"] == "modeling"]
        return found  # type: ignore[no-any-return]

    assert check()["modified"] == [] and hashed == []
    llama = site / "modeling" / "llama.py"
    llama.write_text(llama.read_text().replace("x * 2", "x * 3"))
    assert check()["modified"] == ["modeling/llama.py"]
