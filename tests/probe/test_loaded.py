"""What runs beyond RECORD's rows: bytecode Python would load instead of its source, start-up
code as a folder or bytecode, console scripts in bin/, site-packages reached through a link
out of the venv, and warnings that stay bounded. Each on a real venv made by uv."""

from __future__ import annotations

import importlib.util
import os
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest

from envguard import api
from factories import (
    cache_file,
    make_venv,
    make_wheel,
    pip_install,
    probe_report,
    read_cache,
    uv_install,
)

TAG = sys.implementation.cache_tag
LLAMA = "def forward(x):\n    return x * 2\n"


def _site(venv: Path) -> Path:
    return next((venv / "lib").glob("python*/site-packages"))


def _snap(python: Path, **kwargs: object) -> api.Snapshot:
    return api.snapshot(python=python, name="s", **kwargs)  # type: ignore[arg-type]


def _kinds(drift: api.Drift) -> set[tuple[str, str]]:
    return {(c.kind, c.name) for c in drift.changes if c.section == "installed"}


def _forward(venv: Path) -> str:
    """What the venv's Python really runs: modeling.llama.forward(1)."""
    return subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "from modeling.llama import forward; print(forward(1))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
    ).stdout.strip()


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wh = tmp_path_factory.mktemp("loaded-wheels")
    make_wheel(
        wh,
        "modeling",
        "4.57.1",
        files={"modeling/__init__.py": "", "modeling/llama.py": LLAMA, "modeling_top.py": LLAMA},
        scripts={"modeling-train": "modeling.llama:forward"},
    )
    return wh


@pytest.fixture
def venv(tmp_path: Path, wheels: Path) -> Path:
    venv = tmp_path / "venv"
    make_venv(venv)
    uv_install(venv, wheels, "modeling")
    return venv


def _plant(
    venv: Path, *, body: str, hash_based: bool = False, module: str = "modeling/llama"
) -> Path:
    """A pyc of ``body`` where Python looks for ``module``'s (modeling/llama.py), its header
    made to match the real source (its mtime and size, or an unchecked hash pyc)."""
    source = _site(venv) / f"{module}.py"
    fake = source.parent / "fake_module.py"
    fake.write_text(body)
    pyc = source.parent / "__pycache__" / f"{source.stem}.{TAG}.pyc"
    mode = py_compile.PycInvalidationMode
    py_compile.compile(
        str(fake),
        cfile=str(pyc),
        dfile=str(source),
        doraise=True,
        invalidation_mode=mode.UNCHECKED_HASH if hash_based else mode.TIMESTAMP,
    )
    fake.unlink()
    data = bytearray(pyc.read_bytes())
    if not hash_based:
        st = source.stat()
        data[8:12] = (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
        data[12:16] = (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    pyc.write_bytes(bytes(data))
    return pyc


def test_a_planted_pyc_marshal_cannot_read_is_named_and_the_check_goes_on(
    venv: Path, in_tmp: Path
) -> None:
    """A pyc whose code object is malformed (marshal raises SystemError on it) is named as
    drift like any pyc that is not its source's, and the rest of the check still answers:
    one planted file must not switch the installed-files check off."""
    import marshal
    import struct

    pyc = _plant(venv, body=LLAMA)
    header = pyc.read_bytes()[:16]
    code = marshal.dumps(compile("1", "x", "exec"))
    at = code.find(b"\xda\x01x")  # its file name, made an int
    pyc.write_bytes(header + code[:at] + b"\xe9" + struct.pack("<i", 7) + code[at + 3 :])
    with pytest.raises(SystemError):
        marshal.loads(pyc.read_bytes()[16:])
    live = _snap(venv)
    assert not any("were not checked" in w for w in live.warnings), live.warnings
    on_disk = live.package_map()["modeling"].on_disk
    assert on_disk is not None and on_disk.added == (f"modeling/__pycache__/{pyc.name}",)


def test_bytecode_python_wrote_on_import_is_no_drift(venv: Path, in_tmp: Path) -> None:
    good = _snap(venv)
    assert _forward(venv) == "2"  # writes modeling/__pycache__/*.pyc as Python does
    assert (_site(venv) / "modeling" / "__pycache__" / f"llama.{TAG}.pyc").is_file()
    live = _snap(venv)
    assert live.package_map()["modeling"].on_disk.added == ()  # type: ignore[union-attr]
    assert _kinds(api.diff(good, live)) == set()


@pytest.mark.parametrize("hash_based", [False, True], ids=["timestamp", "unchecked-hash"])
def test_a_planted_pyc_python_loads_is_named(venv: Path, in_tmp: Path, hash_based: bool) -> None:
    good = _snap(venv)
    pyc = _plant(venv, body=LLAMA.replace("x * 2", "x * 3"), hash_based=hash_based)
    assert _forward(venv) == "3"  # Python runs the planted bytecode, not the source
    live = _snap(venv)
    rel = f"modeling/__pycache__/{pyc.name}"
    assert live.package_map()["modeling"].on_disk.added == (rel,)  # type: ignore[union-attr]
    drift = api.diff(good, live)
    assert ("files_added", "modeling") in _kinds(drift)
    (change,) = [c for c in drift.changes if c.kind == "files_added"]
    assert change.message.endswith("; bytecode that Python runs and no source here compiles to")
    assert api.diff(live, _snap(venv)).changes == ()  # one verdict, kept


def test_a_stale_pyc_python_would_not_load_is_no_drift(venv: Path, in_tmp: Path) -> None:
    pyc = _plant(venv, body=LLAMA.replace("x * 2", "x * 3"))
    data = bytearray(pyc.read_bytes())
    data[12:16] = (999).to_bytes(4, "little")  # the source's size is not 999: compiled again
    pyc.write_bytes(bytes(data))
    live = _snap(venv)
    assert live.package_map()["modeling"].on_disk.added == ()  # type: ignore[union-attr]
    assert _forward(venv) == "2"


def test_compile_on_install_is_no_false_alarm(tmp_path: Path, wheels: Path, in_tmp: Path) -> None:
    venv = tmp_path / "compiled"
    make_venv(venv)
    uv_install(venv, wheels, "modeling", extra=["--compile-bytecode"])
    assert list((_site(venv) / "modeling" / "__pycache__").glob("*.pyc"))
    live = _snap(venv)
    assert live.package_map()["modeling"].on_disk.added == ()  # type: ignore[union-attr]
    live = _snap(venv, deep=True)
    assert live.package_map()["modeling"].on_disk.added == ()  # type: ignore[union-attr]


def test_a_sourceless_pyc_beside_the_modules_is_named(venv: Path, in_tmp: Path) -> None:
    site = _site(venv)
    good = _snap(venv)
    py_compile.compile(
        str(site / "modeling" / "llama.py"), cfile=str(site / "modeling" / "extra.pyc")
    )
    live = _snap(venv)
    assert live.package_map()["modeling"].on_disk.added == ("modeling/extra.pyc",)  # type: ignore[union-attr]
    assert ("files_added", "modeling") in _kinds(api.diff(good, live))


def test_start_up_code_as_a_package_or_bytecode_is_named(venv: Path, in_tmp: Path) -> None:
    site = _site(venv)
    good = _snap(venv)
    (site / "sitecustomize").mkdir()
    (site / "sitecustomize" / "__init__.py").write_text("print('runs at every start-up')\n")
    (site / "usercustomize.pyc").write_bytes(importlib.util.MAGIC_NUMBER + bytes(12))
    live = _snap(venv)
    assert live.unowned is not None
    assert {"sitecustomize/", "usercustomize.pyc"} <= set(live.unowned)
    changes = [c for c in api.diff(good, live).changes if c.kind == "unowned_added"]
    by_name = {c.name: c.message for c in changes}
    assert "it runs at every start-up" in by_name["sitecustomize/"]


def test_an_edited_console_script_is_named(venv: Path, in_tmp: Path) -> None:
    good = _snap(venv)
    assert good.package_map()["modeling"].on_disk.modified == ()  # type: ignore[union-attr]
    script = venv / "bin" / "modeling-train"
    text = script.read_text()
    data = text.replace("forward", "forwarx")  # same size, other code
    script.unlink()  # uv may link it; a file of its own
    script.write_text(data)
    live = _snap(venv)
    on_disk = live.package_map()["modeling"].on_disk
    assert on_disk is not None
    assert on_disk.modified == ("../../../bin/modeling-train",)
    assert ("modified_in_place", "modeling") in _kinds(api.diff(good, live))
    script.unlink()
    assert _snap(venv).package_map()["modeling"].on_disk.missing == (  # type: ignore[union-attr]
        "../../../bin/modeling-train",
    )


def test_a_console_script_edited_in_place_after_its_verdict_was_kept_is_named(
    venv: Path, tmp_path: Path
) -> None:
    """A console script's hash is kept for its stamp, as any file's is: a warm probe hashes
    none. An edit in place of the same size, its mtime put back, still moves its ctime,
    which counts for a script however many links it has (an installer writes it; a
    second link is someone's doing)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    args = {"verify": "quick", "git": False, "files": [], "caches": []}
    script = venv / "bin" / "modeling-train"
    text = script.read_text()
    script.unlink()  # uv may link it; a file of its own
    script.write_text(text)
    os.link(script, tmp_path / "second-link")
    for _ in range(2):  # the second run keeps nothing new: the verdict was kept by the first
        report = probe_report(venv, env, **args)
        dist = next(p for p in report["packages"] if p["name"] == "modeling")
        assert dist["on_disk"]["modified"] == []
    kept = read_cache(cache_file(tmp_path / "xdg"))
    assert any(key.startswith(str(script) + "\0") for key in kept["verified"]), kept["verified"]
    before = script.stat()
    with open(script, "r+b") as fh:
        data = fh.read().replace(b"forward", b"forwarx")
        fh.seek(0)
        fh.write(data)
    os.utime(script, ns=(before.st_atime_ns, before.st_mtime_ns))
    report = probe_report(venv, env, **args)
    dist = next(p for p in report["packages"] if p["name"] == "modeling")
    assert dist["on_disk"]["modified"] == ["../../../bin/modeling-train"]


def test_a_lib_folder_linked_out_of_the_venv_is_not_read(
    venv: Path, tmp_path: Path, in_tmp: Path
) -> None:
    outside = tmp_path / "elsewhere"
    (venv / "lib").rename(outside)
    (venv / "lib").symlink_to(outside)
    live = _snap(venv)
    assert live.packages == ()
    assert any("is a link out of the venv" in w and str(venv / "lib") in w for w in live.warnings)


def test_lib64_linked_to_lib_inside_the_venv_is_read(venv: Path, in_tmp: Path) -> None:
    if not (venv / "lib64").is_symlink():
        os.symlink("lib", venv / "lib64")
    assert "modeling" in _snap(venv).package_map()


def test_clash_warnings_are_bounded(tmp_path: Path, in_tmp: Path) -> None:
    wh = tmp_path / "wh"
    paths = [f"shared/m{i}.py" for i in range(60)]
    make_wheel(wh, "one", "1.0", files={p: "A = 1\n" for p in paths})
    make_wheel(wh, "two", "1.0", files={p: "A = 22\n" for p in paths})
    venv = tmp_path / "venv"
    make_venv(venv)
    uv_install(venv, wh, "one")
    uv_install(venv, wh, "two")
    live = _snap(venv)
    assert live.clashes is not None and len(live.clashes) == 60
    claimed = [w for w in live.warnings if " is claimed by " in w]
    assert len(claimed) == 20
    assert "and 40 more paths claimed twice (1000 listed in clashes)" in live.warnings


def test_pip_compiled_bytecode_is_checked_against_its_source(
    tmp_path: Path, wheels: Path, in_tmp: Path
) -> None:
    pytest.importorskip("pip", minversion="22.3")  # pip --python (the floors' venv has none)
    venv = tmp_path / "pip"
    make_venv(venv)
    pip_install(venv, next(wheels.glob("modeling-*.whl")))  # pip compiles
    record = next(_site(venv).glob("modeling-*.dist-info")) / "RECORD"
    assert f"modeling/__pycache__/llama.{TAG}.pyc,," in record.read_text()  # with no hash
    good = _snap(venv)
    assert good.package_map()["modeling"].on_disk == _snap(venv).package_map()["modeling"].on_disk
    assert good.package_map()["modeling"].on_disk.modified == ()  # type: ignore[union-attr]
    pyc = _plant(venv, body=LLAMA.replace("x * 2", "x * 5"))
    assert _forward(venv) == "5"
    live = _snap(venv)
    on_disk = live.package_map()["modeling"].on_disk
    assert on_disk is not None
    assert on_disk.added == (f"modeling/__pycache__/{pyc.name}",)


def test_links_out_at_the_top_of_site_packages_are_named_not_read(
    venv: Path, tmp_path: Path, in_tmp: Path
) -> None:
    site = _site(venv)
    outside = tmp_path / "outside"
    (outside / "evil").mkdir(parents=True)
    (outside / "evil" / "__init__.py").write_text("print('runs on import')\n")
    (outside / "stray.pth").write_text("import evil\n")
    dist_info = outside / "evil-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n")
    good = _snap(venv)
    for name in ("evil", "stray.pth", "evil-1.0.dist-info"):
        (site / name).symlink_to(outside / name)
    live = _snap(venv)
    assert live.unowned is not None and {"evil", "stray.pth"} <= set(live.unowned)
    assert "evil" not in live.package_map()  # its metadata lies outside: not read
    assert any("evil-1.0.dist-info is a link out of the venv" in w for w in live.warnings)
    names = {c.name for c in api.diff(good, live).changes if c.kind == "unowned_added"}
    assert {"evil", "stray.pth"} <= names


def test_a_planted_pyc_of_a_top_level_module_is_its_distribution_s(
    venv: Path, in_tmp: Path
) -> None:
    pyc = _plant(venv, body=LLAMA.replace("x * 2", "x * 7"), module="modeling_top")
    live = _snap(venv)
    on_disk = live.package_map()["modeling"].on_disk
    assert on_disk is not None and on_disk.added == (f"__pycache__/{pyc.name}",)
    assert live.unowned is not None and not any(u.startswith("__pycache__") for u in live.unowned)
