"""torch.compile's key ingredients, read on the target without importing torch or triton."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

import pytest

from factories import load_target, real_report

script = load_target()

# triton_key() as triton 3.8.0 defines it (triton/runtime/cache.py), verbatim but for the
# imports: the reference the probe's digest is held to.
_TRITON_KEY = """
import functools, hashlib, os, sysconfig
from triton import __version__


@functools.lru_cache()
def triton_key():
    import pkgutil
    TRITON_PATH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    contents = []
    # frontend
    with open(__file__, "rb") as f:
        contents += [hashlib.sha256(f.read()).hexdigest()]
    # compiler
    path_prefixes = [
        (os.path.join(TRITON_PATH, "compiler"), "triton.compiler."),
        (os.path.join(TRITON_PATH, "backends"), "triton.backends."),
    ]
    for path, prefix in path_prefixes:
        for lib in pkgutil.walk_packages([path], prefix=prefix):
            with open(lib.module_finder.find_spec(lib.name).origin, "rb") as f:
                contents += [hashlib.sha256(f.read()).hexdigest()]

    # backend
    libtriton_hash = hashlib.sha256()
    ext = sysconfig.get_config_var("EXT_SUFFIX").split(".")[-1]
    with open(os.path.join(TRITON_PATH, "_C", f"libtriton.{ext}"), "rb") as f:
        while True:
            chunk = f.read(1024**2)
            if not chunk:
                break
            libtriton_hash.update(chunk)
    contents.append(libtriton_hash.hexdigest())
    # language
    language_path = os.path.join(TRITON_PATH, 'language')
    for lib in pkgutil.walk_packages([language_path], prefix="triton.language."):
        with open(lib.module_finder.find_spec(lib.name).origin, "rb") as f:
            contents += [hashlib.sha256(f.read()).hexdigest()]
    return f'{__version__}' + '-'.join(contents)
"""

_LIB = "triton/_C/libtriton." + (sysconfig.get_config_var("EXT_SUFFIX") or ".so").split(".")[-1]


def _write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


def make_triton(site: Path, version: str = "3.8.0") -> dict[str, object]:
    """A small triton laid out as the real one is, with a RECORD for libtriton."""
    files = {
        "triton/__init__.py": f"__version__ = {version!r}\n",
        "triton/runtime/__init__.py": "",
        "triton/runtime/cache.py": _TRITON_KEY,
        "triton/compiler/__init__.py": "",
        "triton/compiler/compiler.py": "x = 1\n",
        "triton/compiler/code_generator.py": "y = 2\n",
        "triton/compiler/sub/__init__.py": "",
        "triton/compiler/sub/passes.py": "z = 3\n",
        "triton/compiler/notes.txt": "not a module\n",
        "triton/backends/__init__.py": "",
        "triton/backends/compiler.py": "a = 1\n",
        "triton/backends/nvidia/__init__.py": "",
        "triton/backends/nvidia/compiler.py": "b = 2\n",
        "triton/backends/nvidia/driver.c": "int main;\n",
        "triton/backends/nvidia/include/cuda.h": "/* not a package */\n",
        "triton/language/__init__.py": "",
        "triton/language/core.py": "c = 3\n",
        "triton/language/extra/__init__.py": "",
        "triton/language/extra/libdevice.py": "d = 4\n",
    }
    for rel, text in files.items():
        _write(site / rel, text)
    lib = b"\x7fELF" + b"\0" * 4096
    _write(site / _LIB, lib)
    digest = base64.urlsafe_b64encode(hashlib.sha256(lib).digest()).rstrip(b"=").decode()
    info = site / f"triton-{version}.dist-info"
    _write(info / "RECORD", f"{_LIB},sha256={digest},{len(lib)}\ntriton/__init__.py,,\n")
    return {
        "name": "triton",
        "version": version,
        "location": str(site),
        "metadata_dir": info.name,  # as the probe's scan records it: the folder's name
        "shadowed": False,
    }


def reference_digest(site: Path) -> str:
    """sha256 of triton_key() as triton itself computes it (imported, in a child)."""
    code = (
        "import sys, hashlib; sys.path.insert(0, sys.argv[1]);"
        "from triton.runtime.cache import triton_key;"
        "print(hashlib.sha256(triton_key().encode()).hexdigest())"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-B", "-c", code, str(site)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.strip()


def test_triton_digest_is_the_sha256_of_triton_key(tmp_path: Path) -> None:
    dist = make_triton(tmp_path)
    warnings: list[str] = []
    key = script.triton_key([dist], warnings)
    assert warnings == [] and key["error"] is None
    assert key["version"] == "3.8.0"
    assert key["digest"] == reference_digest(tmp_path)
    # an edit to any module it hashes changes both, alike
    (tmp_path / "triton/language/extra/libdevice.py").write_text("d = 5\n")
    again = script.triton_key([dist], [])
    assert again["digest"] != key["digest"]
    assert again["digest"] == reference_digest(tmp_path)


def test_libtriton_is_taken_at_its_records_word(tmp_path: Path) -> None:
    """Half a GB is not hashed at every snapshot: RECORD's hash of it is used (the
    installed-files check holds the file to it); an edit of the same size is that check's."""
    dist = make_triton(tmp_path)
    before = script.triton_key([dist], [])["digest"]
    lib = tmp_path / _LIB
    lib.write_bytes(b"\x7fELF" + b"\1" * (lib.stat().st_size - 4))
    assert script.triton_key([dist], [])["digest"] == before != reference_digest(tmp_path)


def test_a_libtriton_unlike_its_record_is_hashed_from_disk(tmp_path: Path) -> None:
    dist = make_triton(tmp_path)
    (tmp_path / _LIB).write_bytes(b"\x7fELF rebuilt")
    assert script.triton_key([dist], [])["digest"] == reference_digest(tmp_path)


def test_no_triton_is_none_and_a_missing_key_function_is_said(tmp_path: Path) -> None:
    assert script.triton_key([], []) is None
    dist = make_triton(tmp_path)
    (tmp_path / "triton/runtime/cache.py").write_text("def other():\n    pass\n")
    warnings: list[str] = []
    key = script.triton_key([dist], warnings)
    assert key["digest"] is None and "no triton_key()" in key["error"]
    assert warnings == [key["error"]]


def test_a_hostile_triton_tree_gives_a_note_not_a_hang(tmp_path: Path) -> None:
    dist = make_triton(tmp_path)
    # a module that is a link out of the tree is not read
    (tmp_path / "triton/language/evil.py").symlink_to("/etc/passwd")
    key = script.triton_key([dist], [])
    assert key["digest"] is None and "evil.py" in key["error"]
    (tmp_path / "triton/language/evil.py").unlink()
    clean = script.triton_key([dist], [])["digest"]
    # a FIFO named as a module: never opened (nor by triton: FileFinder finds files only)
    os.mkfifo(tmp_path / "triton/compiler/fifo.py")
    started = time.monotonic()
    key = script.triton_key([dist], [])
    assert time.monotonic() - started < 5
    assert key["digest"] == clean
    (tmp_path / "triton/compiler/fifo.py").unlink()
    # a folder of thousands of entries is not triton's
    crowd = tmp_path / "triton/backends/crowd"
    crowd.mkdir()
    (crowd / "__init__.py").write_text("")
    for i in range(script.TRITON_MODULES + 1):
        (crowd / f"m{i}.txt").touch()
    key = script.triton_key([dist], [])
    assert key["digest"] is None and "entries" in key["error"]


def test_packages_nested_too_deep_are_not_walked(tmp_path: Path) -> None:
    dist = make_triton(tmp_path)
    deep = tmp_path / "triton/language"
    for i in range(script.TRITON_DEPTH + 2):
        deep = deep / f"p{i}"
        deep.mkdir()
        (deep / "__init__.py").write_text("")
    key = script.triton_key([dist], [])
    assert key["digest"] is None and "nested over" in key["error"]


def test_a_linked_triton_folder_is_not_followed(tmp_path: Path) -> None:
    real = tmp_path / "real"
    dist = make_triton(real)
    site = tmp_path / "site"
    site.mkdir()
    (site / "triton").symlink_to(real / "triton")
    key = script.triton_key([{**dist, "location": str(site)}], [])
    assert key["digest"] is None and "not a folder" in key["error"]


# ---- the compiler ---------------------------------------------------------------------------


def test_the_compiler_is_cxx_else_gxx_found_on_path(tmp_path: Path) -> None:
    assert script.compiler_name({}) == ("clang++" if sys.platform == "darwin" else "g++")
    assert script.compiler_name({"CXX": "clang++-18"}) == "clang++-18"
    tool = tmp_path / "my-cxx"
    tool.write_text("#!/bin/sh\necho 'my-cxx 1.2.3'\n")
    tool.chmod(0o755)
    assert script.compiler_path("my-cxx", {"PATH": f"/nowhere:{tmp_path}"}) == str(tool)
    assert script.compiler_path(str(tool), {"PATH": ""}) == str(tool)
    assert script.compiler_path("my-cxx", {"PATH": "/nowhere"}) is None
    record = script.compiler("my-cxx", str(tool), "\nmy-cxx 1.2.3\nCopyright\n")
    assert record == {"name": "my-cxx", "path": str(tool), "version": "my-cxx 1.2.3", "error": None}
    assert script.compiler("my-cxx", None, None)["error"] == "not found on PATH"


def test_a_compiler_that_hangs_is_given_up_on(tmp_path: Path) -> None:
    tool = tmp_path / "slow-cxx"
    tool.write_text("#!/bin/sh\nexec sleep 30\n")
    tool.chmod(0o755)
    started = time.monotonic()
    output = script.finish_tool(script.start_tool([str(tool), "--version"]), timeout=1.0)
    assert time.monotonic() - started < 5
    assert script.compiler("slow-cxx", str(tool), output)["error"] == (
        "no answer to --version (it failed, or took over 5 s)"
    )


def test_what_a_compiler_prints_is_one_safe_line() -> None:
    record = script.compiler("g++\u202e", "/usr/bin/g++", "gcc\x1b[31m 12\u2028evil\n")
    assert record["name"] == "g++?"
    assert record["version"] == "gcc?[31m 12"  # U+2028 ends a line
    assert len(script.compiler("x" * 5000, None, None)["name"]) == 255


def test_capabilities_from_nvidia_smi() -> None:
    assert script.capabilities("9.0\n8.6\n") == ["9.0", "8.6"]
    assert script.capabilities("[N/A]\n\n") == []
    assert script.capabilities(None) == []


# ---- file systems ---------------------------------------------------------------------------

MOUNTINFO = (
    b"22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
    b"40 22 0:50 / /shared rw - nfs4 server:/export rw,vers=4.2\n"
    b"41 40 0:51 / /shared/my\\040cache rw - fuse.sshfs host:/x rw\n"
    b"garbage line\n"
)


def test_the_file_system_of_a_cache_folder() -> None:
    table = script.parse_mountinfo(MOUNTINFO)
    assert script.filesystem("/shared/team/inductor", table) == "nfs4"
    assert script.filesystem("/shared/my cache/triton", table) == "fuse.sshfs"
    assert script.filesystem("/tmp/torchinductor_me", table) == "ext4"
    assert script.mounts(), "this machine's own mountinfo reads"


# ---- who built an inductor cache ------------------------------------------------------------


def entry_bytes(
    torch: str = "2.13.0+cpu", git: str = "cf30153c4c131c8164ee7798e5022d810682e2cb"
) -> bytes:
    """Bytes as an FX graph entry's pickle holds them (strings with opcodes between)."""
    return (
        b"\x80\x04\x95\x8c\x1btorch._inductor.output_code\x94"
        + f"\n# torch version: {torch}\n# torch cuda version: None\n".encode()
        + f"# torch git version: {git}\n\n".encode()
        + b"\x94\x8c\x85[sjldm5hyfytkdkxlfj3fhwi432gtpoqk3r6uo4z3lfs7aiipms3] torch_version: "
        + b"\xef\xbf\xbdM\x10\x94\x8c\x89[ou2myrupfm7jqj7zhckhwr35g4s7cslkzawm6jrbi4dt72allir]"
        + b" system_info[hash]: 44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        + b"\x94\x8cV[c7zj4qytmety6keurs3hsh5wn7foxp3dqx4kym2ucszzcb2ngrf]"
        + b" inductor_config[cpp.cxx]: (None, 'g++')\x94"
    )


def put_entry(root: Path, key: str, data: bytes, name: str = "entry") -> Path:
    path = root / "fxgraph" / key[1:3] / key / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_cache_builds_read_from_fx_graph_entries(tmp_path: Path) -> None:
    put_entry(tmp_path, "fabc", entry_bytes())
    put_entry(tmp_path, "fabd", entry_bytes())
    put_entry(tmp_path, "fxyz", entry_bytes(torch="2.12.0", git="0123456789abcdef"))
    builds = script.cache_builds(str(tmp_path), [])
    assert builds[0] == {
        "torch": "2.13.0+cpu",
        "git_version": "cf30153c4c131c8164ee7798e5022d810682e2cb",
        "torch_key": "sjldm5hyfytkdkxlfj3fhwi432gtpoqk3r6uo4z3lfs7aiipms3",
        "system": "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
        "cxx": "g++",
        "device": None,
        "triton": None,
        "entries": 2,
    }
    assert builds[1]["torch"] == "2.12.0" and builds[1]["entries"] == 1
    assert script.cache_builds(str(tmp_path / "nothing"), []) == []


def test_a_hostile_entry_gives_safe_lines(tmp_path: Path) -> None:
    data = entry_bytes().replace(b"'g++'", "'g++\u202e\u2066x'".encode())
    data = data.replace(b"2.13.0+cpu", b"2.13.0\x1b[2J")
    put_entry(tmp_path, "fabc", data)
    (build,) = script.cache_builds(str(tmp_path), [])
    assert build["cxx"] == "g++??x"
    assert build["torch"] is None  # not a version: not read


def test_a_gpu_entry_names_its_device_and_triton(tmp_path: Path) -> None:
    triton = "3.8.0" + "ab" * 32 + "-" + "cd" * 32
    data = entry_bytes() + (
        b"\x8c\x40[aaaa] system_info[device]: {'name': 'NVIDIA H100 80GB HBM3'}\x94"
        + b"\x8c\x50[bbbb] system_info[version]: {'triton': '"
        + triton.encode()
        + b"', 'cuda': '13.0'}\x94"
    )
    put_entry(tmp_path, "fabc", data)
    (build,) = script.cache_builds(str(tmp_path), [])
    assert build["device"] == "NVIDIA H100 80GB HBM3"
    assert build["triton"] == hashlib.sha256(triton.encode()).hexdigest()


def test_cache_builds_follow_no_link_and_stop_in_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "outside"
    put_entry(outside, "fabc", entry_bytes(torch="6.6.6"))
    cache = tmp_path / "cache"
    put_entry(cache, "fabc", entry_bytes())
    # an entry, a key folder and a shard that are links out are not read
    (cache / "fxgraph/ab/fabc/linked").symlink_to(outside / "fxgraph/ab/fabc/entry")
    (cache / "fxgraph/ab/flink").symlink_to(outside / "fxgraph/ab/fabc")
    (cache / "fxgraph/zz").symlink_to(outside / "fxgraph/ab")
    os.mkfifo(cache / "fxgraph/ab/fabc/fifo")
    builds = script.cache_builds(str(cache), [])
    assert [(b["torch"], b["entries"]) for b in builds] == [("2.13.0+cpu", 1)]
    # many entries: read up to a bound, listed up to another, then a note
    for i in range(12):
        put_entry(cache, f"fk{i:02d}", entry_bytes())
    monkeypatch.setitem(script.cache_builds.__globals__, "ENTRIES_READ", 3)
    monkeypatch.setitem(script.cache_builds.__globals__, "ENTRIES_LISTED", 8)
    warnings: list[str] = []
    builds = script.cache_builds(str(cache), warnings)
    assert builds[0]["entries"] == 3
    assert len(warnings) == 1 and "stopped after 8 entries" in warnings[0]
    # a huge entry is read only up to its cap
    monkeypatch.setitem(script.cache_builds.__globals__, "ENTRIES_LISTED", 100)
    monkeypatch.setitem(script._read_entry.__globals__, "ENTRY_CAP", 10)
    assert script.cache_builds(str(cache), [])[0]["torch"] is None


def test_the_real_report_holds_the_key_ingredients() -> None:
    report = real_report()
    assert report["compile"]["cxx"]["name"] == script.compiler_name(dict(os.environ))
    assert report["compile"]["triton"] is None  # no triton in envguard's own venv
    assert report["caches"] == []  # default_caches off: the cache records are tested above


def test_the_default_cache_folders_resolve_as_torch_and_triton_do(tmp_path: Path) -> None:
    me = script.user()
    assert dict(script.default_caches({"HOME": "/home/me"}))["inductor"] == (
        f"/tmp/torchinductor_{me}"
    )
    # tempfile.gettempdir(): $TMPDIR when it is a folder (a cluster's job scratch)
    found = dict(script.default_caches({"TMPDIR": str(tmp_path), "TRITON_HOME": "/scratch/t"}))
    assert found == {
        "inductor": str(tmp_path / f"torchinductor_{me}"),
        "triton": "/scratch/t/.triton/cache",
    }
    assert dict(script.default_caches({"TMPDIR": str(tmp_path / "gone")}))["inductor"] == (
        f"/tmp/torchinductor_{me}"
    )
    named = {"TORCHINDUCTOR_CACHE_DIR": "/c/i", "TRITON_CACHE_DIR": "/c/t", "TMPDIR": "/x"}
    assert script.default_caches(named) == [("inductor", "/c/i"), ("triton", "/c/t")]


def test_a_slow_cache_is_left_after_its_time_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(3):
        put_entry(tmp_path, f"fk{i}", entry_bytes())
    monkeypatch.setitem(script.cache_builds.__globals__, "ENTRIES_SECONDS", -1.0)
    warnings: list[str] = []
    assert script.cache_builds(str(tmp_path), warnings) == []
    assert len(warnings) == 1 and "stopped after 0 entries (limits: 100000, -1s)" in warnings[0]


def test_an_unchanged_triton_is_not_read_again_and_any_change_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key is kept under the stamps of everything it was computed from: a warm probe
    hashes no file of triton's, an edit in place (its mtime put back), a module added, a
    reinstall each make it read again, and every answer is triton's own."""
    site = tmp_path / "site"
    dist = make_triton(site)
    folder = tmp_path / "cache"

    def key() -> dict[str, Any]:
        cache = script.DistCache(str(folder), [str(site)], code="t", quiet=0.0)
        found: dict[str, Any] = script.triton_key([dist], [], cache)
        cache.save()
        return found

    first = key()
    assert first["digest"] == reference_digest(site)
    hashing = script.triton_key.__globals__["_file_sha256"]
    monkeypatch.setitem(script.triton_key.__globals__, "_file_sha256", _refused)
    assert key() == first  # warm: nothing read
    monkeypatch.setitem(script.triton_key.__globals__, "_file_sha256", hashing)
    module = site / "triton/language/core.py"
    st = module.stat()
    module.write_text("c = 4\n")  # same size, mtime put back: the ctime moves
    os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns))
    edited = key()
    assert edited["digest"] == reference_digest(site) != first["digest"]
    (site / "triton/backends/nvidia/extra.py").write_text("e = 5\n")
    added = key()
    assert added["digest"] == reference_digest(site) != edited["digest"]
    assert added["files"] == edited["files"] + 1
    # The same tree under another version: its key is not the kept one.
    assert key()["digest"] == added["digest"]
    other = dict(dist, version="3.8.1")
    cache = script.DistCache(str(folder), [str(site)], code="t", quiet=0.0)
    assert script.triton_key([other], [], cache)["digest"] != added["digest"]


def _refused(path: str, *rest: object) -> str:
    raise AssertionError(f"{path} hashed although nothing changed")
