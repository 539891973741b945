"""Attacks on the installed-files check's fast paths (issue 33): the one verdict kept per
``__pycache__`` folder, the check shared with a forked child, and the verdicts kept across
envguard versions. Each is run on a real venv (uv, a wheel made here) by the probe as
snapshot sends it; each failed on the check as it was before its fix."""

from __future__ import annotations

import os
import py_compile
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

# the venv (modeling 1.0, five modules, byte-compiled) and its readers: the bytecode-folder
# tests' own
import probe.test_pycfolders as folders
from envguard.testing import make_wheel
from factories import make_venv, probe_report, uv_install
from probe.test_pycfolders import BODY, TAG, added, cached, pkg

env, venv = folders.env, folders.venv  # the fixtures


def plant(venv: Path, module: str, n: int) -> Path:
    """Bytecode of ``BODY`` with ``n`` written over ``module``'s pyc, its header copied from
    the real source: Python loads it instead of the source (checked here by running it)."""
    source = pkg(venv) / f"{module}.py"
    pyc = source.parent / "__pycache__" / f"{module}.{TAG}.pyc"
    fake = source.parent.parent / "fake_module.py"
    fake.write_text(BODY.format(n=n))
    py_compile.compile(str(fake), cfile=str(pyc), dfile=str(source), doraise=True)
    fake.unlink()
    data = bytearray(pyc.read_bytes())
    st = source.stat()
    data[8:12] = (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
    data[12:16] = (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    pyc.write_bytes(bytes(data))
    ran = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            f"import importlib; print(importlib.import_module('modeling.{module}').forward(1))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert ran.stdout.strip() == str(n)  # Python runs the planted code
    return pyc


@pytest.mark.slow
def test_a_pyc_hidden_behind_a_flood_of_entries_is_named(venv: Path, env: dict[str, str]) -> None:
    """The folder's listing was cut at MAX_ENTRIES names in sorted order: 100,000 empty
    files whose names sort first (Python never loads them) left the planted pyc unlisted,
    and the folder was even kept clean."""
    pyc = plant(venv, "m3", 7)
    cache = pyc.parent
    for i in range(100_000):
        os.close(os.open(cache / f"0{i:06d}", os.O_CREAT | os.O_WRONLY, 0o644))
    rel = f"modeling/__pycache__/m3.{TAG}.pyc"
    assert added(probe_report(venv, env)) == [rel]
    assert added(probe_report(venv, env)) == [rel]  # not kept clean


def test_a_folder_changed_within_the_quiet_time_keeps_no_verdict(
    venv: Path, env: dict[str, str]
) -> None:
    """A folder's verdict is its listing under its stamp: on a file system whose times are
    coarse (NFS, ext4 with 128-byte inodes: one second), a pyc planted in the tick the
    folder was listed leaves that stamp as it was, and the next probes would never list the
    folder again. Like every record of the cache (git's racily-clean rule), no verdict is
    kept while the folder changed within the quiet time; its pycs being old is not enough."""
    time.sleep(1.2)  # the pycs and sources settled
    (pkg(venv) / "__pycache__" / "notes.txt").write_text("x")  # the folder changes now
    report = probe_report(venv, env, cache_quiet_seconds=1.0)
    assert added(report) == []
    prefix = str(pkg(venv) / "__pycache__") + "\0"
    assert not [k for k in cached(env)["pycdirs"] if k.startswith(prefix)]
    time.sleep(1.2)  # now settled: kept
    assert added(probe_report(venv, env, cache_quiet_seconds=1.0)) == []
    assert [k for k in cached(env)["pycdirs"] if k.startswith(prefix)]


def _lstats_of_sources(site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ``.py`` files the check lstat'ed in a third run (the first two kept every
    verdict), in one process."""
    from envguard.probe.payload import local_package

    target = local_package()

    def check() -> None:
        cache = target.distcache.DistCache(str(tmp_path / "c"), [str(site)], code="t", quiet=0)
        warnings: list[str] = []
        packages = target.dists.scan_packages([str(site)], warnings, cache)
        target.checking.Checking(packages, "quick", cache, fork=False).result(warnings)
        cache.save()

    check()
    check()
    seen: list[str] = []
    real = os.lstat

    def lstat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if str(path).endswith(".py"):
            seen.append(os.path.relpath(path, site))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", lstat)
    check()
    return seen


def test_an_unchanged_venv_costs_one_lstat_a_source_whatever_comes_first(
    venv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bytecode scan took the RECORD check's stats only when the first distribution
    checked left some (a stub-only package, a missing file, sorted first, left none): every
    source of every later distribution was then lstat'ed a second time at every probe."""
    wh = tmp_path / "wh"
    make_wheel(wh, "aaa-stubs", "1.0", files={"aaa-stubs/__init__.pyi": "x: int\n"})
    uv_install(venv, wh, "aaa-stubs==1.0")
    site = pkg(venv).parent
    seen = _lstats_of_sources(site, tmp_path, monkeypatch)
    assert sorted(seen) == sorted(set(seen))  # once each
    assert "modeling/m3.py" in seen


def test_a_check_not_shared_reads_each_record_once(
    venv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a core to spare the check is prepared (every RECORD read) before it is known
    whether it can be shared: one distribution (nothing to share), more than the queue
    holds (a 10,000-distribution venv), a pipe too small, no fork. Then the thread began
    again from nothing, every RECORD read and every folder stat'ed twice."""
    from envguard.probe.payload import local_package

    target = local_package()
    site = str(pkg(venv).parent)
    real = os.lstat
    records: list[str] = []

    def lstat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if str(path).endswith(".dist-info/RECORD"):
            records.append(str(path))
        return real(path, *args, **kwargs)

    warnings: list[str] = []
    packages = target.dists.scan_packages([site], warnings, None)
    monkeypatch.setattr(os, "lstat", lstat)
    counts = []
    for fork in (False, True):
        records.clear()
        checking = target.checking.Checking(packages, "quick", None, fork=fork)
        assert checking.child is None  # one distribution: not shared
        checking.result(warnings)
        counts.append(len(records))
        (modeling,) = [p for p in packages if p["name"] == "modeling"]
        assert modeling["on_disk"]["checked"] == 6
    assert counts[1] == counts[0], records


def _running(pid: int) -> bool:
    """``pid`` is there and not a zombie (an orphan's reaper may be slow to collect it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rpartition(b")")[2].split()[0] != b"Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_the_checks_child_ends_by_its_deadline_when_the_probe_was_killed(
    tmp_path: Path,
) -> None:
    """The probe alone SIGKILLed (the OOM killer's pick, a ``kill`` of its pid, a host that
    is not envguard): its child went on hashing until its share was done (here 24 GiB of a
    deep check; a hung file system: for ever), no one left to stop it at the deadline."""
    from factories import make_dist_info

    make_venv(tmp_path / "venv")
    site = next((tmp_path / "venv" / "lib").glob("python*/site-packages"))
    for name in ("slow1", "slow2"):
        rows = ""
        for part in range(3):
            blob = site / name / f"a{part}.so"
            blob.parent.mkdir(exist_ok=True)
            with blob.open("wb") as out:
                out.truncate(31 << 27)
            rows += f"{name}/a{part}.so,sha256=AAAA,{31 << 27}\n"
        make_dist_info(site, name, "1.0", record=rows)
    code = (
        "import sys\n"
        "from envguard.probe.payload import local_package\n"
        "t = local_package()\n"
        "packages = t.dists.scan_packages([sys.argv[1]], [], None)\n"
        "c = t.checking.Checking(packages, 'deep', None, timeout=2.0, fork=True)\n"
        "print(c.child.pid if c.child else 0, flush=True)\n"
        "c.result([])\n"
    )
    probe = subprocess.Popen(
        [sys.executable, "-c", code, str(site)], stdout=subprocess.PIPE, text=True
    )
    child = 0
    try:
        assert probe.stdout is not None
        child = int(probe.stdout.readline())
        assert child and _running(child)
        probe.kill()
        probe.wait(timeout=30)
        time.sleep(4.5)  # the deadline (2 s) and the reaper's second are past
        assert not _running(child)
    finally:
        probe.kill()
        probe.wait(timeout=30)
        probe.stdout.close()
        if child and _running(child):
            os.kill(child, 9)


@pytest.mark.parametrize("module", ["modèle", "step-2", "2nd"])
def test_a_planted_pyc_of_a_module_named_beyond_ascii_identifiers_is_named(
    tmp_path: Path, env: dict[str, str], module: str
) -> None:
    """Python names a module's pyc after its file, whatever the name: a Unicode identifier
    (``import modèle``), or one only importlib reaches (``step-2``, ``2nd``). The check
    listed only ASCII identifiers' pycs, and the folder was kept clean around the planted
    one."""
    wh = tmp_path / "wh"
    files = {"modeling/__init__.py": "", f"modeling/{module}.py": BODY.format(n=1)}
    make_wheel(wh, "modeling", "1.0", files=files)
    venv = tmp_path / "venv"
    make_venv(venv)
    uv_install(venv, wh, "modeling==1.0")
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "compileall", "-q", str(pkg(venv))], check=True, timeout=120)
    pyc = plant(venv, module, 7)
    rel = f"modeling/__pycache__/{pyc.name}"
    assert added(probe_report(venv, env)) == [rel]
    assert added(probe_report(venv, env)) == [rel]


def test_a_pyc_planted_in_a_folder_two_distributions_share_is_merged_from_either_share(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A folder two distributions install into (a namespace such as ``nvidia/``) is looked
    at with the first one's unit; a pyc planted for the second one's module is its drift.
    When the shares took those units apart, the share holding the folder was put together
    first and named a distribution whose answer was not in yet: a TypeError, the probe's
    report lost. Each order of the shares gives the one-process answer."""
    from envguard.probe.payload import local_package

    wh = tmp_path / "wh"
    make_wheel(wh, "alpha", "1.0", files={"shared/a.py": BODY.format(n=1)})
    make_wheel(wh, "beta", "1.0", files={"shared/b.py": BODY.format(n=2)})
    venv = tmp_path / "venv"
    make_venv(venv)
    uv_install(venv, wh, "alpha==1.0", "beta==1.0")
    site = pkg(venv).parent
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "compileall", "-q", str(site / "shared")], check=True)
    pyc = site / "shared" / "__pycache__" / f"b.{TAG}.pyc"
    data = bytearray(pyc.read_bytes())
    fake = tmp_path / "fake.py"
    fake.write_text(BODY.format(n=9))
    py_compile.compile(str(fake), cfile=str(pyc), dfile=str(site / "shared" / "b.py"))
    pyc.write_bytes(bytes(data[:16]) + pyc.read_bytes()[16:])  # the real header: loaded

    installed = local_package().installed

    def answer(order: list[int] | None) -> dict[str, Any]:
        warnings: list[str] = []
        packages = local_package().dists.scan_packages([str(site)], warnings, None)
        plan = installed.prepare(packages, "quick", warnings, None)
        if order is None:
            shares = [installed.work(plan, range(len(plan.units)))]
        else:
            shares = [installed.work(plan, [unit]) for unit in order]
        installed.finish(plan, packages, shares, warnings)
        return {p["name"]: p["on_disk"] for p in packages if p["name"] in ("alpha", "beta")}

    alone = answer(None)
    assert alone["beta"]["added"] == [f"shared/__pycache__/b.{TAG}.pyc"]
    assert answer([0, 1]) == alone
    assert answer([1, 0]) == alone


def test_a_check_whose_child_was_killed_is_finished_by_the_probe(tmp_path: Path) -> None:
    """The check's child SIGKILLed (the OOM killer's pick: it is a copy of the probe) with
    the deadline far: the units it had taken were lost with it, and the whole check was
    given up ("installed files were not checked"). The probe checks them itself: the answer
    is the one-process one, a file appended to named."""
    import signal

    from envguard.probe.payload import local_package
    from envguard.testing import install_many

    target = local_package()
    make_venv(tmp_path / "venv")
    site = next((tmp_path / "venv" / "lib").glob("python*/site-packages"))
    install_many(site, files=200, per_dist=20)
    with open(site / "gen00007" / "m000" / "mod141.py", "a") as fh:
        fh.write("EVIL = 1\n")

    def check(fork: bool) -> tuple[Any, ...]:
        warnings: list[str] = []
        packages = target.dists.scan_packages([str(site)], warnings, None)
        checking = target.checking.Checking(packages, "quick", None, fork=fork)
        if fork:
            assert checking.child is not None
            os.kill(checking.child.pid, signal.SIGKILL)
        found = checking.result(warnings)
        return {p["name"]: p["on_disk"] for p in packages}, found, warnings

    alone, shared = check(False), check(True)
    assert shared == alone
    assert alone[0]["gen00007"]["modified"] == ["gen00007/m000/mod141.py"]


def test_a_file_given_a_second_link_then_edited_with_its_mtime_put_back_is_named(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """pip copies every file (one link each). Whoever can write one can give it a second
    link (the ctime of a file with several links is left out: uv links its cache into every
    venv, moving it), edit it in place with its size kept, put its mtime back and remove its
    pyc: Python runs the edit. A distribution that has one-link files is no uv-linked one:
    its files' ctimes count, and so in the verdicts kept for them."""
    from factories import pip_install

    wh = tmp_path / "wh"
    whl = make_wheel(
        wh, "modeling", "1.0", files={"modeling/__init__.py": "", "modeling/m.py": "X = 1111\n"}
    )
    venv = tmp_path / "venv"
    make_venv(venv)
    pip_install(venv, whl)
    source = pkg(venv) / "m.py"
    assert source.stat().st_nlink == 1
    (dist,) = [p for p in probe_report(venv, env)["packages"] if p["name"] == "modeling"]
    assert dist["on_disk"]["modified"] == []
    st = source.stat()
    os.link(source, tmp_path / "second-link")
    (dist,) = [p for p in probe_report(venv, env)["packages"] if p["name"] == "modeling"]
    assert dist["on_disk"]["modified"] == []  # linked, not edited: hashed, found as it was
    with open(source, "r+") as fh:
        fh.write("X = 6666\n")
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns))
    for pyc in (source.parent / "__pycache__").glob("m.*.pyc"):
        pyc.unlink()
    ran = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import modeling.m as m; print(m.X)"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert ran.stdout.strip() == "6666"
    (dist,) = [p for p in probe_report(venv, env)["packages"] if p["name"] == "modeling"]
    assert dist["on_disk"]["modified"] == ["modeling/m.py"]
