"""A hostile or odd site-packages against the installed-files check (RECORD against the
disk): every row is bounded, nothing is followed out of site-packages, nothing is read that
would block, and one bad distribution costs only itself (a warning), never the snapshot."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from envguard import api
from envguard.cli import app
from envguard.probe.payload import probe_payload
from envguard.snapshots import store
from envguard.snapshots.models import Claimant, Clash, OnDisk, Package
from factories import (
    cache_file,
    load_target,
    make_dist_info,
    make_venv,
    make_wheel,
    package,
    read_cache,
    snapshot,
    uv_install,
    write_cache,
)

runner = CliRunner()


def _digest(data: bytes) -> str:
    raw = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + raw.decode()


def _row(path: str, data: bytes) -> str:
    return f"{path},{_digest(data)},{len(data)}"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    make_venv(tmp_path / "venv")
    return next((tmp_path / "venv" / "lib").glob("python*/site-packages"))


def _venv(site: Path) -> Path:
    return site.parents[2]


def _dist(
    site: Path, name: str, files: dict[str, bytes], *, extra: str = "", version: str = "1.0"
) -> Path:
    """A distribution written by hand: its files and a RECORD listing them (plus ``extra``)."""
    for path, data in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_bytes(data)
    record = "".join(_row(p, d) + "\n" for p, d in files.items()) + extra
    info = make_dist_info(site, name, version, record=record)
    past = time.time() - 3600  # installed an hour ago: later writes are edits
    for path in files:
        os.utime(site / path, (past, past))
    return info


def _snap(site: Path, *, deep: bool = False) -> api.Snapshot:
    """A snapshot taken and written by the CLI (exit 0, no traceback), read back."""
    out = site.parents[3] / "snap.json"
    argv = ["snapshot", "--python", str(_venv(site)), "--out", str(out), "--force"]
    argv += ["--deep"] * deep
    result = runner.invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    return store.load(out)


# Paths that are not one line of text (the report refuses them) or that os.lstat() refuses.
NOT_ONE_LINE = {
    "nul": "evil/nul\x00.py",
    "ansi": "evil/\x1b[31mred.py",
    "newline": "evil/two\nlines.py",
    "bidi": "evil/bidi\u202e.py",
}


@pytest.mark.parametrize("deep", [False, True], ids=["quick", "deep"])
@pytest.mark.parametrize(
    "bad",
    [pytest.param(path, id=name) for name, path in NOT_ONE_LINE.items()]
    + [pytest.param("evil/" + "x" * 200_000 + ".py", id="huge-quoted")],
)
def test_a_record_row_that_is_not_one_line_costs_only_that_row(
    site: Path, in_tmp: Path, bad: str, deep: bool
) -> None:
    # Quoted where CSV needs it (a newline) or where csv's field limit is the attack.
    quoted = '"' + bad + '"' if "\n" in bad or len(bad) > 1000 else bad
    _dist(site, "evil", {"evil/ok.py": b"x = 1\n"}, extra=f"{quoted},{_digest(b'')},0\n")
    snap = _snap(site, deep=deep)
    on_disk = snap.package_map()["evil"].on_disk
    assert on_disk is not None and on_disk.checked >= 1
    assert on_disk.modified == () and on_disk.missing == ()
    assert "evil 1.0: 1 RECORD rows are not one line of text; not checked" in snap.warnings


@pytest.mark.parametrize("deep", [False, True], ids=["quick", "deep"])
def test_a_record_row_that_is_not_utf8_costs_only_that_row(
    site: Path, in_tmp: Path, deep: bool
) -> None:
    info = _dist(site, "evil", {"evil/ok.py": b"x = 1\n"})
    with (info / "RECORD").open("ab") as fh:
        fh.write(b"evil/caf\xe9.py," + _digest(b"").encode() + b",0\n")
    snap = _snap(site, deep=deep)
    on_disk = snap.package_map()["evil"].on_disk
    assert on_disk is not None and on_disk.missing == ()
    assert "evil 1.0: 1 RECORD rows are not one line of text; not checked" in snap.warnings


def test_two_records_sharing_every_path_cost_linear_time(tmp_path: Path) -> None:
    """Two .dist-info folders of one package (a broken upgrade leaves them) claim every
    path twice: each claim once cost a scan of both RECORDs (30,000 shared rows: minutes)."""
    target = load_target()
    site = tmp_path / "site"
    rows = "".join(f"pkg/m{i}.py,sha256=AAAA,{i}\n" for i in range(30_000))
    dists = []
    for version in ("1.0", "2.0"):
        make_dist_info(site, "pkg", version, record=rows)
        dists.append(
            {
                "name": "pkg",
                "version": version,
                "location": str(site),
                "metadata_dir": f"pkg-{version}.dist-info",
            }
        )
    start = time.monotonic()
    found = target.check_installed(dists, "quick", [])
    assert time.monotonic() - start < 20
    assert found["clashes"] == []  # the same bytes claimed twice: no clash
    assert dists[1]["on_disk"]["missing"][:1] == ["pkg/m0.py"]


def _probe(site: Path, xdg: Path) -> dict[str, Any]:
    """The probe's report of the venv, its distribution cache in ``xdg`` (kept at once)."""
    proc = subprocess.run(
        [str(_venv(site) / "bin" / "python"), "-I", "-S", "-"],
        input=probe_payload({"default_caches": False, "cache_quiet_seconds": 0}),
        capture_output=True,
        text=True,
        env={**os.environ, "XDG_CACHE_HOME": str(xdg)},
        timeout=120,
        check=False,
    )
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


@pytest.mark.parametrize(
    "paths",
    [pytest.param(NOT_ONE_LINE[name], id=name) for name in ("nul", "ansi", "bidi")]
    + [
        pytest.param("../outside.py", id="dot-dot"),
        pytest.param("./../outside.py", id="dot-slash-dot-dot"),
        pytest.param("evil/ok.py\n../outside.py", id="dot-dot-second"),
    ],
)
def test_a_hand_edited_cache_row_is_read_again_not_followed(
    site: Path, tmp_path: Path, paths: str
) -> None:
    xdg = tmp_path / "xdg"
    _dist(site, "evil", {"evil/ok.py": b"x = 1\n"})
    (site.parent / "outside.py").write_text("TOKEN = 1\n")
    honest = _probe(site, xdg)
    shard = cache_file(xdg)
    data = read_cache(shard)
    (key,) = [k for k in data["rows"] if "/evil-1.0.dist-info/RECORD\0" in k]
    count = paths.count("\n") + 1
    data["rows"][key] = [paths, ",".join(["0"] * count), "\n".join(["sha256=AAAA"] * count)]
    write_cache(shard, data)
    report = _probe(site, xdg)
    assert "error" not in report, report
    (evil,) = [p for p in report["packages"] if p["name"] == "evil"]
    (was,) = [p for p in honest["packages"] if p["name"] == "evil"]
    assert evil["on_disk"] == was["on_disk"]


def _sparse(record: Path) -> None:
    record.write_text(_row("evil/ok.py", b"x = 1\n") + "\n")
    os.truncate(record, 100 << 20)  # 100 MB of NULs: over RECORD's cap


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(os.mkfifo, id="fifo"),
        pytest.param(lambda record: os.symlink("/dev/zero", record), id="dev-zero"),
        pytest.param(lambda record: os.symlink("/proc/self/mem", record), id="proc-mem"),
        pytest.param(_sparse, id="100-mb"),
    ],
)
def test_a_record_that_is_not_a_small_regular_file_is_never_read_whole(
    site: Path, in_tmp: Path, make: Callable[[Path], None]
) -> None:
    info = _dist(site, "evil", {"evil/ok.py": b"x = 1\n"})
    (info / "RECORD").unlink()
    make(info / "RECORD")
    start = time.monotonic()
    snap = _snap(site, deep=True)
    assert time.monotonic() - start < 30
    assert snap.package_map()["evil"].on_disk is None


@pytest.mark.parametrize("target", ["/", "/proc", "/dev"])
@pytest.mark.parametrize("depth", ["package", "intermediate"])
def test_a_folder_linked_out_of_site_packages_is_never_entered(
    site: Path, in_tmp: Path, target: str, depth: str
) -> None:
    """RECORD lists files below a folder that is a symlink to / (etc/passwd, proc/self/mem,
    dev/zero as "modules"): nothing below it is stat'ed or read; the folder is what changed."""
    top = "evil" if depth == "package" else "evil/sub"
    rows = "".join(
        f"{top}/{p},{_digest(b'')},0\n"
        for p in ("etc/passwd.py", "self/mem.so", "zero.so", "kmsg.so", "self/fd/0.py")
    )
    _dist(site, "evil", {"evil/__init__.py": b""}, extra=rows)
    if depth == "package":
        (site / "evil" / "__init__.py").unlink()
        (site / "evil").rmdir()
    (site / top).symlink_to(target)
    start = time.monotonic()
    snap = _snap(site, deep=True)
    assert time.monotonic() - start < 30
    on_disk = snap.package_map()["evil"].on_disk
    assert on_disk is not None and on_disk.modified == (top,)
    assert on_disk.missing == () and on_disk.added == ()


def test_site_packages_reached_through_a_symlink_is_checked(tmp_path: Path, in_tmp: Path) -> None:
    """A venv whose lib folder is a symlink (lib64 -> lib, a venv moved and linked back):
    the check runs as in any venv, and an edit is found."""
    make_venv(tmp_path / "real")
    (tmp_path / "venv").symlink_to(tmp_path / "real")
    site = next((tmp_path / "venv" / "lib").glob("python*/site-packages"))
    _dist(site, "pkg", {"pkg/__init__.py": b"x = 1\n"})
    assert _snap(site).package_map()["pkg"].on_disk.modified == ()  # type: ignore[union-attr]
    (site / "pkg" / "__init__.py").write_bytes(b"x = 2\n")
    assert _snap(site).package_map()["pkg"].on_disk.modified == ("pkg/__init__.py",)  # type: ignore[union-attr]


def test_duplicate_rows_and_a_namespace_file_many_dists_share_are_no_clash(
    site: Path, in_tmp: Path
) -> None:
    shared = {"nspkg/__init__.py": b"__path__ = __import__('pkgutil').extend_path(__path__)\n"}
    for i in range(20):
        own = {f"nspkg/p{i}/__init__.py": b"x = %d\n" % i}
        dup = _row(f"nspkg/p{i}/__init__.py", own[f"nspkg/p{i}/__init__.py"]) + "\n"
        _dist(site, f"ns-{i}", {**shared, **own}, extra=dup * 3)
    # Two distributions with one RECORD (a package published under two names).
    twin = {"twin/__init__.py": b"y = 1\n"}
    _dist(site, "twin-a", twin)
    _dist(site, "twin-b", twin)
    snap = _snap(site)
    assert snap.clashes == ()
    for pkg in snap.packages:
        if pkg.on_disk is not None:
            assert (pkg.on_disk.modified, pkg.on_disk.missing, pkg.on_disk.clobbered) == (
                (),
                (),
                (),
            ), pkg.name


NCCL = ("nvidia-nccl-cu12", "2.28.9"), ("nvidia-nccl-cu13", "2.30.7")


def _plan_reinstalls(tmp_path: Path, packages: list[Package], clash: Clash) -> Any:
    """The rebuild plan of a snapshot holding ``clash``: (exit code, its reinstall argvs)."""
    path = tmp_path / "forged.json"
    path.write_text(store.dumps(snapshot(packages, clashes=(clash,))))
    result = runner.invoke(
        app, ["rebuild", str(path), "--venv", str(tmp_path / "v"), "--format", "json"]
    )
    if result.exit_code != 0:
        return result.exit_code, result.output
    steps = json.loads(result.stdout)["steps"]
    return 0, [s["argv"] for s in steps if "--reinstall-package" in s.get("argv", ())]


@pytest.mark.parametrize(
    "owner", ["--index-url=http://evil.invalid", "-e", "torch", "nvidia-nccl-cu99"]
)
def test_a_clash_owner_that_is_no_claimant_reinstalls_nothing(
    tmp_path: Path, in_tmp: Path, owner: str
) -> None:
    """A snapshot edited by hand names an owner that claims no such path (or an option):
    nothing is reinstalled for it, and nothing of it reaches uv's argv."""
    packages = [package(n, v) for n, v in NCCL] + [package("torch", "2.5.0")]
    clash = Clash(
        path="nvidia/nccl/lib/libnccl.so.2",
        claimants=tuple(Claimant(name=n, version=v) for n, v in NCCL),
        owner=owner,
    )
    assert _plan_reinstalls(tmp_path, packages, clash) == (0, [])


def test_a_clash_owner_named_like_an_option_is_refused(tmp_path: Path, in_tmp: Path) -> None:
    bad = "-rf"
    packages = [package(bad, "1.0"), package("nvidia-nccl-cu12", "2.28.9")]
    clash = Clash(
        path="nvidia/nccl/lib/libnccl.so.2",
        claimants=(
            Claimant(name=bad, version="1.0"),
            Claimant(name="nvidia-nccl-cu12", version="2.28.9"),
        ),
        owner=bad,
    )
    code, out = _plan_reinstalls(tmp_path, packages, clash)
    assert code == 2 and "Traceback" not in out, out


def test_the_snapshots_own_owner_is_reinstalled_last(tmp_path: Path, in_tmp: Path) -> None:
    packages = [package(n, v) for n, v in NCCL]
    clash = Clash(
        path="nvidia/nccl/lib/libnccl.so.2",
        claimants=tuple(Claimant(name=n, version=v) for n, v in NCCL),
        owner="NVIDIA_nccl.cu12",  # spelt otherwise: the same distribution
    )
    code, argvs = _plan_reinstalls(tmp_path, packages, clash)
    assert code == 0 and [a[a.index("--reinstall-package") + 1] for a in argvs] == [
        "nvidia-nccl-cu12"
    ]


NCCL_12 = b"\x7fELF" + b"\x00" * 64 + b"NCCL version 2.28.9+cuda12.9" + b"\x00" * 16
NCCL_13 = b"\x7fELF" + b"\x00" * 96 + b"NCCL version 2.30.7+cuda13.0" + b"\x00" * 16


@pytest.fixture
def clashing(tmp_path: Path) -> tuple[Path, Path]:
    """(a venv where nvidia-nccl-cu13's libnccl.so.2 overwrote cu12's, its wheelhouse)."""
    wh = tmp_path / "wh"
    make_wheel(wh, "nvidia-nccl-cu12", "2.28.9", files={"nvidia/nccl/lib/libnccl.so.2": NCCL_12})
    make_wheel(wh, "nvidia-nccl-cu13", "2.30.7", files={"nvidia/nccl/lib/libnccl.so.2": NCCL_13})
    venv = tmp_path / "venv"
    make_venv(venv)
    uv_install(venv, wh, "nvidia-nccl-cu12")
    uv_install(venv, wh, "nvidia-nccl-cu13")
    return venv, wh


def _older(snap: api.Snapshot, path: Path) -> Path:
    """``snap`` as an envguard before the installed-files check wrote it (schema_minor 1)."""
    data = json.loads(store.dumps(snap))
    data["schema_minor"] = 1
    for key in ("clashes", "unowned"):
        data.pop(key, None)
    for pkg in data["packages"]:
        pkg.pop("on_disk", None)
    path.write_text(json.dumps(data))
    return path


def test_an_older_snapshot_of_an_unchanged_clashing_venv_is_no_drift(
    clashing: tuple[Path, Path], in_tmp: Path
) -> None:
    """The good snapshot did not record who owned libnccl.so.2: the live owner is said
    (info), not critical drift, and the diff passes."""
    venv, _ = clashing
    old = _older(api.snapshot(python=venv, name="old"), in_tmp / "old.json")
    result = runner.invoke(app, ["diff", str(old), "--python", str(venv), "--format", "json"])
    assert result.exit_code == 0, result.output
    installed = [c for c in json.loads(result.stdout)["changes"] if c["section"] == "installed"]
    assert [(c["kind"], c["severity"]) for c in installed] == [("clobbered", "info")]
    assert "did not record its files" in installed[0]["message"]


def test_an_edit_of_a_gpu_package_against_an_older_snapshot_is_a_warning(
    clashing: tuple[Path, Path], in_tmp: Path
) -> None:
    venv, _ = clashing
    old = _older(api.snapshot(python=venv, name="old"), in_tmp / "old.json")
    lib = next(venv.glob("lib/python*/site-packages/nvidia/nccl/lib/libnccl.so.2"))
    data = lib.read_bytes()
    lib.unlink()  # a copy of its own: uv hardlinks to its cache
    lib.write_bytes(data + b"patched")
    drift = api.diff(store.load(old), api.snapshot(python=venv, name="live"))
    found = {(c.kind, c.severity.value) for c in drift.changes if c.section == "installed"}
    assert ("modified_in_place", "warning") in found
    assert all(severity != "critical" for _, severity in found)


@pytest.mark.slow
def test_a_rebuild_of_an_older_snapshot_of_a_clashing_venv_verifies(
    clashing: tuple[Path, Path], in_tmp: Path
) -> None:
    venv, wh = clashing
    old = _older(api.snapshot(python=venv, name="old"), in_tmp / "old.json")
    argv = ["rebuild", str(old), "--venv", str(in_tmp / "rebuilt"), "--execute", "--offline"]
    result = runner.invoke(app, [*argv, "--no-index", "--find-links", str(wh)])
    assert result.exit_code == 0, result.output
    assert "verified against the snapshot" in result.output


def test_a_forged_snapshot_with_a_huge_on_disk_list_diffs_in_linear_time(in_tmp: Path) -> None:
    """Each path was looked up in the other side's tuple: 50,000 modified paths on both
    sides of a diff took hours. A snapshot file cannot hold more than 50 (the model refuses
    it); models built in Python without validation still diff in linear time."""
    paths = tuple(f"a/m{i}.py" for i in range(50_000))
    big = package("a", "1").model_copy(update={"on_disk": OnDisk.model_construct(modified=paths)})
    snap = snapshot([big]).model_copy(update={"unowned": paths})
    start = time.monotonic()
    drift = api.diff(snap, snap)
    assert time.monotonic() - start < 20
    assert [c for c in drift.changes if c.section == "installed"] == []
