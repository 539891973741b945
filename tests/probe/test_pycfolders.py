"""A ``__pycache__`` folder found clean is kept as one verdict (its pyc names under the
folder's stamp, one digest of its pycs' and sources' stamps), not one a pyc: the cache of a
135-distribution venv was 5.2 MB of them, read at every probe. An unchanged folder then
costs an lstat a pyc; any change to a pyc in it (rewritten in place, added, made a link) or
to a kept entry is looked at afresh, and a planted pyc is named as before."""

from __future__ import annotations

import contextlib
import json
import os
import py_compile
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from envguard.testing import make_wheel
from factories import cache_file, make_venv, probe_report, read_cache, uv_install, write_cache

TAG = sys.implementation.cache_tag
BODY = "def forward(x):\n    return x * {n}\n"


def probe(venv: Path, env: dict[str, str]) -> dict[str, Any]:
    """The report of a quick probe whose verdicts are kept however new the files are."""
    return probe_report(venv, env)


def added(report: dict[str, Any]) -> list[str]:
    (dist,) = [p for p in report["packages"] if p["name"] == "modeling"]
    result: list[str] = dist["on_disk"]["added"]
    return result


def cached(env: dict[str, str]) -> dict[str, Any]:
    return read_cache(cache_file(Path(env["XDG_CACHE_HOME"])))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}


def modeling_venv(where: Path, files: dict[str, str]) -> Path:
    """A venv at ``where`` with modeling 1.0 made of ``files``, byte-compiled as Python
    writes its bytecode."""
    wh = where.with_name(where.name + "-wheels")
    make_wheel(wh, "modeling", "1.0", files=files)
    make_venv(where)
    uv_install(where, wh, "modeling==1.0")
    subprocess.run(
        [str(where / "bin" / "python"), "-m", "compileall", "-q", str(pkg(where))],
        check=True,
        timeout=120,
    )
    return where


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    """modeling 1.0 with five modules."""
    files = {"modeling/__init__.py": ""}
    files.update({f"modeling/m{i}.py": BODY.format(n=i) for i in range(5)})
    return modeling_venv(tmp_path / "venv", files)


def pkg(venv: Path) -> Path:
    return next((venv / "lib").glob("python*/site-packages")) / "modeling"


def planted(venv: Path, module: str, n: int) -> bytes:
    """Bytecode of ``BODY`` with ``n`` whose header matches ``module``'s real source: Python
    loads it instead of the source."""
    source = pkg(venv) / f"{module}.py"
    fake = source.parent / "fake_module.py"
    fake.write_text(BODY.format(n=n))
    out = source.parent / "fake.pyc"
    py_compile.compile(str(fake), cfile=str(out), dfile=str(source), doraise=True)
    fake.unlink()
    data = bytearray(out.read_bytes())
    out.unlink()
    st = source.stat()
    data[8:12] = (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
    data[12:16] = (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    return bytes(data)


def warm(venv: Path, env: dict[str, str]) -> None:
    """Two probes: the first compares every pyc with its source, the second holds the
    folder's verdict alone."""
    assert added(probe(venv, env)) == []
    assert added(probe(venv, env)) == []


def test_a_clean_folder_is_kept_as_one_verdict_not_one_a_pyc(
    venv: Path, env: dict[str, str]
) -> None:
    warm(venv, env)
    data = cached(env)
    folders = [k for k in data["pycdirs"] if k.startswith(str(pkg(venv) / "__pycache__"))]
    assert len(folders) == 1
    names = data["pycdirs"][folders[0]][0].split("\n")
    assert sorted(names) == sorted(
        f"{m}.{TAG}.pyc" for m in ["__init__", *[f"m{i}" for i in range(5)]]
    )
    assert not [k for k in data["verified"] if k.startswith("pyc\0")]  # none a pyc


def test_a_pyc_rewritten_in_place_in_a_kept_folder_is_named(
    venv: Path, env: dict[str, str]
) -> None:
    warm(venv, env)
    pyc = pkg(venv) / "__pycache__" / f"m3.{TAG}.pyc"
    inode, folder = pyc.stat().st_ino, (pyc.parent).stat().st_mtime_ns
    with open(pyc, "r+b") as fh:  # the same file: the folder's stamp does not move
        fh.write(planted(venv, "m3", 7))
        fh.truncate()
    assert pyc.stat().st_ino == inode and pyc.parent.stat().st_mtime_ns == folder
    assert added(probe(venv, env)) == [f"modeling/__pycache__/m3.{TAG}.pyc"]
    assert added(probe(venv, env)) == [f"modeling/__pycache__/m3.{TAG}.pyc"]  # not kept clean


def test_a_pyc_added_or_made_a_link_in_a_kept_folder_is_named(
    venv: Path, env: dict[str, str]
) -> None:
    warm(venv, env)
    cache = pkg(venv) / "__pycache__"
    (cache / f"m1.{TAG}.pyc").unlink()
    (cache / f"m1.{TAG}.pyc").write_bytes(planted(venv, "m1", 9))
    assert added(probe(venv, env)) == [f"modeling/__pycache__/m1.{TAG}.pyc"]
    (cache / f"m1.{TAG}.pyc").unlink()
    (cache / f"m1.{TAG}.pyc").symlink_to(cache / f"m2.{TAG}.pyc")
    assert added(probe(venv, env)) == [f"modeling/__pycache__/m1.{TAG}.pyc"]


def test_a_source_edited_under_a_kept_folder_is_compared_again(
    venv: Path, env: dict[str, str]
) -> None:
    """The source changes and a pyc matching its new header but not its code is put in
    place of the old one: the source's new stamp is not the kept one."""
    warm(venv, env)
    source = pkg(venv) / "m4.py"
    source.write_text(BODY.format(n=44))
    pyc = pkg(venv) / "__pycache__" / f"m4.{TAG}.pyc"
    with open(pyc, "r+b") as fh:
        fh.write(planted(venv, "m4", 45))
        fh.truncate()
    assert f"modeling/__pycache__/m4.{TAG}.pyc" in added(probe(venv, env))


def test_a_kept_folder_entry_naming_a_path_out_is_not_followed(
    venv: Path, env: dict[str, str]
) -> None:
    """A cache edited to list ``../`` names under the folder's real stamp: those names are
    never stat'ed as that folder's pycs; the folder is listed afresh and a planted pyc found."""
    warm(venv, env)
    data = cached(env)
    shard = cache_file(Path(env["XDG_CACHE_HOME"]))
    for key, value in data["pycdirs"].items():
        if key.startswith(str(pkg(venv) / "__pycache__")):
            value[0] = f"../../../../etc/passwd.{TAG}.pyc"
    write_cache(shard, data)
    pyc = pkg(venv) / "__pycache__" / f"m0.{TAG}.pyc"
    with open(pyc, "r+b") as fh:
        fh.write(planted(venv, "m0", 5))
        fh.truncate()
    assert added(probe(venv, env)) == [f"modeling/__pycache__/m0.{TAG}.pyc"]


@pytest.mark.parametrize(
    "entry", [5, None, ["only names"], [1, 2], ["a.pyc", "not hex" * 5], {"0": "1"}, "x"]
)
def test_a_kept_folder_entry_of_another_shape_is_not_used(
    venv: Path, env: dict[str, str], entry: object
) -> None:
    """A folder's kept entry is told sound when it is looked up, not when the cache is
    read: one of any other shape (a forger's, or damage) is no verdict; the folder is
    listed afresh and a planted pyc found, and the probe neither fails nor skips the
    check."""
    warm(venv, env)
    data = cached(env)
    shard = cache_file(Path(env["XDG_CACHE_HOME"]))
    for key in list(data["pycdirs"]):
        if key.startswith(str(pkg(venv) / "__pycache__")):
            data["pycdirs"][key] = entry
    data["pycdirs"][7] = ["not a key", "0" * 32]
    write_cache(shard, data)
    pyc = pkg(venv) / "__pycache__" / f"m0.{TAG}.pyc"
    with open(pyc, "r+b") as fh:
        fh.write(planted(venv, "m0", 5))
        fh.truncate()
    report = probe(venv, env)
    assert added(report) == [f"modeling/__pycache__/m0.{TAG}.pyc"]
    assert not [w for w in report["warnings"] if "not checked" in w]


@pytest.mark.parametrize("same_meaning", [True, False])
def test_an_upgrade_keeps_the_folder_verdicts_not_the_records(
    venv: Path, env: dict[str, str], same_meaning: bool
) -> None:
    """A cache another envguard wrote (an upgrade: another code) gives its bytecode
    verdicts, which mean the same to any envguard of its VERDICTS number: the next probe
    compiles nothing (no pyc is kept one by one again). Its records and its "nothing added"
    verdicts are not used; with another VERDICTS number, nothing is."""
    warm(venv, env)
    shard = cache_file(Path(env["XDG_CACHE_HOME"]))
    data = cached(env)
    folders = dict(data["pycdirs"])
    data["code"] = "0" * 32
    data["verdicts"] = data["verdicts"] if same_meaning else data["verdicts"] + 1
    data["dists"] = {
        k: dict(v, dist=dict(v["dist"], version="6.6.6")) for k, v in data["dists"].items()
    }
    write_cache(shard, data)
    report = probe(venv, env)
    assert added(report) == []
    assert {p["name"]: p["version"] for p in report["packages"]}["modeling"] == "1.0"
    after = cached(env)
    assert bool([k for k in after["verified"] if k.startswith("pyc\0")]) is not same_meaning
    if same_meaning:
        assert after["pycdirs"] == folders


@pytest.mark.parametrize(
    ("loadavg", "cores", "parent", "spare"),
    [
        (b"7.90 7.80 7.70 1/300 4242\n", 2, 0, True),  # a busy last minute, idle now
        (b"1.60 1.80 1.70 2/300 4242\n", 2, 0, False),  # this one and another, for a minute
        (b"0.10 0.20 0.30 2/300 4242\n", 2, 0, True),  # another for a moment: an idle minute
        (b"1.60 1.80 1.70 2/300 4242\n", 2, 1, True),  # the other is envguard, soon waiting
        (b"0.10 0.20 0.30 3/300 4242\n", 4, 0, True),
        (b"3.90 3.80 3.70 5/300 4242\n", 4, 0, False),
        (b"0.10 0.20 0.30 1/300 4242\n", 1, 0, False),  # one core: never a child
    ],
)
def test_a_core_is_spare_by_what_runs_now_not_by_the_last_minute(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    loadavg: bytes,
    cores: int,
    parent: int,
    spare: bool,
) -> None:
    """The check's child runs beside the probe when a core is idle this instant, or will be
    once envguard, which started the probe, is done importing its command line: a
    benchmark's or a fleet's earlier runs left a 1-minute load of 1 on an idle 2-core
    machine, and the child was never started. A thread runnable for a moment on a machine
    idle for the last minute does not take the core either; busy now and for the last
    minute, the machine has none to spare."""
    from envguard.probe.payload import local_package

    forked = local_package().forked
    (tmp_path / "loadavg").write_bytes(loadavg)
    monkeypatch.setattr(forked, "LOADAVG", str(tmp_path / "loadavg"))
    monkeypatch.setattr(forked.os, "sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr(forked, "_parent_running", lambda: parent)
    assert forked.spare_core() is spare


def test_a_thread_runnable_for_a_moment_does_not_take_the_core(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The count is looked at again a moment later before the machine is taken for busy:
    runs back to back (a benchmark's) leave a 1-minute load over 1.5 on 2 cores, and the
    exit of the last one, or a kernel worker, was runnable at the first look in 4 runs of
    10. Such a worker runs for microseconds: the looks are a quarter of a millisecond
    apart, not a millisecond (each second look had cost the snapshot 1.2 ms)."""
    from envguard.probe.payload import local_package

    forked = local_package().forked
    slept: list[float] = []
    monkeypatch.setattr(forked.time, "sleep", slept.append)
    looks = iter([b"1.90 1.80 1.70 3/300 4242", b"1.90 1.80 1.70 2/300 4242"])
    monkeypatch.setattr(forked, "_loadavg", lambda: next(looks).split())
    monkeypatch.setattr(forked.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(forked, "_parent_running", lambda: 1)
    assert forked.spare_core() is True  # the second look: this probe and its parent only
    assert slept == [forked.LOOK_PAUSE] and forked.LOOK_PAUSE <= 0.0005
    busy = iter([b"1.90 1.80 1.70 3/300 4242"] * forked.SAMPLES)
    monkeypatch.setattr(forked, "_loadavg", lambda: next(busy).split())
    assert forked.spare_core() is False  # busy at every look, and for the last minute


@pytest.mark.parametrize(
    ("idle", "spinning", "started", "counted"),
    [
        (0, 1, "before", 1),
        (0, 2, "before", 1),
        (0, 1, "after", 1),
        (0, 2, "after", 2),
        (0, 6, "after", 2),
        (20, 2, "after", 2),  # the newest are looked at, past the first PARENT_THREADS
    ],
)
def test_the_parent_s_threads_count_as_the_parent(
    idle: int, spinning: int, started: str, counted: int
) -> None:
    """A thread of envguard's other than its main one running while the main thread waits
    is envguard's, not another load. The threads a process had before it started the
    probe count once together (a library caller's other busy threads are a load like any
    other: counted each, such a caller's probe forked its shares on a machine its threads
    kept busy); each one it started since counts on its own (envguard's readers of the
    probe's output, runnable at the look beside envguard's main thread), two at most: a
    thread pool the caller started meanwhile is a load beyond those."""
    import textwrap

    code = textwrap.dedent(
        f"""
        import hashlib, subprocess, sys, threading, time
        stop = time.monotonic() + 20
        data = bytes(1 << 22)
        def spin():  # hashing lets the GIL go: the threads run at once
            while time.monotonic() < stop:
                hashlib.sha256(data).digest()
        def spinners():
            for _ in range({spinning}):
                threading.Thread(target=spin, daemon=True).start()
        for _ in range({idle}):  # threads that wait, made before all else
            threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
        # The child looks 20 times, 5 ms apart (a spinning thread may wait for a core at
        # one look), after its parent's threads started (a clock tick is 10 ms).
        child = "import time; time.sleep(0.1); looks = [];"
        child += "from envguard.probe.payload import local_package;"
        child += "forked = local_package().forked;"
        child += "[looks.append(forked._parent_running()) or time.sleep(0.005) for _ in range(20)];"
        child += "print(max(looks))"
        if {started!r} == "before":
            spinners()
            time.sleep(0.05)
        proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
        if {started!r} == "after":
            time.sleep(0.03)
            spinners()
        print(proc.communicate()[0].strip())
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == str(counted)  # the spinning threads; the main one waits


def test_the_parent_is_seen_running_or_waiting() -> None:
    """The probe's parent as the kernel says it is: a child this test waits for sees it
    sleeping, not running."""
    import textwrap

    code = textwrap.dedent(
        """
        from envguard.probe.payload import local_package
        print(local_package().forked._parent_running())
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"  # this test waits in communicate(): not running


@pytest.mark.parametrize(
    ("cores", "moved"),
    [
        ({"self": 1, 10: 0, 11: 0}, True),  # both on core 0, the probe on 1: one moves
        ({"self": 1, 10: 0, 11: 1}, False),  # apart already
        ({"self": 0, 10: 0, 11: 0}, False),  # on the probe's own core: it waits, they run
        ({"self": 1, 10: 0, 11: None}, False),  # one is not running (ended, or waiting)
        ({"self": None, 10: 0, 11: 0}, False),  # where the probe runs cannot be told
    ],
)
def test_two_shares_on_one_core_are_spread_when_the_probe_waits(
    monkeypatch: pytest.MonkeyPatch, cores: dict[Any, int | None], moved: bool
) -> None:
    """The kernel put both shares of a fork on the core idle then (5 CUDA snapshots of
    30), and did not pull one to the core the probe leaves when it waits for them until its
    next balance, up to a tick later: they took turns on one core meanwhile. The second is
    moved to the probe's core, and its own cores are given back at once."""
    from envguard.probe.payload import local_package

    forked = local_package().forked
    calls: list[tuple[int, set[int]]] = []
    monkeypatch.setattr(forked, "_core_of", cores.__getitem__)
    monkeypatch.setattr(forked.os, "sched_getaffinity", lambda pid: {0, 1, 2})
    monkeypatch.setattr(forked.os, "sched_setaffinity", lambda pid, cpus: calls.append((pid, cpus)))
    forked.spread([10, 11])
    assert calls == ([(11, {1}), (11, {0, 1, 2})] if moved else [])


def test_a_share_is_moved_only_where_its_cores_allow(monkeypatch: pytest.MonkeyPatch) -> None:
    from envguard.probe.payload import local_package

    forked = local_package().forked
    calls: list[Any] = []
    monkeypatch.setattr(forked, "_core_of", {"self": 3, 10: 0, 11: 0}.__getitem__)
    monkeypatch.setattr(forked.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(forked.os, "sched_setaffinity", lambda *a: calls.append(a))
    forked.spread([10, 11])
    forked.spread([10])  # one share: nothing to spread
    assert calls == []


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="Linux's /proc")
def test_only_this_process_s_own_children_are_moved() -> None:
    """A number that is not this process's child (reused once SIGCHLD ignored had a
    share collected at its exit) is never read as a share: no core, nothing moved."""
    from envguard.probe.payload import local_package

    forked = local_package().forked
    assert forked._core_of("self") is not None
    spawner = (
        "import subprocess, sys\n"
        f"p = subprocess.Popen([sys.executable, '-c', {_SPIN!r}])\n"
        "print(p.pid, flush=True)\n"
        "p.wait()\n"
    )
    middle = subprocess.Popen([sys.executable, "-c", spawner], stdout=subprocess.PIPE, text=True)
    assert middle.stdout is not None
    grandchild = 0
    spinning = None
    try:
        grandchild = int(middle.stdout.readline())
        spinning = subprocess.Popen([sys.executable, "-c", _SPIN])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (
            _state(grandchild) == "R" and forked._core_of(spinning.pid) is not None
        ):
            time.sleep(0.01)  # (each runs once the kernel gives it a core)
        assert forked._core_of(spinning.pid) is not None  # this process's child, running
        assert _state(grandchild) == "R" and forked._core_of(grandchild) is None
    finally:
        if grandchild:
            with contextlib.suppress(ProcessLookupError):
                os.kill(grandchild, 9)
        for proc in (middle, spinning):
            if proc is not None:
                proc.kill()
                proc.wait()
        middle.stdout.close()


# A process that keeps a core busy, and ends by itself if no test is left to end it.
_SPIN = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end:\n    pass\n"


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rpartition(")")[2].split()[0]


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux's affinity calls")
def test_spreading_real_shares_leaves_their_cores_as_they_were() -> None:
    """On real processes: the core each runs on read from /proc, and a share moved keeps
    the cores it had (a share pinned to the probe's core for the rest of its run would
    wait on it whenever another process took it)."""
    import textwrap

    code = textwrap.dedent(
        """
        import json, os, signal, time
        from envguard.probe.payload import local_package
        forked = local_package().forked
        cores = sorted(os.sched_getaffinity(0))
        pids = []
        try:
            for _ in range(2):
                pid = os.fork()
                if pid == 0:
                    os.sched_setaffinity(0, {cores[0]})
                    end = time.monotonic() + 60  # (ends by itself if no one is left to)
                    while time.monotonic() < end:
                        pass
                    os._exit(0)
                pids.append(pid)
            time.sleep(0.2)
            ran = [forked._core_of(pid) for pid in pids]
            both = {cores[0], cores[-1]}  # (the kernel's own balance can only do as spread)
            for pid in pids:
                os.sched_setaffinity(pid, both)
            os.sched_setaffinity(0, {cores[-1]})
            forked.spread(pids)
            after = [forked._core_of(pid) for pid in pids]
            kept = [os.sched_getaffinity(pid) == both for pid in pids]
            print(json.dumps([ran, after, kept, forked._core_of("self") == cores[-1]]))
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    ran, after, kept, here = json.loads(out.stdout)
    cores = sorted(os.sched_getaffinity(0))
    assert ran == [cores[0], cores[0]] and here  # both started on one core, the probe apart
    assert kept == [True, True]
    if len(cores) > 1:
        assert cores[-1] in after and None not in after  # one moved; both still run


@pytest.fixture
def nested(tmp_path: Path) -> Path:
    """modeling 1.0 with modules in two folders (modeling/ and modeling/sub/)."""
    files = {"modeling/__init__.py": "", "modeling/sub/__init__.py": ""}
    files.update({f"modeling/m{i}.py": BODY.format(n=i) for i in range(3)})
    files.update({f"modeling/sub/s{i}.py": BODY.format(n=10 + i) for i in range(3)})
    return modeling_venv(tmp_path / "nested", files)


def _kept(env: dict[str, str], folder: Path) -> list[str]:
    (entry,) = [v for k, v in cached(env)["pycdirs"].items() if k.startswith(f"{folder}\0")]
    value: list[str] = entry
    return value


def test_kept_folders_are_told_together_and_only_a_changed_one_is_looked_at(
    nested: Path, env: dict[str, str]
) -> None:
    """The kept folders are told in one pass: a pyc rewritten in place in one of them is
    named, and the other keeps its verdict as it was."""
    warm(nested, env)
    top, sub = pkg(nested) / "__pycache__", pkg(nested) / "sub" / "__pycache__"
    kept_top = _kept(env, top)
    with open(sub / f"s1.{TAG}.pyc", "r+b") as fh:
        fh.write(planted(nested, "sub/s1", 99))
        fh.truncate()
    for _ in range(2):  # and not kept clean
        assert added(probe(nested, env)) == [f"modeling/sub/__pycache__/s1.{TAG}.pyc"]
        assert _kept(env, top) == kept_top


def test_a_kept_entry_naming_a_pyc_that_is_not_there_sends_every_folder_back(
    nested: Path, env: dict[str, str]
) -> None:
    """One kept entry (edited) names a pyc the folder does not hold: no folder is cleared
    by the pass over them all; each is looked at alone, and a pyc planted in another
    folder is still named, at every probe."""
    warm(nested, env)
    top, sub = pkg(nested) / "__pycache__", pkg(nested) / "sub" / "__pycache__"
    data = cached(env)
    shard = cache_file(Path(env["XDG_CACHE_HOME"]))
    for key, value in data["pycdirs"].items():
        if key.startswith(f"{top}\0"):
            value[0] += f"\nghost.{TAG}.pyc"
    write_cache(shard, data)
    with open(sub / f"s2.{TAG}.pyc", "r+b") as fh:
        fh.write(planted(nested, "sub/s2", 98))
        fh.truncate()
    for _ in range(2):
        assert added(probe(nested, env)) == [f"modeling/sub/__pycache__/s2.{TAG}.pyc"]


@pytest.mark.parametrize("mark", ["\x1b[31m", "\u202e"])
def test_kept_rows_holding_a_path_that_is_not_one_line_are_read_again(
    venv: Path, env: dict[str, str], mark: str
) -> None:
    """A cache edited so that a kept RECORD path holds a control or bidi character: the
    RECORD is read again (its rows are what is checked), never the edited path."""
    warm(venv, env)
    data = cached(env)
    shard = cache_file(Path(env["XDG_CACHE_HOME"]))
    edited = 0
    for key, value in data["rows"].items():
        if "/modeling-1.0.dist-info/RECORD\0" in key and value[0]:
            value[0] = value[0].replace("modeling/m2.py", "modeling/m2.py" + mark)
            edited += 1
    assert edited == 1
    write_cache(shard, data)
    (dist,) = [p for p in probe(venv, env)["packages"] if p["name"] == "modeling"]
    assert dist["on_disk"]["missing"] == [] and dist["on_disk"]["modified"] == []


def test_kept_folders_past_one_batch_are_all_told(tmp_path: Path, env: dict[str, str]) -> None:
    """Three folders of 250 modules (more pycs than one batch of the pass): a pyc rewritten
    in place in the last folder is named, and no folder is compiled again after."""
    files = {"modeling/__init__.py": ""}
    for part in ("a", "b", "c"):
        files[f"modeling/{part}/__init__.py"] = ""
        files.update({f"modeling/{part}/m{i}.py": BODY.format(n=i) for i in range(250)})
    venv = modeling_venv(tmp_path / "many", files)
    warm(venv, env)
    last = pkg(venv) / "c" / "__pycache__" / f"m249.{TAG}.pyc"
    with open(last, "r+b") as fh:
        fh.write(planted(venv, "c/m249", 7))
        fh.truncate()
    report = probe(venv, env)
    assert added(report) == [f"modeling/c/__pycache__/m249.{TAG}.pyc"]
    assert not any("not compared" in w for w in report["warnings"])


@pytest.mark.parametrize(
    "names",
    [
        "a.{tag}.pyc\nb.{tag}.pyc\n_c.{tag}.pyc",
        "a.{tag}.opt-1.pyc\nb.{tag}.pyc",
        "a.other-99.pyc",
        "a.{tag}.pyc.{tag}.pyc",
        "a.{tag}.pyc\nb.{tag}.pycx",
        "",
    ],
)
def test_a_kept_folders_paths_are_the_ones_made_name_by_name(names: str) -> None:
    """The paths of a kept folder's pycs and sources, made from the whole text at once in
    the common case, are the ones made name by name, whatever the names."""
    from envguard.probe.payload import local_package

    paths = local_package().pycstamps.pyc_paths
    tag = sys.implementation.cache_tag
    names = names.format(tag=tag)
    each = names.split("\n") if names else []
    assert paths(names, "pkg/sub/", tag) == (
        ["pkg/sub/__pycache__/" + name for name in each],
        ["pkg/sub/" + name.partition(".")[0] + ".py" for name in each],
    )
    assert paths(names, "", tag)[1] == [name.partition(".")[0] + ".py" for name in each]


def test_a_batch_of_kept_folders_gives_each_folders_paths_in_turn() -> None:
    """The paths of a batch of kept folders, made at once, are each folder's own as
    pyc_paths makes them, folder after folder, and each folder's text its pyc paths joined;
    a batch holding any name that is not this interpreter's plain pyc is left to be made
    folder by folder. Random batches of names from an alphabet of the characters that
    matter (dots, the tag's parts, newlines, a lead that looks like a pyc)."""
    import random

    from envguard.probe.payload import local_package

    stamps = local_package().pycstamps
    tag = sys.implementation.cache_tag
    pieces = ["a", "b", ".", "." + tag + ".pyc", ".opt-1", "pyc", tag, "\n", "\udcff", "é"]
    leads = ["", "pkg/", "pkg/sub/", "x." + tag + ".pyc/", "a.b/"]
    rng = random.Random(33)
    made = plain = 0
    for _ in range(3000):
        folders = []
        for _ in range(rng.randint(0, 4)):
            if rng.random() < 0.6:  # mostly plain names: the case the batch is for
                count = rng.randint(0, 3)
                names = "\n".join(
                    "".join(rng.choices("abc_", k=rng.randint(1, 3))) + "." + tag + ".pyc"
                    for _ in range(count)
                )
            else:
                names = "".join(rng.choices(pieces, k=rng.randint(0, 6)))
            folders.append((names, rng.choice(leads)))
        each = [stamps.pyc_paths(names, lead, tag) for names, lead in folders]
        batch = stamps.batch_paths(folders, tag)
        if batch is None:
            names_all = "\n".join(names for names, _ in folders if names)
            assert stamps.batch_paths([(names_all, "")], tag) is None
            continue
        made += 1
        plain += any(names for names, _ in folders)
        texts, rels, sources = batch
        assert texts == ["\n".join(folder_rels) for folder_rels, _ in each]
        assert rels == [rel for folder_rels, _ in each for rel in folder_rels]
        assert sources == [source for _, folder_sources in each for source in folder_sources]
    assert made > 500 and plain > 300  # the batch was made, not only refused


def test_the_folders_holding_bytecode_a_record_lists_are_all_found() -> None:
    """A folder's kept pycs are looked up in the RECORDs' paths only where some RECORD
    names a file in its __pycache__: that set of folders misses none (random paths of
    the parts that matter: nested and misleading __pycache__ names, the top of the site)."""
    import random

    from envguard.probe.payload import local_package

    listed = local_package().installed._listed_bytecode
    parts = ["__pycache__", "a", "x__pycache__", "__pycache__x", "b.pyc", "c.py"]
    rng = random.Random(26)
    for _ in range(3000):
        paths = ["/".join(rng.choices(parts, k=rng.randint(1, 4))) for _ in range(6)]
        folders = {"", *(path.rpartition("/")[0] for path in paths)}
        folders |= {f.rpartition("/")[0] for f in folders}
        expected = {
            folder
            for folder in folders
            for path in paths
            if path.rpartition("/")[0] == (folder + "/" if folder else "") + "__pycache__"
        }
        assert listed(paths) == expected, paths


def test_a_pycache_prefix_is_said_where_the_check_cannot_look(tmp_path: Path) -> None:
    """With PYTHONPYCACHEPREFIX set, Python loads bytecode from that tree and never from
    __pycache__: the check, which compares __pycache__ with the sources, says so."""
    from factories import make_venv, probe_report

    make_venv(tmp_path / "venv")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    prefixed = {**env, "PYTHONPYCACHEPREFIX": str(tmp_path / "pyc")}
    said = "PYTHONPYCACHEPREFIX is set: the bytecode Python loads from that folder"
    assert any(said in w for w in probe_report(tmp_path / "venv", prefixed)["warnings"])
    assert not any(said in w for w in probe_report(tmp_path / "venv", env)["warnings"])
    unchecked = probe_report(tmp_path / "venv", prefixed, verify="off")
    assert not any(said in w for w in unchecked["warnings"])  # no check, nothing to say
