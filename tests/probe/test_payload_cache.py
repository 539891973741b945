"""The probe's packed sources kept between runs: the kept payload is byte for byte the one
built from the sources, an edited source makes a new one (a new code key), and a kept file
that is damaged, foreign or not this user's own is never used (rebuilt instead)."""

from __future__ import annotations

import base64
import os
import shutil
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from envguard.probe import payload, payload_cache

ARGS = {"default_caches": False, "files": []}
SRC = Path(payload.__file__).parent.parent  # envguard/


def forget() -> None:
    """What this process remembers of the payload (as a new envguard process starts)."""
    for cached in (
        payload._stamp,
        payload.target_sources,
        payload.entry_sources,
        payload._kept,
        payload.code_key,
        payload.packed_sources,
    ):
        cached.cache_clear()


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of envguard's probe sources the payload is built from, and a cache folder of
    the test's own."""
    copy = tmp_path / "envguard"
    shutil.copytree(SRC / "probe", copy / "probe")
    for name in payload.SHARED_MODULES:
        shutil.copy2(SRC / f"{name}.py", copy / f"{name}.py")
    monkeypatch.setattr(payload, "_HERE", str(copy / "probe"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    # A checkout made a moment ago is as settled as one made last year (tested below).
    monkeypatch.setattr(payload_cache, "_SETTLED_NS", 0)
    forget()
    yield copy
    forget()


def kept_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "xdg" / "envguard").glob("payload-main-*.txt"))


def built(monkeypatch: pytest.MonkeyPatch) -> str:
    """The payload as it is built from the sources, nothing kept read or written."""
    with monkeypatch.context() as nowhere:
        nowhere.setenv("XDG_CACHE_HOME", "relative")  # no cache folder
        forget()
        text = payload.probe_payload(ARGS)
    forget()
    return text


def unpacked(text: str) -> list[str]:
    packed = text.split("_envguard_install('envguard_probe', ")[1].split(",")[0]
    return zlib.decompress(base64.b64decode(packed.strip("'"))).decode().split("\0")


def test_the_kept_payload_is_the_built_one(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = payload.probe_payload(ARGS)
    (kept,) = kept_files(tmp_path)
    assert kept.stat().st_mode & 0o777 == 0o600
    assert kept.parent.stat().st_mode & 0o777 == 0o700
    forget()
    assert payload._kept("main") is not None  # a new process finds it ...
    assert payload.probe_payload(ARGS) == first == built(monkeypatch)  # ... the same bytes


def test_the_kept_payload_is_used_without_building(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = payload.probe_payload(ARGS)
    forget()

    def no_build(entry: str) -> tuple[tuple[str, ...], str]:
        raise AssertionError("built again")

    monkeypatch.setattr(payload, "build_packed", no_build)
    assert payload.probe_payload(ARGS) == first


@pytest.mark.parametrize("how", ["appended", "same size, mtime put back", "replaced"])
def test_an_edited_source_gives_a_new_payload(tree: Path, tmp_path: Path, how: str) -> None:
    old_payload, old_key = payload.probe_payload(ARGS), payload.code_key("main")
    module = tree / "probe" / "target" / "env.py"
    text = module.read_text()
    before = module.stat()
    if how == "appended":
        module.write_text(text + "# edited\n")
    elif how == "same size, mtime put back":
        edited = text.replace("\n", "#", 1)  # one byte for another, in place
        with open(module, "r+") as f:
            f.write(edited)
        os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns))
    else:
        module.unlink()
        module.write_text(text.replace("\n", "\n# replaced\n", 1))
        os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns))
    forget()
    new_payload, new_key = payload.probe_payload(ARGS), payload.code_key("main")
    assert new_key != old_key
    assert new_payload != old_payload
    names = payload.packed_sources("main")[0]
    assert unpacked(new_payload)[names.index("env")] == module.read_text()
    forget()
    assert payload.probe_payload(ARGS) == new_payload  # kept under its own stamp
    assert len(kept_files(tmp_path)) == 2


DAMAGE = [
    "truncated",
    "one byte of the sources changed",
    "another install's stamp",
    "another key",
    "names out of order",
    "a name not a target module",
    "binary garbage",
    "writable by the group",
    "another user's",
    "a symlink to a good copy",
    "a folder",
    "the folder writable by all",
]


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_or_foreign_file_is_rebuilt(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    honest = payload.probe_payload(ARGS)
    (kept,) = kept_files(tmp_path)
    data = kept.read_text()
    head, body = data.split("\n", 4)[:4], data.split("\n", 4)[4]
    fields = head[2].split(" ")
    if damage == "truncated":
        data = data[: len(data) - 1000]
    elif damage == "one byte of the sources changed":
        i = len(data) - 500
        data = data[:i] + ("A" if data[i] != "A" else "B") + data[i + 1 :]
    elif damage == "another install's stamp":
        data = "\n".join([head[0], head[1].replace(";", ";x", 1), *head[2:], body])
    elif damage == "another key":
        fields[1] = "0" * 32
        data = "\n".join([*head[:2], " ".join(fields), head[3], body])
    elif damage == "names out of order":
        data = "\n".join([*head[:3], " ".join(reversed(head[3].split(" "))), body])
    elif damage == "a name not a target module":
        data = "\n".join([*head[:3], head[3] + " os", body])
    kept.unlink()
    if damage == "binary garbage":
        kept.write_bytes(b"\xff\x00" * 100)
    elif damage == "a symlink to a good copy":
        good = tmp_path / "good.txt"
        good.write_text(data)
        good.chmod(0o600)
        kept.symlink_to(good)
    elif damage == "a folder":
        kept.mkdir()
    else:
        kept.write_text(data)
        kept.chmod(0o620 if damage == "writable by the group" else 0o600)
    if damage == "another user's":
        if os.getuid() != 0:
            pytest.skip("giving a file to another user takes root")
        os.chown(kept, 65534, 65534)
    if damage == "the folder writable by all":
        kept.parent.chmod(0o777)
    forget()
    before = kept.lstat()
    assert payload._kept("main") is None
    assert payload.probe_payload(ARGS) == honest == built(monkeypatch)
    if damage in ("a folder", "the folder writable by all"):
        return  # nothing is written where it cannot be trusted
    after = kept.lstat()
    assert (after.st_ino, after.st_mtime_ns) != (before.st_ino, before.st_mtime_ns)
    forget()
    assert payload._kept("main") is not None  # rebuilt, and kept again


def test_no_writable_cache_folder_builds_as_before(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    honest = built(monkeypatch)
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(not_a_folder))
    forget()
    assert payload.probe_payload(ARGS) == honest
    assert payload._kept("main") is None


def test_a_source_changed_a_moment_ago_is_not_kept(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its timestamps may not change with a second edit within their granularity: its
    stamp proves nothing yet (git's racily clean entries)."""
    monkeypatch.setattr(payload_cache, "_SETTLED_NS", 2_000_000_000)
    (tree / "probe" / "target" / "env.py").write_text(
        (tree / "probe" / "target" / "env.py").read_text() + "# now\n"
    )
    payload.probe_payload(ARGS)
    assert kept_files(tmp_path) == []
    old = 1_000_000_000 * 1_000_000_000  # 2001
    for path in payload._built_from():
        os.utime(path, ns=(old, old))  # ctime is now: still not settled
    forget()
    payload.probe_payload(ARGS)
    assert kept_files(tmp_path) == []
