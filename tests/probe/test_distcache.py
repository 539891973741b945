"""The distribution cache on the target: an unchanged venv is neither parsed nor hashed
again, and any change to what a record was read from (a rebuilt wheel of the same version,
a file rewritten in place with its mtime put back, a file added to the .dist-info) is read
afresh; a damaged, planted or unwritable cache is ignored (kept RECORD rows: when their
checksum disagrees)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from envguard.probe.payload import probe_payload
from envguard.testing import make_wheel
from factories import (
    DIST_CACHE,
    cache_file,
    make_dist_info,
    make_venv,
    read_cache,
    uv_install,
    write_cache,
)

CACHE = DIST_CACHE


def shard(xdg: Path) -> Path:
    """The one per-venv file the probe of the ``venv`` fixture writes."""
    return cache_file(xdg)


def probe(venv: Path, env: dict[str, str], **args: Any) -> dict[str, dict[str, Any]]:
    """Every package record the probe reports, by name. Records are kept however recently
    their files changed (the venvs here are seconds old), unless ``args`` say otherwise."""
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-I", "-S", "-"],
        input=probe_payload({"default_caches": False, "cache_quiet_seconds": 0, **args}),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    report = json.loads(proc.stdout)
    assert not report["warnings"], report["warnings"]
    return {p["name"]: p for p in report["packages"]}


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    wh = tmp_path / "wh"
    make_wheel(wh, "alpha", "1.0", requires=["beta>=2"])
    make_wheel(wh, "beta", "2.0")
    venv = tmp_path / "venv"
    make_venv(venv)
    uv_install(venv, wh, "alpha==1.0", "beta==2.0")
    return venv


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}


def site(venv: Path) -> Path:
    return next((venv / "lib").glob("python*/site-packages"))


def test_the_cache_gives_the_same_records_and_catches_a_rebuild(
    venv: Path, env: dict[str, str], tmp_path: Path
) -> None:
    cold = probe(venv, env)
    assert shard(tmp_path / "xdg").is_file()
    warm = probe(venv, env)
    assert warm == cold == probe(venv, env, fingerprint_cache=False)
    assert warm["alpha"]["requires"] == ["beta>=2"] and warm["alpha"]["installer"] == "uv"
    # A rebuilt wheel, same version: reinstalled, so its .dist-info is new and read again.
    wh = tmp_path / "wh2"
    make_wheel(wh, "alpha", "1.0", salt="rebuilt")
    uv_install(venv, wh, "alpha==1.0", extra=["--reinstall"])
    after = probe(venv, env)
    assert after["alpha"]["fingerprint"] != cold["alpha"]["fingerprint"]
    assert after["beta"] == cold["beta"]


@pytest.mark.parametrize("name", ["METADATA", "INSTALLER", "RECORD", "direct_url.json"])
def test_a_file_rewritten_in_place_with_its_mtime_put_back_is_read_again(
    tmp_path: Path, env: dict[str, str], name: str
) -> None:
    """The same size, in place (the folder's listing and mtime unchanged), the file's mtime
    restored: its ctime still moved, and the record is read afresh."""
    venv = tmp_path / "venv"
    make_venv(venv)
    info = make_dist_info(
        site(venv),
        "foo",
        "1.0",
        record="foo/__init__.py,sha256=AAAA,1\n",
        direct_url='{"url": "https://example.com/foo-1.0.tar.gz", "archive_info": {}}',
    )
    before = probe(venv, env)["foo"]
    assert probe(venv, env)["foo"] == before  # from the cache
    new = {
        "METADATA": ("Version: 1.0", "Version: 9.9"),
        "INSTALLER": ("pip", "uvv"),
        "RECORD": ("AAAA", "ZZZZ"),
        "direct_url.json": ("example.com", "elsewhere.x"),
    }[name]
    path = info / name
    stat = path.stat()
    folder = info.stat()
    text = path.read_text()
    assert new[0] in text
    with open(path, "r+") as fh:
        fh.write(text.replace(*new))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    os.utime(info, ns=(folder.st_atime_ns, folder.st_mtime_ns))
    after = probe(venv, env)["foo"]
    assert after != before
    assert after == probe(venv, env, fingerprint_cache=False)["foo"]


def test_a_file_added_to_the_dist_info_is_seen(venv: Path, env: dict[str, str]) -> None:
    before = probe(venv, env)
    assert before["beta"]["requested"] is True
    (info,) = site(venv).glob("beta-*.dist-info")
    (info / "REQUESTED").unlink()
    assert probe(venv, env)["beta"]["requested"] is False
    (info / "direct_url.json").write_text('{"url": "file:///src/beta", "dir_info": {}}')
    assert probe(venv, env)["beta"]["direct_url"] == {"url": "file:///src/beta", "dir_info": {}}


DAMAGE = [
    "garbage",
    "types",
    "fifo",
    "unwritable",
    "old-shape",
    "cut short",
    "no header",
    "a malformed code object",
    "a direct_url JSON cannot hold",
    "a direct_url holding itself",
    "a direct_url of shared lists",
    "an entry with more fields",
]


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_or_unwritable_cache_is_ignored(
    venv: Path, tmp_path: Path, env: dict[str, str], damage: str
) -> None:
    """Whatever the cache file holds, the probe answers what it reads (the cache is read
    with marshal, which can give any of its types, nest them or share them), and writes
    the file afresh."""
    import marshal
    import struct

    xdg = tmp_path / "xdg"
    honest = probe(venv, env, fingerprint_cache=False)
    if damage == "unwritable":  # a file where the cache folder would be (root ignores modes)
        (xdg / CACHE).parent.mkdir(parents=True, exist_ok=True)
        (xdg / CACHE).write_text("not a folder")
    else:
        probe(venv, env)
        path = shard(xdg)
        data = read_cache(path)
        sealed = path.read_bytes()
        path.unlink()
        if damage == "garbage":
            path.write_bytes(b"\x00{not marshal" * 100)
        elif damage == "types":
            for held in data["dists"].values():
                held["dist"]["requires"] = "beta"
                held["dist"]["fingerprint"] = "not-a-hash"
            write_cache(path, {"fingerprints": {"k": 5}, "dists": data["dists"]})
        elif damage == "old-shape":  # the flat RECORD-key -> fingerprint file of v2
            write_cache(path, {"/x/RECORD\x001": "0" * 64})
        elif damage == "fifo":
            os.mkfifo(path)
        elif damage == "cut short":
            path.write_bytes(sealed[: len(sealed) // 2])
        elif damage == "no header":
            path.write_bytes(marshal.dumps(data, 2))
        elif damage == "a malformed code object":  # marshal.loads raises SystemError
            code = marshal.dumps(compile("1", "x", "exec"))
            at = code.find(b"\xda\x01x")  # its file name, made an int
            write_cache(path, None)
            body = code[:at] + b"\xe9" + struct.pack("<i", 7) + code[at + 3 :]
            path.write_bytes(b"envguard-dists\0" + b"%016x" % len(body) + body)
        elif damage.startswith("a direct_url"):
            url: Any = {"url": b"bytes", "x": {1, 2}}
            if damage == "a direct_url holding itself":
                url = {"url": "file:///x"}
                url["self"] = url
            elif damage == "a direct_url of shared lists":
                url = []
                for _ in range(60):  # 2**60 leaves when walked, a few bytes shared
                    url = [url, url]
                url = {"url": "file:///x", "tree": url}
            for held in data["dists"].values():
                held["dist"]["direct_url"] = url
            write_cache(path, data, version=4)
        elif damage == "an entry with more fields":
            for held in data["dists"].values():
                held["junk"] = [b"x", {1, 2}]
            write_cache(path, data, version=4)
    assert probe(venv, env) == honest
    if damage not in ("fifo", "unwritable"):  # written afresh, as the probe reads it
        entries = read_cache(shard(xdg))["dists"].values()
        assert entries and all(entry.keys() == {"stamp", "present", "dist"} for entry in entries)
        assert all(type(e["dist"]["direct_url"]) in (dict, type(None)) for e in entries)
        assert all("self" not in (e["dist"]["direct_url"] or {}) for e in entries)


def test_a_planted_record_for_another_folder_is_never_used(
    venv: Path, tmp_path: Path, env: dict[str, str]
) -> None:
    """Records are kept under their folder's path and stamp: a record planted under another
    path, or with another stamp, changes nothing."""
    honest = probe(venv, env, fingerprint_cache=False)
    probe(venv, env)
    path = shard(tmp_path / "xdg")
    data = read_cache(path)
    planted = {}
    for folder, held in data["dists"].items():
        forged = {**held, "dist": {**held["dist"], "version": "6.6.6"}}
        planted[folder] = {**forged, "stamp": held["stamp"] + "0"}
        planted["/elsewhere/" + os.path.basename(folder)] = forged
    write_cache(path, {**data, "fingerprints": {}, "dists": planted})
    assert probe(venv, env) == honest
    # The control: under its own folder and stamp a record is taken as it is, unread.
    held = {f: {**h, "dist": {**h["dist"], "version": "6.6.6"}} for f, h in data["dists"].items()}
    write_cache(path, {**data, "fingerprints": {}, "dists": held})
    assert {p["version"] for p in probe(venv, env).values()} == {"6.6.6"}


def test_each_venv_reads_only_its_own_small_file_and_old_ones_are_pruned(
    venv: Path, tmp_path: Path, env: dict[str, str]
) -> None:
    """One shared file grew with every venv ever probed (5 MB after a test run) and took
    longer to load than reading: each venv has its own file, and there are at most 256.
    Earlier versions' files are removed; of the JSON files the last one kept, only this
    venv's (another venv's gives its verdicts when that venv is probed)."""
    xdg = tmp_path / "xdg"
    folder = xdg / CACHE
    folder.mkdir(mode=0o700, parents=True)
    folder.parent.chmod(0o700)  # as the probe makes it, whatever the umask
    probe(venv, env)
    (own,) = folder.glob("*.bin")
    legacy = xdg / "envguard" / "fingerprints-v1.json"
    legacy.write_text(json.dumps({f"/gone/{i}/RECORD": "0" * 64 for i in range(1000)}))
    v2 = xdg / "envguard" / "fingerprints-v2"
    v2.mkdir()
    (v2 / "0123.json").write_text("{}")
    v3 = xdg / "envguard" / "dists-v3"
    v3.mkdir()
    (v3 / own.name.replace(".bin", ".json")).write_text("{}")  # this venv's, as v3 kept it
    (v3 / "0123.json").write_text("{}")  # another venv's
    own.unlink()
    for made in (legacy, v2 / "0123.json", *v3.iterdir()):  # 0600 and 0700, as made
        made.chmod(0o600)
    v2.chmod(0o700)
    v3.chmod(0o700)
    for i in range(300):  # other venvs' files, older than this run's
        other = folder / f"{i:032x}.bin"
        other.write_bytes(b"")
        os.utime(other, ns=(i, i))
    probe(venv, env)
    files = sorted(folder.glob("*.bin"))
    assert len(files) == 256 and not legacy.exists() and not v2.exists()
    assert [f.name for f in v3.iterdir()] == ["0123.json"]
    mine = [f for f in files if f.stat().st_size]
    assert len(mine) == 1 and len(read_cache(mine[0])["dists"]) == 2
    assert not (folder / f"{0:032x}.bin").exists()  # the oldest went first


def test_a_kept_record_is_given_back_as_json_would_give_it(tmp_path: Path) -> None:
    """Each reader checks what it kept as JSON gave it back (lists, never tuples): marshal
    keeps a tuple, and a reader finding one reads its file again at every probe."""
    from envguard.probe.payload import local_package

    distcache = local_package().distcache
    folder = str(tmp_path / "xdg" / "envguard" / "dists-v4")
    shared = ["x"]
    record = {
        "preloads": [("cudnn", ("a", "b")), ("nccl", ())],
        "eager": True,
        "keys": {1: shared, None: shared, 2.5: [], False: 0},
    }
    cache = distcache.DistCache(folder, ["/v/site"], code="k", quiet=0)
    cache.keep_lib("/lib.so", "1,2,3,4,5", record)
    cache.save()
    again = distcache.DistCache(folder, ["/v/site"], code="k", quiet=0)
    held = again.lib("/lib.so", "1,2,3,4,5")
    assert held == {**json.loads(json.dumps(record)), "stamp": "1,2,3,4,5"}
    assert held is not None and held["keys"]["1"] is not held["keys"]["null"]  # two objects


def test_an_earlier_envguards_json_file_gives_its_verdicts_once(tmp_path: Path) -> None:
    """After an upgrade, the JSON file the last format kept for this venv gives its
    verdicts (a file's hash, a folder's bytecode), which no code reads otherwise, and no
    other record (those are tied to the code that read them); once this venv's cache is
    written, that JSON file is gone. One of another user's (or others can write) is not
    read."""
    from envguard.probe.payload import local_package

    distcache = local_package().distcache
    base = tmp_path / "xdg" / "envguard"
    folder = base / "dists-v4"
    sites = ["/v/site"]
    name = distcache.DistCache(str(folder), sites, code="new", quiet=0).path
    assert name is not None and name.endswith(".bin")
    v3 = base / "dists-v3"
    v3.mkdir(mode=0o700, parents=True)
    base.chmod(0o700)
    earlier = v3 / (Path(name).name[: -len(".bin")] + ".json")
    verdicts = {
        "code": "old",
        "verdicts": distcache.VERDICTS,
        "verified": {"/v/site/a.py\0sha256=AA\x001,2,3,4": 1},
        "pycdirs": {"/v/site/a/__pycache__\x001,2,3": ["a.cpython-311.pyc", "0" * 32]},
        "dists": {"/v/site/a-1.dist-info": {"stamp": "1", "present": [], "dist": {}}},
    }
    earlier.write_text(json.dumps(verdicts))
    earlier.chmod(0o600)
    cache = distcache.DistCache(str(folder), sites, code="new", quiet=0)
    assert cache.verified == verdicts["verified"] and cache.pycdirs == verdicts["pycdirs"]
    assert cache.dists == {}
    earlier.chmod(0o622)  # others can write it: not read
    assert distcache.DistCache(str(folder), sites, code="new", quiet=0).verified == {}
    earlier.chmod(0o600)
    (key,) = verdicts["verified"]
    assert cache.was_verified(key)  # used by this run: kept
    cache.save()
    assert not earlier.exists() and not v3.exists()
    assert read_cache(Path(name))["verified"] == verdicts["verified"]


def kept(xdg: Path) -> dict[str, Any]:
    """The kept records of the one venv file, by folder name (none: no file)."""
    if not list((xdg / CACHE).glob("*.bin")):
        return {}
    held: dict[str, Any] = read_cache(shard(xdg))["dists"]
    return {os.path.basename(folder): entry for folder, entry in held.items()}


def test_a_record_of_files_that_changed_within_a_minute_is_not_kept(
    venv: Path, tmp_path: Path, env: dict[str, str]
) -> None:
    """A write through a shared mmap (or on a file system with coarse times) can change a
    file without moving its times again: like git's racily clean entries, a record is kept
    only once its files have been still for a while."""
    honest = probe(venv, env, fingerprint_cache=False)
    assert probe(venv, env, cache_quiet_seconds=60) == honest
    assert kept(tmp_path / "xdg") == {}  # written seconds ago
    assert probe(venv, env) == honest
    assert len(kept(tmp_path / "xdg")) == 2


def test_another_envguards_records_are_not_used(
    venv: Path, tmp_path: Path, env: dict[str, str]
) -> None:
    """Each file is tied to the probe's code: another version may read metadata otherwise
    (a fixed header parser must not be served the old one's records)."""
    honest = probe(venv, env, fingerprint_cache=False)
    probe(venv, env)
    path = shard(tmp_path / "xdg")
    data = read_cache(path)
    for held in data["dists"].values():
        held["dist"]["version"] = "6.6.6"
    write_cache(path, {**data, "code": "another envguard"})
    assert probe(venv, env) == honest


def test_nothing_reached_through_a_symlink_is_kept(tmp_path: Path, env: dict[str, str]) -> None:
    """A linked .dist-info flipped to another folder and back leaves every stamp as it was.
    (One linked out of the venv is not read at all: tests/probe/test_loaded.py.)"""
    venv = tmp_path / "venv"
    make_venv(venv)
    real = make_dist_info(venv / "elsewhere", "foo", "1.0", record="foo/x.py,sha256=AA,1\n")
    (site(venv) / real.name).symlink_to(real)
    assert probe(venv, env)["foo"]["version"] == "1.0"
    assert kept(tmp_path / "xdg") == {}


@pytest.mark.parametrize("text", ["1e400", '["x"]', "NaN", "{"])
def test_a_direct_url_that_is_no_json_object_is_a_warning(
    tmp_path: Path, env: dict[str, str], text: str
) -> None:
    venv = tmp_path / "venv"
    make_venv(venv)
    make_dist_info(site(venv), "foo", "1.0", record="foo/x.py,sha256=AA,1\n", direct_url=text)
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-I", "-S", "-"],
        input=probe_payload({"default_caches": False}),
        capture_output=True, text=True, env=env, timeout=120, check=True,
    )  # fmt: skip
    report = json.loads(proc.stdout)
    assert [p["direct_url"] for p in report["packages"]] == [None]
    assert any("direct_url.json is not" in w for w in report["warnings"])


@pytest.mark.parametrize(
    "forged",
    [
        {"fingerprint": int("9" * 64)},
        {"requires": ["beta\nInjected: line"]},
        {"requires": ["beta>=2", "\u202egamma"]},
        {"requires": ["beta>=2", 7]},
        {"requires": ["beta>=2", "b" * 513]},
        {"display_name": "x" * 600},
        {"direct_url": [1]},
        {"name": "not-its-name"},
    ],
)
def test_a_kept_record_that_could_not_have_been_read_is_read_again(
    venv: Path, tmp_path: Path, env: dict[str, str], forged: dict[str, Any]
) -> None:
    """A cache file edited by hand, under the right stamps: the record is read again, the
    report stays valid (a bad one would fail the snapshot)."""
    honest = probe(venv, env, fingerprint_cache=False)
    probe(venv, env)
    path = shard(tmp_path / "xdg")
    data = read_cache(path)
    for entry in data["dists"].values():
        entry["dist"].update(forged)
    write_cache(path, data)
    assert probe(venv, env) == honest


def test_a_cache_made_under_umask_000_is_private_and_kept(tmp_path: Path) -> None:
    """Some CI images run with umask 000: the folders the cache makes are still 0700 (a
    makedirs parent was 0777 there, and a cache that others could write is refused)."""
    from envguard.probe.payload import local_package

    folder = tmp_path / "xdg" / CACHE
    cache = local_package().distcache.DistCache(str(folder), ["/site"], code="k", quiet=0)
    cache.used_fingerprints = {"/site/a.dist-info/RECORD\0stamp": "0" * 64}
    old = os.umask(0)
    try:
        cache.save()
    finally:
        os.umask(old)
    for made in (folder, folder.parent):
        assert made.stat().st_mode & 0o777 == 0o700
    (kept_file,) = folder.glob("*.bin")
    assert kept_file.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    "forge",
    [
        "an empty path",
        "a size that is no number",
        "a size in other digits",
        "a path out of site-packages",
        "the folder above site-packages",
        "no checksum (an older cache's shape)",
        "no folders (an older cache's shape)",
        "a folder left out",
        "a folder added",
    ],
)
def test_kept_record_rows_edited_by_hand_are_read_again(
    venv: Path, tmp_path: Path, env: dict[str, str], forge: str
) -> None:
    """RECORD rows kept under the right stamps but edited by hand, their checksum left as
    it was: the RECORD is read again and the check's answer is the honest one."""
    honest = probe(venv, env, fingerprint_cache=False)
    probe(venv, env)
    path = shard(tmp_path / "xdg")
    data = read_cache(path)
    (key,) = [k for k in data["rows"] if "alpha-1.0.dist-info" in k and "|scripts" not in k]
    from envguard.probe.payload import local_package

    rows_sum = local_package().distcache.rows_sum
    paths, sizes, hashes, folders, checksum = data["rows"][key]
    first = paths.split("\n")[0]
    data["rows"][key] = {
        "an empty path": [
            "\n" + paths, "0," + sizes, "sha256=AA\n" + hashes, folders, checksum,
        ],
        "a size that is no number": [
            paths, sizes.replace(sizes.split(",")[0], "1x", 1), hashes, folders, checksum,
        ],
        "a size in other digits": [paths, "\u0661" + sizes, hashes, folders, checksum],
        "a path out of site-packages": [
            paths.replace(first, "../" + first, 1), sizes, hashes, folders, checksum,
        ],
        "the folder above site-packages": [
            paths.replace(first, "..", 1), sizes, hashes, folders, checksum,
        ],
        "no checksum (an older cache's shape)": [paths, sizes, hashes, folders],
        "no folders (an older cache's shape)": [
            paths, sizes, hashes, rows_sum([paths, sizes, hashes]),
        ],
        "a folder left out": [paths, sizes, hashes, "", checksum],
        "a folder added": [paths, sizes, hashes, folders + "\nalpha/elsewhere", checksum],
    }[forge]  # fmt: skip
    write_cache(path, data)
    assert probe(venv, env)["alpha"]["on_disk"] == honest["alpha"]["on_disk"]


@pytest.mark.parametrize("column", [0, 1, 2, 3])
def test_kept_rows_are_given_back_only_as_they_were_kept(tmp_path: Path, column: int) -> None:
    """What keep_record_rows kept is what record_rows gives back, in another run too, a
    path holding a lone surrogate (RECORD read with surrogateescape) included, and only to
    a reader of as many texts as were kept; a change to any of its texts (a path, a size, a
    hash, a folder) leaves the checksum behind: the rows are not taken."""
    from envguard.probe.payload import local_package

    distcache = local_package().distcache
    key = "/v/site/a-1.dist-info/RECORD\x001,2,3,4,5"
    rows = ["a/x.py\na/\udcff.so", "12,34", "sha256=AA\nsha256=BB", "a"]
    cache = distcache.DistCache(str(tmp_path / "c"), ["/v/site"], code="t", quiet=0)
    cache.keep_record_rows(key, rows)
    cache.files_checked = True
    cache.save()
    again = distcache.DistCache(str(tmp_path / "c"), ["/v/site"], code="t", quiet=0)
    assert again.record_rows(key, 4) == rows
    assert again.record_rows(key) is None  # a reader of three texts: not its shape
    edited = list(again.rows[key])
    edited[column] = edited[column].replace("a", "b", 1).replace("1", "7", 1)
    again.rows[key] = edited
    assert again.record_rows(key, 4) is None


def test_a_run_that_checks_nothing_keeps_only_the_sound_bytecode_entries(
    tmp_path: Path,
) -> None:
    """Kept bytecode entries are told sound when looked up; a run that looks none up
    (``--verify off``) keeps them as they were, but for those of another shape (and keys
    that are no text), which it drops when it writes the file."""
    from envguard.probe.payload import local_package

    distcache = local_package().distcache
    folder = tmp_path / "xdg" / "envguard" / "dists-v4"
    sites = ["/v/site"]
    first = distcache.DistCache(str(folder), sites, code="c", quiet=0)
    assert first.path is not None
    sound = {"/v/site/a/__pycache__\x001,2,3": ["a.cpython-311.pyc", "0" * 32]}
    first.used_pycdirs = {**sound, "/v/site/b\x001": 5, 7: ["x", "0" * 32]}  # (a forger's)
    first.files_checked = True
    first.save()
    assert set(read_cache(Path(first.path))["pycdirs"]) == {*sound, "/v/site/b\x001", 7}
    unchecked = distcache.DistCache(str(folder), sites, code="c", quiet=0)
    unchecked.keep_fingerprint("/v/site/a-1.dist-info/RECORD\x001,2,3,4,5", "f" * 64)
    unchecked.save()  # something new learned: written, the entries kept as they were
    assert read_cache(Path(first.path))["pycdirs"] == sound


def test_the_check_reads_the_stamps_the_distribution_scan_took(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The installed-files check keys a RECORD and times its wheel's unpacking by the stamps
    the distribution scan took of its .dist-info (not stamped twice): the same key and
    times as stamping afresh gives, whether the record was read or kept; a .dist-info
    holding a symlink, or one that cannot be listed (another user's, mode 0711), is
    stamped afresh, as before."""
    from envguard.probe.payload import local_package

    target = local_package()
    distcache, dists, installed = target.distcache, target.dists, target.installed
    site = tmp_path / "site"
    (site / "alpha").mkdir(parents=True)
    (site / "alpha" / "__init__.py").write_text("x = 1\n")
    for name, wheel in (("alpha", True), ("beta", False)):
        info = make_dist_info(site, name, "1.0", record=f"{name}/__init__.py,,6\n")
        if wheel:
            (info / "WHEEL").write_text("Wheel-Version: 1.0\n")
            os.utime(info / "WHEEL", ns=(15 * 10**17, 15 * 10**17))
            os.utime(info / "METADATA", ns=(10**18, 10**18))
    gamma = make_dist_info(site, "gamma", "1.0", record="alpha/__init__.py,,6\n")
    (gamma / "WHEEL").symlink_to(gamma / "METADATA")
    folder = str(tmp_path / "xdg")

    def plan_of(cache: Any) -> tuple[Any, list[dict[str, Any]]]:
        packages = dists.scan_packages([str(site)], [], cache)
        return installed.prepare([dict(p) for p in packages], "quick", [], cache), packages

    for kept in (False, True):  # read, then kept
        cache = distcache.DistCache(folder, [str(site)], code="k", quiet=0)
        assert bool(cache.dists) is kept and bool(cache.rows) is kept
        plan, packages = plan_of(cache)
        fresh, _ = plan_of(None)
        (ours,), (theirs,) = plan.sites.values(), fresh.sites.values()
        assert ours.unpacked == theirs.unpacked and ours.installed == theirs.installed
        for dist in packages:
            info = str(site / dist["metadata_dir"])
            assert cache.record_key(info) == distcache.record_key(info + "/RECORD")
            stamps = cache.stamps_of(info)
            assert (stamps is None) is (dist["name"] == "gamma")
            assert stamps is None or ("WHEEL" in stamps) is (dist["name"] == "alpha")
        alpha = next(i for i, p in enumerate(packages) if p["name"] == "alpha")
        assert ours.unpacked[alpha] == 15 * 10**17  # WHEEL's: the later, before RECORD's
        cache.save()
    listdir = os.listdir

    def unlistable(path: Any) -> list[str]:
        if str(path).endswith("alpha-1.0.dist-info"):
            raise PermissionError(13, "Permission denied", str(path))
        return listdir(path)

    monkeypatch.setattr(dists.os, "listdir", unlistable)
    plan, packages = plan_of(distcache.DistCache(folder + "2", [str(site)], code="k", quiet=0))
    alpha = next(i for i, p in enumerate(packages) if p["name"] == "alpha")
    (ours,) = plan.sites.values()
    assert ours.unpacked[alpha] == 15 * 10**17  # not RECORD's: METADATA and WHEEL stamped


def test_a_file_added_where_nothing_was_added_before_is_found(
    venv: Path, env: dict[str, str]
) -> None:
    """A package folder written after the install (Python's __pycache__, an editor's swap
    file gone) is listed once; its "nothing added" is kept under the folder's stamp, so a
    module planted there later (the folder's stamp moves, RECORD's does not) is listed
    and named."""
    folder = site(venv) / "alpha"
    (folder / "notes.txt").write_text("gone soon\n")
    (folder / "notes.txt").unlink()  # the folder's mtime is now later than the install
    for _ in range(2):  # the second run takes the kept "nothing added"
        assert probe(venv, env, verify="quick")["alpha"]["on_disk"]["added"] == []
    (folder / "evil.py").write_text("import os\n")
    assert probe(venv, env, verify="quick")["alpha"]["on_disk"]["added"] == ["alpha/evil.py"]
