"""The installed-files check shared between a forked child and the probe (issue 33: use both
cores): the units (one distribution each, with its folders' bytecode) go to whichever
process asks first, and the answer put together is the one-process check's, drift for
drift; a share that overruns gives the same note as ever and leaves no process."""

from __future__ import annotations

import os
import py_compile
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from envguard.probe.payload import local_package
from envguard.testing import install_many
from factories import make_dist_info, make_venv, read_cache

TAG = sys.implementation.cache_tag


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A venv of 15 distributions (300 modules, byte-compiled) with one of each drift: a
    file appended to, one removed, a planted pyc, a file added to a package's folder, a
    stray .pth at the top."""
    make_venv(tmp_path / "venv")
    site = next((tmp_path / "venv" / "lib").glob("python*/site-packages"))
    install_many(site, files=300, per_dist=20)
    subprocess.run(
        [str(tmp_path / "venv" / "bin" / "python"), "-m", "compileall", "-q", str(site)],
        check=True,
        timeout=120,
    )
    with open(site / "gen00002" / "m000" / "mod41.py", "a") as fh:
        fh.write("EVIL = 1\n")
    (site / "gen00005" / "m000" / "mod100.py").unlink()
    source = site / "gen00009" / "m000" / "mod181.py"
    fake = tmp_path / "fake.py"
    fake.write_text("VALUE = 'planted'\n")
    pyc = source.parent / "__pycache__" / f"mod181.{TAG}.pyc"
    py_compile.compile(str(fake), cfile=str(pyc), dfile=str(source), doraise=True)
    data = bytearray(pyc.read_bytes())
    st = source.stat()
    data[8:16] = (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + st.st_size.to_bytes(
        4, "little"
    )
    pyc.write_bytes(bytes(data))
    (site / "gen00011" / "m000" / "stray.py").write_text("import os\n")
    (site / "zz_evil.pth").write_text("import os\n")
    return site


def _check(site: Path, tmp_path: Path, fork: bool, **kwargs: Any) -> tuple[Any, ...]:
    target = local_package()
    cache = target.distcache.DistCache(str(tmp_path / f"c{fork}"), [str(site)], code="t", quiet=0)
    warnings: list[str] = []
    packages = target.dists.scan_packages([str(site)], warnings, cache)
    checking = target.checking.Checking(packages, "quick", cache, fork=fork, **kwargs)
    assert (checking.child is not None) is fork
    found = checking.result(warnings)
    on_disk = {p["name"]: p["on_disk"] for p in packages}
    return on_disk, found, warnings, checking


def test_the_shared_check_finds_what_one_process_finds(site: Path, tmp_path: Path) -> None:
    """Both shares run in children that work inside the site (paths relative to it); the
    probe's own working folder is left as it was."""
    here = os.getcwd()
    shared = _check(site, tmp_path, fork=True)
    assert os.getcwd() == here
    assert shared[3].second is not None and shared[3].second.started
    alone = _check(site, tmp_path, fork=False)
    assert shared[:3] == alone[:3]
    on_disk, found, _, _ = shared
    assert on_disk["gen00002"]["modified"] == ["gen00002/m000/mod41.py"]
    assert on_disk["gen00005"]["missing"] == ["gen00005/m000/mod100.py"]
    assert on_disk["gen00009"]["added"] == [f"gen00009/m000/__pycache__/mod181.{TAG}.pyc"]
    assert on_disk["gen00011"]["added"] == ["gen00011/m000/stray.py"]
    assert found["unowned"] == ["zz_evil.pth"]
    assert sum(d["checked"] for n, d in on_disk.items() if n.startswith("gen")) == 300


def test_a_shared_check_past_its_deadline_is_a_note_and_leaves_no_child(
    tmp_path: Path,
) -> None:
    """Two distributions of sparse 3.9 GiB files the quick check hashes: the deadline holds
    for both shares, and the child is gone once the answer is given up."""
    make_venv(tmp_path / "venv")
    site = next((tmp_path / "venv" / "lib").glob("python*/site-packages"))
    for name in ("slow1", "slow2"):
        blob = site / name / "a.so"
        blob.parent.mkdir()
        with blob.open("wb") as out:
            out.truncate(31 << 27)
        make_dist_info(site, name, "1.0", record=f"{name}/a.so,sha256=AAAA,{31 << 27}\n")
        later = time.time() + 5
        os.utime(blob, (later, later))
    _given_up_in_time(site, tmp_path, 0.5, within=10)


def test_a_hung_listing_beside_the_shares_is_the_check_s_note_and_leaves_no_child(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The files added to folders and the top of site-packages are read while the shares
    work, by the check's deadline: a listing that hangs there (a network file system gone
    away) gives the check's note in time, and neither share is left running."""
    target = local_package()

    def hung(site: str, owner: dict[str, int], folders: object = None) -> list[str]:
        time.sleep(30)
        return []

    monkeypatch.setattr(target.installed, "unowned_files", hung)
    _given_up_in_time(site, tmp_path, 1.0, within=5)


def _given_up_in_time(site: Path, tmp_path: Path, seconds: float, within: float) -> None:
    """The shared check of ``site`` with a deadline of ``seconds``: given up with the
    check's note in less than ``within`` seconds, nothing checked, both children reaped."""
    start = time.monotonic()
    on_disk, found, warnings, checking = _check(site, tmp_path, fork=True, timeout=seconds)
    assert time.monotonic() - start < within
    assert found == {"clashes": None, "unowned": None}
    assert all(v is None for v in on_disk.values())
    assert any(f"the check took over {seconds:g}s" in w for w in warnings), warnings
    for child in (checking.child, checking.second):
        with pytest.raises(ChildProcessError):
            os.waitpid(child.pid, os.WNOHANG)  # reaped: nothing left running


def test_an_answer_given_in_time_is_taken_when_asked_for_late() -> None:
    """A share that answered before its deadline is not thrown away because the probe
    asked for its answer after the deadline (it was busy with its own reads)."""
    forked = local_package().forked
    child = forked.Forked(lambda: {"answer": 42}, 30.0)
    assert child.started
    time.sleep(0.5)  # answered and gone by now
    assert child.result(0.0) == {"answer": 42}
    assert child.failed is None


def test_the_shared_check_keeps_what_both_shares_learned(site: Path, tmp_path: Path) -> None:
    """The folders found clean by either share are kept: a second check reads no
    ``__pycache__`` folder's verdict afresh."""
    _check(site, tmp_path, fork=True)[3].cache.save()
    (shard,) = (tmp_path / "cTrue").glob("*.bin")
    kept = read_cache(shard)["pycdirs"]
    # every package folder but the one holding the planted pyc
    assert len(kept) == 15 - 1
    # The next check holds them (the shares name them by place, not by key): all kept.
    again = _check(site, tmp_path, fork=True)[3].cache
    assert again.used_pycdirs == again.pycdirs == kept
    assert len(again.used_rows) == 2 * 15 and again.used_rows == again.rows  # rows, scripts


def test_units_a_dead_share_took_are_checked_again(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child killed mid-share (the OOM killer's pick: it is a copy of the probe) takes
    the units it read from the queue with it; the probe checks them itself, and the answer
    is still the one-process check's."""
    target = local_package()
    probe, real = os.getpid(), target.checking.work

    def dying(plan: Any, units: Any, inside: bool = False) -> Any:
        if os.getpid() != probe:
            for _ in units:  # one unit taken from the queue, then the child is gone
                os._exit(9)
        return real(plan, units, inside)

    monkeypatch.setattr(target.checking, "work", dying)
    shared = _check(site, tmp_path, fork=True)
    monkeypatch.undo()
    alone = _check(site, tmp_path, fork=False)
    assert shared[:3] == alone[:3]
    assert shared[0]["gen00002"]["modified"] == ["gen00002/m000/mod41.py"]


def test_a_relative_site_is_checked_as_an_absolute_one(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A site given by a relative path: the shares do not work inside it (the paths built
    from it would then lead elsewhere), and find what one process finds."""
    monkeypatch.chdir(tmp_path)
    relative = site.relative_to(tmp_path)
    shared = _check(relative, tmp_path, fork=True)
    alone = _check(relative, tmp_path, fork=False)
    assert shared[:3] == alone[:3]
    assert shared[0]["gen00009"]["added"] == [f"gen00009/m000/__pycache__/mod181.{TAG}.pyc"]


def test_a_share_left_running_never_reads_a_number_the_probe_reuses(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No second fork (EAGAIN under a container's process limit) and the probe's own share,
    in a thread, past the deadline (a hung file system): the queue stays open, as the share
    left running reads it once its call returns; closed, its number would be the probe's
    next open() and the share would take that file's bytes."""
    import threading

    target = local_package()
    probe, real_fork, real_work = os.getpid(), os.fork, target.checking.work
    forks: list[int] = []
    hung = threading.Event()

    def fork() -> int:
        forks.append(1)
        if len(forks) > 1:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        return real_fork()

    def work(plan: Any, units: Any, inside: bool = False) -> Any:
        if os.getpid() != probe:
            os._exit(9)  # the first child: gone
        taken = iter(units)
        next(taken, None)
        hung.wait(30)  # a stuck lstat; then the queue is read again
        return real_work(plan, taken, inside)

    monkeypatch.setattr(target.checking.os, "fork", fork)
    monkeypatch.setattr(target.checking, "work", work)
    try:
        _, found, _, checking = _check(site, tmp_path, fork=True, timeout=0.5)
        assert checking.second is not None and not checking.second.started
        assert found == {"clashes": None, "unowned": None}
        read_fd, write_fd = os.pipe()
        try:
            os.write(write_fd, b"ABCDEFGH")
            hung.set()
            time.sleep(0.5)
            os.set_blocking(read_fd, False)
            assert os.read(read_fd, 100) == b"ABCDEFGH"
        finally:
            os.close(read_fd)
            os.close(write_fd)
    finally:
        hung.set()


def test_the_quick_hash_budget_holds_for_both_shares_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quick check hashes at most QUICK_HASH_BUDGET bytes in all: two shares in two
    children split it, rather than each taking the whole."""
    import hashlib

    make_venv(tmp_path / "venv")
    site = next((tmp_path / "venv" / "lib").glob("python*/site-packages"))
    other = hashlib.sha256(b"y" * 600).hexdigest()
    for n in range(4):  # each written after its RECORD, its bytes not the ones recorded
        blob = site / f"big{n}" / "x.so"
        blob.parent.mkdir()
        rows = [f"big{n}/x.so,sha256={other},600"]
        for i in range(400):  # so that neither share takes every unit before the other starts
            (blob.parent / f"m{i}.py").write_text("pass\n")
            rows.append(f"big{n}/m{i}.py,sha256=AAAA,5")
        make_dist_info(site, f"big{n}", "1.0", record="\n".join(rows) + "\n")
        blob.write_bytes(b"x" * 600)
        later = time.time() + 5
        os.utime(blob, (later, later))
    installed = local_package().installed
    monkeypatch.setattr(installed, "QUICK_HASH_BUDGET", 1000)
    for fork in (True, False):
        on_disk, _, warnings, checking = _check(site, tmp_path, fork=fork)
        hashed = sum(len(d["modified"]) for d in on_disk.values() if d)
        assert hashed <= 1, (fork, on_disk)  # one 600-byte file fits in 1000 bytes
        assert any("installed files were not hashed" in w for w in warnings), warnings
        if fork:  # however the units fell between the shares: each may hash 500 bytes
            plan = checking.plan
            assert plan is not None and plan.shares == 2
            share = installed.work(plan, range(len(plan.units)))
            assert sum(len(r["modified"]) for _, r in share["on_disk"]) == 0


def test_a_check_cancelled_leaves_no_child_and_the_cache_as_it_was(
    site: Path, tmp_path: Path
) -> None:
    """A booted probe prepares the quick check before its argument comes (main.begin); an
    argument that asks for another check cancels it: children it started are killed and
    collected, and what its preparation read of the distribution cache is forgotten, so a
    run that then checks nothing keeps every verdict held (a cancelled read must not pass
    for this run's use: the verdicts it did not ask for would be dropped)."""
    _check(site, tmp_path, fork=True)[3].cache.save()  # the verdicts, kept
    (shard,) = (tmp_path / "cTrue").glob("*.bin")
    held = read_cache(shard)
    target = local_package()
    cache = target.distcache.DistCache(str(tmp_path / "cTrue"), [str(site)], code="t", quiet=0)
    warnings: list[str] = []
    packages = target.dists.scan_packages([str(site)], warnings, cache)
    before = (cache.mark(), cache.files_checked)
    checking = target.checking.Checking(packages, "quick", cache, fork=True)
    assert checking.child is not None and checking.second is not None
    assert cache.mark() != before[0]  # its preparation read the rows
    children = [checking.child.pid, checking.second.pid]
    checking.cancel()
    for pid in children:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # killed and collected
    assert (cache.mark(), cache.files_checked) == before
    prepared = target.checking.Checking(packages, "quick", cache, fork=True, started=False)
    assert prepared.plan is not None and prepared.child is None  # forked by start() only
    assert cache.mark() != before[0]
    prepared.cancel()
    assert (cache.mark(), cache.files_checked) == before
    found = target.checking.Checking(packages, "off", cache).result(warnings)
    assert found == {"clashes": None, "unowned": None}
    cache.save()
    kept = read_cache(shard)
    assert (kept["pycdirs"], kept["verified"], kept["rows"]) == (
        held["pycdirs"], held["verified"], held["rows"],
    )  # fmt: skip


def test_a_check_prepared_before_its_argument_has_its_time_from_the_start(
    site: Path, tmp_path: Path
) -> None:
    """A boot prepares its check, then waits for its argument (a library caller may take
    it over seconds later): the compiling time (QUICK_COMPILE_SECONDS) and the check's
    deadline count from start(), so the planted pyc is still compared and found."""
    target = local_package()
    cache = target.distcache.DistCache(str(tmp_path / "c"), [str(site)], code="t", quiet=0)
    warnings: list[str] = []
    packages = target.dists.scan_packages([str(site)], warnings, cache)
    checking = target.checking.Checking(packages, "quick", cache, fork=True, started=False)
    assert checking.plan is not None
    checking.plan.deadline[0] = checking.deadline = time.monotonic() - 1  # a long wait
    checking.start()
    assert checking.child is not None
    checking.result(warnings)
    on_disk = {p["name"]: p["on_disk"] for p in packages}
    assert on_disk["gen00009"]["added"] == [f"gen00009/m000/__pycache__/mod181.{TAG}.pyc"]
    assert not any("not compared" in w or "not checked" in w for w in warnings), warnings


def test_a_boot_asked_for_a_deep_check_drops_the_quick_one_it_began(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quick check a boot begins serves a plain argument; one that asks for the deep
    check (a diff of a snapshot taken with --deep) gets the deep check, which finds what
    the quick one never looks at: a data file appended to."""
    from envguard.probe import booting, runner

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    data = site / "gen00003" / "data.txt"
    data.write_text("weights\n")
    record = next(site.glob("gen00003-*.dist-info")) / "RECORD"
    import base64
    import hashlib

    digest = base64.urlsafe_b64encode(hashlib.sha256(b"weights\n").digest()).rstrip(b"=")
    with record.open("a") as fh:
        fh.write(f"gen00003/data.txt,sha256={digest.decode()},8\n")
    data.write_text("weights, edited\n")
    python = str(tmp_path / "venv" / "bin" / "python")
    args = {"default_caches": False, "git": False}
    for verify, flagged in (("quick", False), ("deep", True)):
        booting.boot(python)
        run = runner.ProbeRun(python, {**args, "verify": verify})
        try:
            report = run.result()
        finally:
            run.cancel()
        (dist,) = (p for p in report["packages"] if p["name"] == "gen00003")
        assert ("gen00003/data.txt" in dist["on_disk"]["modified"]) is flagged, verify


def test_a_boot_stopped_before_its_argument_has_started_no_child(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check a boot prepares forks its shares only once the argument asks for it: a
    boot stopped unused (a command that failed before its probe, a wrong guess) leaves no
    child of its own to be orphaned when it is killed."""
    from envguard.probe import booting

    if not Path("/proc/self/stat").exists():
        pytest.skip("processes are listed from /proc")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    booting.boot(str(tmp_path / "venv" / "bin" / "python"))
    booted = booting._BOOTS[-1]
    try:
        time.sleep(1.0)  # loaded, begun, prepared: waiting for its argument
        children = [
            entry
            for entry in os.listdir("/proc")
            if entry.isdigit() and _parent(entry) == booted.proc.pid
        ]
        assert booted.proc.poll() is None and children == []
    finally:
        booting.stop_boots()


def _parent(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rpartition(b")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def test_a_check_asks_once_whether_a_core_is_spare(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One decision a check: asked twice, a yes then a no would have every RECORD read
    here, outside the deadline a thread runs under, for nothing forked."""
    target = local_package()
    asked: list[bool] = []

    def spare() -> bool:
        asked.append(True)
        return True

    monkeypatch.setattr(target.checking, "spare_core", spare)
    cache = target.distcache.DistCache(str(tmp_path / "c"), [str(site)], code="t", quiet=0)
    packages = target.dists.scan_packages([str(site)], [], cache)
    checking = target.checking.Checking(packages, "quick", cache)
    assert checking.child is not None and len(asked) == 1
    checking.result([])


def test_the_probe_spreads_its_two_shares_before_it_waits(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once its own work is done, the probe asks for its two shares to be spread over the
    cores (forked.spread: both on one core while the probe's core goes idle took turns
    there, up to a tick), before it waits for them."""
    target = local_package()
    spread: list[list[int]] = []
    monkeypatch.setattr(target.checking, "spread", spread.append)
    on_disk, _, _, _ = _check(site, tmp_path, fork=True)
    assert len(spread) == 1 and len(spread[0]) == 2 and all(pid > 0 for pid in spread[0])
    assert on_disk["gen00002"]["modified"]  # the check ran as ever


def test_a_share_whose_answer_is_not_plain_data_says_so() -> None:
    """A share answers in marshal (the same interpreter reads it): an answer marshal cannot
    carry is a failure that says why, never a lost answer or a hang."""
    from collections import OrderedDict

    forked = local_package().forked
    plain = forked.Forked(lambda: {"units": [1, 2], "paths": ["a\udcff"]}, 10.0)
    assert plain.result(10.0) == {"units": [1, 2], "paths": ["a\udcff"]}
    odd = forked.Forked(lambda: {"kept": OrderedDict(a=1)}, 10.0)
    assert odd.result(10.0) is None
    assert odd.failed is not None and odd.failed.startswith("the answer is not plain data")


@pytest.mark.parametrize("fork", [True, False])
def test_a_check_that_cannot_start_a_thread_is_a_note_and_leaves_no_child(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fork: bool
) -> None:
    """At a process limit a thread may not start where two forks did (the reads beside the
    shares), or at all (the check run in a thread on a busy machine): the check's note,
    naming why, never a failed probe, and neither share left running."""
    import _thread
    import threading

    def refused(*args: object, **kwargs: object) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(_thread, "start_new_thread", refused)
    monkeypatch.setattr(threading.Thread, "start", refused)
    on_disk, found, warnings, checking = _check(site, tmp_path, fork=fork)
    assert found == {"clashes": None, "unowned": None}
    assert all(v is None for v in on_disk.values())
    assert warnings == [
        "installed files were not checked against RECORD: the check could not start a "
        "thread (can't start new thread)"
    ]
    for child in (checking.child, checking.second) if fork else ():
        with pytest.raises(ChildProcessError):
            os.waitpid(child.pid, os.WNOHANG)


def test_a_child_that_answered_is_collected_once_the_report_is_written() -> None:
    """A share's answer is read when it closes its pipe; the kernel frees its copy of the
    probe's memory after that, which the report no longer waits for: the child is
    collected by forked.collect() (main.ended(), once the report is written), not left to
    whoever inherits it."""
    target = local_package()
    child = target.forked.Forked(lambda: {"answer": 42}, 10.0)
    assert child.started
    assert child.result(10.0) == {"answer": 42}
    assert child.pid in target.forked._ENDING
    target.forked.collect()
    assert not target.forked._ENDING
    with pytest.raises(ChildProcessError):
        os.waitpid(child.pid, os.WNOHANG)  # collected: no such child any more
