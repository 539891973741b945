"""What guard reads of an install before it runs (guard/incoming.py): the wheels it would
bring, by file and hash, not by version. A rebuilt torch of the same version is a change
(issue 38), the install takes exactly the files previewed, and an extension the install
would leave unable to load refuses it (issue 35): real venvs, tiny wheels, real uv."""

from __future__ import annotations

import ensurepip
from pathlib import Path

import pytest
from typer.testing import CliRunner

from elflibs import EXT, TORCH_C, c10, cc, needs_gcc
from envguard import api
from envguard.cli import app
from envguard.guard import journal
from envguard.testing import make_torch_wheel, make_wheel
from factories import UV, make_venv, run, uv_install

runner = CliRunner()


def _version_py(venv: Path) -> str:
    return next(venv.glob("lib/python*/site-packages/torch/version.py")).read_text()


def _freeze(venv: Path) -> str:
    return run([UV, "pip", "freeze", "--python", str(venv)]).stdout


def guard(venv: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["guard", "--venv", str(venv), *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def cu128(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(venv with torch 2.11.0+cu128 built for CUDA 12.8, a folder holding a wheel of the
    same version rebuilt for CUDA 13.0): the issue's same-version build swap."""
    make_torch_wheel(tmp_path / "wh", "2.11.0+cu128", "12.8")
    make_torch_wheel(tmp_path / "rebuilt", "2.11.0+cu128", "13.0", salt="cu130")
    venv = tmp_path / ".venv"
    make_venv(venv)
    uv_install(venv, tmp_path / "wh", "torch==2.11.0+cu128")
    monkeypatch.chdir(tmp_path)
    return venv, tmp_path / "rebuilt"


def _swap(rebuilt: Path) -> list[str]:
    links = ["--no-index", "--find-links", str(rebuilt)]
    return [UV, "pip", "install", "--reinstall-package", "torch", *links, "torch==2.11.0+cu128"]


def test_a_same_version_rebuild_of_torch_is_refused_naming_torch(
    cu128: tuple[Path, Path],
) -> None:
    venv, rebuilt = cu128
    before = _version_py(venv)
    code, out, err = guard(venv, "--", *_swap(rebuilt))
    assert code == 1, err
    assert out.splitlines()[0].startswith(
        "this install would swap torch 2.11.0+cu128 for another build of the same version"
        " (CUDA 12.8 -> 13.0, critical)"
    )
    assert "refused (--fail-on critical)" in err and "--allow torch" in err
    assert _version_py(venv) == before
    assert journal.records(venv) == []


def test_the_json_document_names_the_file_read_before_the_install(
    cu128: tuple[Path, Path],
) -> None:
    import hashlib

    from envguard.guard.report import GuardReport

    venv, rebuilt = cu128
    code, out, err = guard(venv, "--preview", "--format", "json", "--", *_swap(rebuilt))
    assert code == 1, err
    report = GuardReport.model_validate_json(out)
    (wheel,) = rebuilt.iterdir()
    ((name, version, file, sha256),) = [(f.name, f.version, f.file, f.sha256) for f in report.files]
    assert (name, version, file) == ("torch", "2.11.0+cu128", wheel.name)
    assert sha256 == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert report.blocked_by == ("torch",) and not report.pinned
    code, out, err = guard(
        venv, "--allow", "torch", "--preview", "--format", "json", "--", *_swap(rebuilt)
    )
    assert code == 0, err
    assert GuardReport.model_validate_json(out).pinned


def test_the_same_wheel_again_is_no_change(cu128: tuple[Path, Path], tmp_path: Path) -> None:
    venv, _ = cu128
    code, out, err = guard(venv, "--", *_swap(tmp_path / "wh"))
    assert code == 0, err
    assert out.startswith("this install would change no package")


@pytest.mark.slow
def test_pips_report_names_the_rebuilt_wheel_too(cu128: tuple[Path, Path]) -> None:
    venv, rebuilt = cu128
    uv_install(venv, Path(ensurepip.__file__).parent / "_bundled", "pip")
    pip = ["python", "-m", "pip", "install", "--force-reinstall", "--no-deps", "--no-index"]
    code, out, err = guard(venv, "--", *pip, "--find-links", str(rebuilt), "torch==2.11.0+cu128")
    assert code == 1, err
    assert "swap torch 2.11.0+cu128 for another build of the same version" in out
    assert "'12.8'" in _version_py(venv)


def test_the_install_takes_the_previewed_files_or_nothing(cu128: tuple[Path, Path]) -> None:
    """The folder changes between the preview and the install (a moving index): the
    install is pinned to the previewed wheel's sha256, so it fails and changes nothing."""
    venv, rebuilt = cu128
    before = _version_py(venv)

    def moved(seen: api.Preview) -> None:
        assert any("installs exactly the 1 previewed file" in n for n in seen.notes)
        (wheel,) = rebuilt.iterdir()
        wheel.unlink()
        make_torch_wheel(rebuilt, "2.11.0+cu128", "12.9", salt="moved")

    options = api.GuardOptions(venv=venv, allow=("torch",))
    done = api.guard(_swap(rebuilt), options, on_preview=moved)
    assert done.ran and done.exit_code != 0
    assert _version_py(venv) == before  # neither the previewed build nor the new one
    assert done.change is not None
    assert done.change.startswith("no package change: the install of the previewed files failed")


@pytest.mark.slow
def test_pip_too_installs_the_previewed_files_or_nothing(cu128: tuple[Path, Path]) -> None:
    venv, rebuilt = cu128
    uv_install(venv, Path(ensurepip.__file__).parent / "_bundled", "pip")
    before = _version_py(venv)

    def moved(seen: api.Preview) -> None:
        (wheel,) = rebuilt.iterdir()
        wheel.unlink()
        make_torch_wheel(rebuilt, "2.11.0+cu128", "12.9", salt="moved")

    pip = ["python", "-m", "pip", "install", "--no-deps", "--force-reinstall", "--no-index"]
    argv = [*pip, "--find-links", str(rebuilt), "torch==2.11.0+cu128"]
    options = api.GuardOptions(venv=venv, allow=("torch",))
    done = api.guard(argv, options, on_preview=moved)
    assert done.ran and done.exit_code != 0
    assert _version_py(venv) == before


def test_a_sync_run_as_given_that_takes_other_files_is_said_and_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`uv pip sync` runs as given (it removes what the file does not list): what it
    installed is measured and held to the wheels the preview read."""
    folder = tmp_path / "moving"
    make_torch_wheel(folder, "2.11.0+cu128", "12.8")
    venv = tmp_path / ".venv"
    make_venv(venv)
    monkeypatch.chdir(tmp_path)
    Path("requirements.txt").write_text("torch==2.11.0+cu128\n")

    def moved(seen: api.Preview) -> None:
        assert not any("installs exactly" in n for n in seen.notes)
        (wheel,) = folder.iterdir()
        wheel.unlink()
        make_torch_wheel(folder, "2.11.0+cu128", "13.0", salt="moved")

    # --refresh: uv takes the folder's file again, not the one the preview put in its cache
    # (uv refuses it offline; --no-index keeps it off the network).
    monkeypatch.delenv("UV_OFFLINE")
    links = ["--refresh", "--no-index", "--find-links", str(folder)]
    argv = [UV, "pip", "sync", *links, "requirements.txt"]
    done = api.guard(argv, api.GuardOptions(venv=venv), on_preview=moved)
    assert done.ran and done.exit_code == 1
    assert done.change is not None
    assert "not what was previewed: torch 2.11.0+cu128 (other files than the previewed" in (
        done.change
    )
    assert f"envguard undo --venv {venv}" in done.change
    assert "'13.0'" in _version_py(venv)  # installed, then named: undo brings it back


def test_the_install_takes_the_previewed_build(cu128: tuple[Path, Path]) -> None:
    venv, rebuilt = cu128
    options = api.GuardOptions(venv=venv, allow=("torch",))
    done = api.guard(_swap(rebuilt), options)
    assert done.ran and done.exit_code == 0
    assert "cuda: Optional[str] = '13.0'" in _version_py(venv)
    assert "(CUDA 12.8 -> 13.0, critical)" in done.change


# The fit of what the install would bring (issue 35 item 4): a torch whose libc10 exports
# c10_a only, and a "vision" extension built against a torch that also had aoti_*.


def _ext(tmp: Path, *calls: str) -> bytes:
    """vision/_C.so calling ``calls``, linked against a libc10.so that defines them."""
    lib = c10(tmp / "against" / "libc10.so", *calls)
    proto = "".join(f"int {n}(void);\n" for n in calls)
    body = " + ".join(f"{n}()" for n in calls)
    out = cc(
        tmp / "ext" / "_C.so", proto + f"int vision_init(void) {{ return {body}; }}\n", link=(lib,)
    )
    return out.read_bytes()


@pytest.fixture
def cpu_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(a venv with a CPU torch whose libraries export c10_a, a folder with vision 0.29.0
    built for it and vision 0.29.1 built for a torch that also exports an aoti_ symbol)."""
    work = tmp_path / "build"
    lib = c10(work / "torch" / "libc10.so", "c10_a")
    torch_c = cc(
        work / "torch" / "_C.so",
        "int c10_a(void);\nint torch_init(void) { return c10_a(); }\n",
        link=(lib,),
        runpath="$ORIGIN/lib",
    )
    wh = tmp_path / "wh"
    make_wheel(
        wh,
        "torch",
        "2.13.0+cpu",
        files={
            "torch/__init__.py": "raise ImportError('never imported')\n",
            "torch/lib/libc10.so": lib.read_bytes(),
            TORCH_C: torch_c.read_bytes(),
        },
    )
    make_wheel(wh, "vision", "0.29.0", files={EXT: _ext(work / "good", "c10_a")})
    bad = _ext(work / "bad", "c10_a", "aoti_torch_get_current_cuda_stream")
    make_wheel(wh, "vision", "0.29.1", files={EXT: bad})
    venv = tmp_path / ".venv"
    make_venv(venv)
    uv_install(venv, wh, "torch==2.13.0+cpu")
    monkeypatch.chdir(tmp_path)
    return venv, wh


def _vision(wh: Path, version: str) -> list[str]:
    links = ["--no-index", "--find-links", str(wh)]
    return ["--", UV, "pip", "install", "--no-deps", *links, f"vision=={version}"]


@needs_gcc
def test_an_install_that_would_leave_an_extension_unable_to_load_is_refused(
    cpu_torch: tuple[Path, Path],
) -> None:
    venv, wh = cpu_torch
    before = _freeze(venv)
    code, out, err = guard(venv, *_vision(wh, "0.29.1"))
    assert code == 1, err
    assert out.splitlines()[0].startswith(
        f"this install would leave {EXT} unable to load: 1 symbol torch 2.13.0+cpu does not"
        " export (aoti_torch_get_current_cuda_stream)"
    )
    assert "--allow vision" in err
    assert _freeze(venv) == before
    # Allowed by its package's name, it runs.
    code, _, err = guard(venv, "--allow", "vision", *_vision(wh, "0.29.1"))
    assert code == 0, err
    assert "vision==0.29.1" in _freeze(venv)


@needs_gcc
def test_an_install_that_fits_passes(cpu_torch: tuple[Path, Path]) -> None:
    venv, wh = cpu_torch
    code, out, err = guard(venv, *_vision(wh, "0.29.0"))
    assert code == 0, err
    assert out.startswith("this install would add 1 package")
    assert "vision==0.29.0" in _freeze(venv)


def test_a_wheel_named_by_path_is_installed_as_given_and_said(
    cu128: tuple[Path, Path], tmp_path: Path
) -> None:
    """uv cannot name the file of a wheel given by its path from an index: the preview says
    so and the install runs as given (what guard did before it read files)."""
    venv, _ = cu128
    wheel = make_wheel(tmp_path / "local", "six", "1.17.0")
    code, out, err = guard(venv, "--", UV, "pip", "install", "--no-index", str(wheel))
    assert code == 0, err
    assert out.startswith("this install would add 1 package")
    assert "the files of this install could not be named before it" in err
    assert "six @ file:" in _freeze(venv)


SHA = "ab" * 32


@pytest.mark.parametrize(
    "info",
    [
        None,
        "file:///w/torch-2.11.0-py3-none-any.whl",
        {"url": "file:///w/torch-2.11.0.tar.gz", "archive_info": {"hashes": {"sha256": SHA}}},
        {"url": "file:///w/t.whl\n--hash=x", "archive_info": {"hashes": {"sha256": SHA}}},
        {"url": "file:///w/t\x1b[2J.whl", "archive_info": {"hashes": {"sha256": SHA}}},
        {"url": "ftp://h/t.whl", "archive_info": {"hashes": {"sha256": SHA}}},
        {"url": "file:///w/t.whl", "archive_info": {"hashes": {"sha256": "zz" * 32}}},
        {"url": "file:///w/t.whl", "archive_info": {"hash": "md5=" + "a" * 32}},
        {"url": "file:///w/t.whl" + "a" * 5000, "archive_info": {"hashes": {"sha256": SHA}}},
        {"url": "file:///w/t.whl", "archive_info": [SHA]},
    ],
)
def test_a_pip_report_naming_no_plain_wheel_and_hash_is_read_as_unknown(info: object) -> None:
    """pip's report is untrusted text: what is not a wheel's URL with a sha256 leaves the
    package unread (the preview says so), never a line in a requirements file."""
    from envguard.guard.resolve import _from_pip

    item = {"metadata": {"name": "torch", "version": "2.11.0"}, "download_info": info}
    (planned,) = _from_pip({"install": [item]}, {}).installed
    assert (planned.url, planned.sha256) == (None, None)


def test_a_pip_report_names_the_wheel_and_its_hash() -> None:
    from envguard.guard.resolve import _from_pip

    info = {"url": "file:///w/t-1-py3-none-any.whl", "archive_info": {"hash": "sha256=" + SHA}}
    item = {"metadata": {"name": "t", "version": "1"}, "download_info": info}
    (planned,) = _from_pip({"install": [item]}, {}).installed
    assert (planned.url, planned.sha256) == (info["url"], SHA)


def test_uvs_lock_is_read_for_one_wheel_with_its_hash_per_planned_package() -> None:
    from envguard.guard.incoming import _from_pylock

    text = (
        'lock-version = "1.0"\n'
        '[[packages]]\nname = "Torch"\nversion = "2.11.0"\n'
        f'wheels = [{{ url = "file:///w/torch-2.11.0-py3-none-any.whl", hashes = {{ sha256 = "{SHA}" }} }}]\n'
        '[[packages]]\nname = "six"\nversion = "1.17.0"\n'
        f'sdist = {{ url = "file:///w/six-1.17.0.tar.gz", hashes = {{ sha256 = "{SHA}" }} }}\n'
        '[[packages]]\nname = "numpy"\nversion = "9.9"\n'
        f'wheels = [{{ url = "file:///w/numpy-9.9-py3-none-any.whl", hashes = {{ sha256 = "{SHA}" }} }}]\n'
    )
    wanted = {"torch": "2.11.0", "six": "1.17.0", "numpy": "2.1.0"}
    found = _from_pylock(text, wanted)
    assert list(found) == ["torch"]  # six: no wheel; numpy: another version than planned
    assert found["torch"].filename == "torch-2.11.0-py3-none-any.whl"
    assert found["torch"].sha256 == SHA


def test_the_scratch_of_a_guard_killed_meanwhile_is_removed_by_the_next(tmp_path: Path) -> None:
    """The wheels unpacked for a preview lie in a scratch folder named with guard's pid: a
    guard killed with SIGKILL runs no clean-up, the next one removes it."""
    import tempfile

    from envguard.recovery import scratch

    dead = Path(tempfile.gettempdir()) / f"envguard-guard-999999999@{scratch.HOST}-x1"
    (dead / "prefix").mkdir(parents=True)
    mine = scratch.scratch_folder("guard")
    try:
        assert not dead.exists() and mine.name.startswith("envguard-guard-")
    finally:
        mine.rmdir()


def test_the_commands_index_options_are_what_the_resolution_and_the_pinned_install_see() -> None:
    from envguard.guard.command import parse
    from envguard.guard.incoming import source_options

    command = parse(
        (
            "uv",
            "pip",
            "install",
            "-fDIR",
            "--index-url=https://idx/simple",
            "--reinstall-package",
            "torch",
            "--no-index",
            "--link-mode",
            "copy",
            "--extra-index-url",
            "https://other/simple",
            "torch==2.11.0",
        )
    )
    shared = ["-fDIR", "--index-url=https://idx/simple", "--no-index"]
    shared += ["--extra-index-url", "https://other/simple"]
    assert source_options(command) == shared
    assert source_options(command, install=True) == [
        *shared[:3],
        "--link-mode",
        "copy",
        *shared[3:],
    ]


@pytest.mark.parametrize(
    "version",
    ["1.0 --index-url http://127.0.0.1:9/simple", '1.0 ; python_version < "0"', " 1.0", "x"],
)
def test_a_report_version_that_is_not_pep_440_never_reaches_the_pinned_file(
    version: str,
) -> None:
    """The version of each planned package is written into the requirements file that
    pins the install (`name==VERSION --hash=...`): one holding words would add options or
    a marker there (the pin skipped, another index asked). Refused as unreadable."""
    from envguard.guard.resolve import _from_pip, from_uv_changes

    item = {"metadata": {"name": "t", "version": version}}
    with pytest.raises(ValueError, match="a version is not PEP 440's"):
        _from_pip({"install": [item]}, {})
    with pytest.raises(ValueError, match="a version is not PEP 440's"):
        from_uv_changes([{"name": "t", "version": version, "action": "installed"}], requested=())
