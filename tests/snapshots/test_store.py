"""Reading untrusted snapshot files, and writing them atomically."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings

from envguard.errors import SnapshotError, UsageError
from envguard.snapshots import store
from factories import json_values, package, snapshot


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"schema_version": 1, "name": "x"', "not valid JSON"),
        ("[]", "top level is not an object"),
        ('{"name": "x"}', "no schema_version"),
        ('{"schema_version": 99}', "schema_version 99 is newer"),
        ('{"schema_version": 1, "name": "x"}', "invalid snapshot at created"),
    ],
)
def test_corrupt_snapshots_are_named_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(SnapshotError, match=message) as info:
        store.load(path)
    assert str(path) in info.value.message


def test_unknown_field_is_rejected(tmp_path: Path) -> None:
    data = json.loads(store.dumps(snapshot([package("a", "1")])))
    data["packages"][0]["evil"] = "x"
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SnapshotError, match=r"packages\.0\.evil"):
        store.load(path)


def test_write_atomic_never_leaves_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "snapshots" / "a.json"
    store.write_atomic(target, "one", force=False)
    with pytest.raises(UsageError, match="already exists"):
        store.write_atomic(target, "two", force=False)
    store.write_atomic(target, "three", force=True)
    assert target.read_text() == "three"
    assert sorted(p.name for p in target.parent.iterdir()) == ["a.json"]


def test_write_atomic_gives_the_file_the_umask_mode_and_never_follows_a_planted_link(
    tmp_path: Path,
) -> None:
    """The file is made beside its target under a fresh random name (never a name planted
    as a link: O_EXCL and O_NOFOLLOW), then given the mode the user's umask allows (a
    shared snapshot stays readable), as a plain write would."""
    import os

    target = tmp_path / "a.json"
    outside = tmp_path / "outside"
    old = os.umask(0o022)
    try:
        store.write_atomic(target, "one", force=False)
    finally:
        os.umask(old)
    assert target.stat().st_mode & 0o777 == 0o644
    names = set()
    for _ in range(20):
        fd, tmp = store._new_beside(target)
        os.close(fd)
        assert Path(tmp).parent == tmp_path and Path(tmp).name.startswith(".a.json.")
        names.add(tmp)
        os.unlink(tmp)
        os.symlink(outside, tmp)  # a link left at the last name: a new name, never it
    assert len(names) == 20 and not outside.exists()
    # as long as mkstemp's names: a target name that fit beside them still fits
    longest = tmp_path / ("n" * (255 - len(".") - len(".12345678.tmp")))
    store.write_atomic(longest, "long", force=False)
    assert longest.read_text() == "long"


def test_resolve_by_name_and_newest(tmp_path: Path) -> None:
    folder = tmp_path / "snapshots"
    folder.mkdir()
    for name in ("old", "new"):
        (folder / f"{name}.json").write_text(store.dumps(snapshot(name=name)))
    import os

    os.utime(folder / "old.json", (1, 1))
    assert store.load("new", root=tmp_path).name == "new"
    assert store.newest(root=tmp_path).name == "new.json"
    with pytest.raises(SnapshotError):
        store.resolve("../etc/passwd", root=tmp_path)


def test_newest_is_by_created_not_file_time(tmp_path: Path) -> None:
    from datetime import datetime, timezone

    folder = tmp_path / "snapshots"
    folder.mkdir()
    (folder / "later.json").write_text(
        store.dumps(snapshot(name="later", created=datetime(2025, 6, 1, tzinfo=timezone.utc)))
    )
    (folder / "earlier.json").write_text(
        store.dumps(snapshot(name="earlier"))
    )  # 2024, touched last
    (folder / "broken.json").write_text("{")
    assert store.newest(root=tmp_path).name == "later.json"


def _read_fifo(fifo: Path, into: list[str]) -> threading.Thread:
    """A reader of ``fifo`` in the background (what `--out >(gzip > x)` gives a command)."""

    def read() -> None:
        with open(fifo, encoding="utf-8") as fh:
            into.append(fh.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("force", [False, True])
def test_a_pipe_or_a_link_to_one_is_written_into_never_replaced(
    tmp_path: Path, force: bool
) -> None:
    """`--out /dev/stdout` or a pipe: the text goes into it, and it stays what it was (a
    rename over /dev/stdout or /dev/null as root put a file there, for everyone)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "stdout"
    link.symlink_to(fifo)
    for target in (fifo, link):
        got: list[str] = []
        reader = _read_fifo(fifo, got)
        store.write_atomic(target, "snapshot text\n", force=force)
        reader.join(10)
        assert got == ["snapshot text\n"]
    assert stat.S_ISFIFO(fifo.stat().st_mode) and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe", "stdout"]


def test_a_pipe_nobody_reads_is_an_error_not_a_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "READER_WAIT_SECONDS", 0.2)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(UsageError, match=r"no process reads this pipe \(waited 0.2 s"):
        store.write_atomic(fifo, "x", force=True)
    assert time.monotonic() - started < 5
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_reader_that_opens_the_pipe_late_still_gets_the_text(tmp_path: Path) -> None:
    """`mkfifo p; gzip < p > s.gz & envguard snapshot --out p`: the reader may open the pipe
    after envguard first tries it (a CI run failed on exactly this race)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    later = threading.Timer(0.3, lambda: got.append(fifo.read_text(encoding="utf-8")))
    later.start()
    store.write_atomic(fifo, "snapshot text\n", force=False)
    later.join(10)
    assert got == ["snapshot text\n"]


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_a_character_device_is_written_into(tmp_path: Path) -> None:
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    store.check_target(null, force=False)  # /dev/null "already exists": no error
    store.write_atomic(null, "discarded", force=True)
    assert stat.S_ISCHR(null.stat().st_mode)


def test_a_socket_is_refused(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        with pytest.raises(UsageError, match="not a regular file, a pipe or a character device"):
            store.write_atomic(path, "x", force=True)


def test_a_pipe_swapped_for_a_link_to_a_file_while_waiting_is_not_written_into(
    tmp_path: Path,
) -> None:
    """While envguard waits for a reader, the pipe is replaced by a link to someone's
    file: that file is neither written into (it was opened without truncation: the snapshot
    over its first bytes) nor replaced."""
    victim = tmp_path / "victim"
    victim.write_text("PRECIOUS\n" * 1000)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def swap() -> None:
        fifo.unlink()
        fifo.symlink_to(victim)

    timer = threading.Timer(0.3, swap)
    timer.start()
    with pytest.raises(UsageError, match="no longer a pipe or a device"):
        store.write_atomic(fifo, "snapshot text\n", force=False)
    timer.join(10)
    assert victim.read_text() == "PRECIOUS\n" * 1000


def test_a_link_to_a_closed_descriptor_is_refused_not_replaced(tmp_path: Path) -> None:
    """`--out /dev/stdout --force` with standard output closed: /dev/stdout leads to
    /proc/self/fd/1, which is not there, and a rename would put a file where the link was
    (as root, /dev/stdout itself, for everyone)."""
    fd = os.open(os.devnull, os.O_RDONLY)
    os.close(fd)  # a descriptor number that is closed now
    link = tmp_path / "stdout"
    link.symlink_to(f"/proc/self/fd/{fd}")
    for force in (False, True):
        with pytest.raises(UsageError, match="is not there"):
            store.write_atomic(link, "snapshot text\n", force=force)
    assert link.is_symlink() and os.readlink(link) == f"/proc/self/fd/{fd}"


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm here")
def test_a_new_file_in_dev_shm_is_written(tmp_path: Path) -> None:
    """Scratch space on tmpfs is a normal place for a snapshot: only a missing device or a
    link into /proc is refused."""
    import uuid

    path = Path("/dev/shm") / f"envguard-test-{uuid.uuid4().hex}.json"
    try:
        store.write_atomic(path, "{}\n", force=False)
        assert path.read_text() == "{}\n"
    finally:
        path.unlink(missing_ok=True)


_JSON = json_values(max_leaves=40)


@settings(max_examples=300, deadline=None)
@given(_JSON)
def test_a_snapshot_is_written_as_json_writes_it_indented(value: object) -> None:
    """store.indented is json.dumps(indent=2, sort_keys=True) character for character
    (snapshots diff in git against those an older envguard wrote), only faster."""
    assert store.indented(value) == json.dumps(value, indent=2, sort_keys=True, allow_nan=False)


@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), {"a": (1, 2)}, {1: "one"}, [True, 1, 1.0, -0.0]]
)
def test_what_json_writes_otherwise_is_left_to_it(value: object) -> None:
    """A tuple, a key that is not a string, nan: json.dumps writes it (or refuses it) as
    ever."""
    try:
        expected: object = json.dumps(value, indent=2, sort_keys=True, allow_nan=False)
    except ValueError as exc:
        expected = str(exc)
    try:
        found: object = store.indented(value)
    except ValueError as exc:
        found = str(exc)
    assert found == expected
