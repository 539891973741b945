"""Bad input for the installed-files check (issue 33): a site-packages too slow for the
check to finish in time, a file that vanishes between listing and lstat, a venv of 100,000
files; and the check's kept rows outliving a probe that did not check."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from envguard.probe.payload import probe_payload
from envguard.testing import install_many
from factories import cache_file, load_target, make_dist_info, make_venv, read_cache


def _row(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    make_venv(tmp_path / "venv")
    return next((tmp_path / "venv" / "lib").glob("python*/site-packages"))


def _probe(site: Path, xdg: Path, **args: Any) -> tuple[dict[str, Any], float, int]:
    """The probe's report of the venv, the seconds it took and its process group's id (the
    probe runs in a session of its own, as the host starts it)."""
    start = time.monotonic()
    proc = subprocess.Popen(
        [str(site.parents[2] / "bin" / "python"), "-I", "-S", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "XDG_CACHE_HOME": str(xdg)},
        start_new_session=True,
    )
    payload = probe_payload({"default_caches": False, "cache_quiet_seconds": 0, **args})
    try:
        out, _ = proc.communicate(payload.encode(), timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    report: dict[str, Any] = json.loads(out)
    return report, time.monotonic() - start, proc.pid


def _group_gone(pgid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def _slow_to_read(site: Path) -> None:
    """Files that take seconds to check: two sparse files of 3.9 GiB each, written after the
    install, which the quick check hashes (on a hung network file system, an lstat that
    never returns)."""
    size = 31 << 27  # 3.875 GiB: under the per-file cap, both under the run's budget
    rows = []
    for name in ("a", "b"):
        blob = site / "slow" / f"{name}.so"
        blob.parent.mkdir(exist_ok=True)
        with blob.open("wb") as out:
            out.truncate(size)
        rows.append(f"slow/{name}.so,sha256=AAAA,{size}")
    make_dist_info(site, "slow", "1.0", record="\n".join(rows) + "\n")
    later = time.time() + 5  # written after RECORD: hashed by the quick check
    for name in ("a", "b"):
        os.utime(site / "slow" / f"{name}.so", (later, later))


def test_a_check_past_its_deadline_is_a_note_and_leaves_no_process(
    site: Path, tmp_path: Path
) -> None:
    """A site-packages too slow to check gives a note once the check's deadline passes,
    never a hang, and the check's process (or thread) is gone with the probe."""
    _slow_to_read(site)
    report, seconds, pgid = _probe(site, tmp_path / "xdg", verify_seconds=0.5)
    assert "error" not in report, report
    assert seconds < 20
    (slow,) = [p for p in report["packages"] if p["name"] == "slow"]
    assert slow["on_disk"] is None
    assert any(
        w.startswith("installed files were not checked against RECORD: the check took over 0.5s")
        for w in report["warnings"]
    ), report["warnings"]
    assert _group_gone(pgid)


def test_a_check_in_a_thread_past_its_deadline_is_a_note_and_writes_no_cache(
    site: Path, tmp_path: Path
) -> None:
    """On a busy machine the check runs in a thread (no second process for a core that is
    not free): its deadline holds the same, and the cache it is still filling is not
    written."""
    from envguard.probe.payload import local_package

    target = local_package()
    _slow_to_read(site)
    folder = tmp_path / "cache"
    cache = target.distcache.DistCache(str(folder), [str(site)], code="t", quiet=0)
    warnings: list[str] = []
    packages = target.dists.scan_packages([str(site)], warnings, cache)
    checking = target.checking.Checking(packages, "quick", cache, timeout=0.5, fork=False)
    start = time.monotonic()
    found = checking.result(warnings)
    assert time.monotonic() - start < 5
    assert found == {"clashes": None, "unowned": None}
    assert all(p["on_disk"] is None for p in packages)
    assert any("the check took over 0.5s" in w for w in warnings), warnings
    cache.save()
    assert not folder.exists() or not list(folder.iterdir())


def test_a_file_that_vanishes_between_listing_and_lstat_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file removed after RECORD was read and before its lstat (an uninstall running
    beside the snapshot) is named missing; one that appears in a package's folder and is
    gone before its own lstat is not named at all. Neither fails the check."""
    target = load_target()
    site = tmp_path / "site"
    files = {f"pkg/{n}.py": f"{n} = 1\n".encode() for n in "abc"}
    for path, data in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_bytes(data)
    info = make_dist_info(
        site, "pkg", "1.0", record="".join(_row(p, d) + "\n" for p, d in files.items())
    )
    past = time.time() - 3600
    for path in files:
        os.utime(site / path, (past, past))
    os.utime(info / "METADATA", (past + 1, past + 1))
    (site / "pkg" / "stray.py").write_text("x = 1\n")  # the folder is newer than RECORD
    os.utime(info / "RECORD", (past + 2, past + 2))
    real = os.lstat
    gone = {str(site / "pkg" / "b.py"), str(site / "pkg" / "stray.py")}

    def racing(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if str(path) in gone:
            gone.discard(str(path))
            os.unlink(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", racing)
    dists = [{"name": "pkg", "version": "1.0", "location": str(site), "metadata_dir": info.name}]
    warnings: list[str] = []
    target.check_installed(dists, "quick", warnings)
    on_disk = dists[0]["on_disk"]
    assert on_disk["missing"] == ["pkg/b.py"]
    assert on_disk["modified"] == [] and on_disk["added"] == []
    assert not gone  # both removals happened inside the check


def test_rows_kept_by_a_check_outlive_a_probe_that_did_not_check(
    site: Path, tmp_path: Path
) -> None:
    """``--verify off`` between two quick snapshots leaves the kept RECORD rows and verdicts
    as they were: the next quick check reads no RECORD again (they were dropped, and every
    second snapshot of a venv paid for reading them all)."""
    install_many(site, files=40, per_dist=20)
    xdg = tmp_path / "xdg"
    _probe(site, xdg)
    shard = cache_file(xdg)
    kept = read_cache(shard)["rows"]
    # each distribution's RECORD rows, and its bin/ script rows under a key of their own
    assert sum("/gen0000" in key and "|scripts" not in key for key in kept) == 2
    report, _, _ = _probe(site, xdg, verify="off")
    assert all(p["on_disk"] is None for p in report["packages"])
    assert read_cache(shard)["rows"] == kept


@pytest.mark.slow
def test_a_venv_of_100000_files_is_checked_whole_and_in_time(site: Path, tmp_path: Path) -> None:
    """100,000 installed files in 100 distributions: every file is looked at, first with an
    empty cache, then warm, each run well inside the probe's time."""
    install_many(site, files=100_000, per_dist=1000)
    xdg = tmp_path / "xdg"
    for _ in ("cold", "warm"):
        report, seconds, _ = _probe(site, xdg)
        assert "error" not in report, report
        generated = [p for p in report["packages"] if p["name"].startswith("gen")]
        assert len(generated) == 100
        assert sum(p["on_disk"]["checked"] for p in generated) == 100_000
        assert not any(p["on_disk"]["modified"] or p["on_disk"]["missing"] for p in generated)
        assert seconds < 60


def test_a_file_added_to_a_folder_listed_clean_before_is_named(site: Path, tmp_path: Path) -> None:
    """A folder listed with nothing added is not listed again while its stamp holds (Python
    writes __pycache__ into every folder it imports from, so a venv in use has every folder
    newer than its RECORD); a file added afterwards changes the folder and is named."""
    install_many(site, files=40, per_dist=20)
    folder = site / "gen00000" / "m000"
    (folder / "__pycache__").mkdir()  # as an import leaves it: newer than RECORD
    xdg = tmp_path / "xdg"
    for _ in range(2):  # the verdict kept, then used
        report, _, _ = _probe(site, xdg)
        (gen,) = [p for p in report["packages"] if p["name"] == "gen00000"]
        assert gen["on_disk"]["added"] == []
    (folder / "evil.py").write_text("import os\n")
    report, _, _ = _probe(site, xdg)
    (gen,) = [p for p in report["packages"] if p["name"] == "gen00000"]
    assert gen["on_disk"]["added"] == ["gen00000/m000/evil.py"]
