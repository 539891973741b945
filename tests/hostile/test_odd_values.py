"""One odd value the target holds must not sink the whole report.

The host refuses a probe report holding, in any one-line field, a control or bidi character
or a line over 4096 characters (probe/report.py): one such value anywhere meant no snapshot,
diff, check or gate on that machine. Each test plants one odd value on a real venv, runs
``envguard snapshot`` and asserts it succeeds with the value recorded as the probe keeps it
(escaped, capped or left out with a warning), and that an unchanged target diffs clean.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from elflibs import c10, cc, needs_gcc, torch_site
from envguard.cli import app
from envguard.probe.report import validate_report
from factories import make_dist_info, make_host_tree, make_venv, probe_report

runner = CliRunner()

BIDI = "\u202e"
ESCAPE = "\x1b[2J"
LONG = "x" * 70000


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def snapshot_of(venv: Path, name: str = "odd") -> dict[str, Any]:
    """``envguard snapshot`` of ``venv`` (exit 0 asserted), as written; then a diff of the
    unchanged venv against it, which must be clean: the odd value is recorded the same way
    on both sides."""
    code, _out, err = invoke("snapshot", "--python", str(venv), "--name", name)
    assert code == 0, err
    data: dict[str, Any] = json.loads(Path("snapshots", name + ".json").read_text())
    code, out, err = invoke("diff", name, "--python", str(venv))
    assert code == 0, out + err
    return data


def package(data: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(p for p in data["packages"] if p["name"] == name)
    return found


@pytest.fixture
def venv(in_tmp: Path) -> Path:
    path = in_tmp / "venv"
    make_venv(path)
    return path


# ---- site-packages: what a distribution's files say ---------------------------------------


@pytest.mark.parametrize(
    ("folder", "shown"),
    [
        (f"od{BIDI}d-1.0.dist-info", "od\\u202ed-1.0.dist-info"),
        (f"odd{ESCAPE}-1.0.dist-info", "odd\\x1b[2J-1.0.dist-info"),
        ("odd\n-1.0.dist-info", "odd\\n-1.0.dist-info"),
    ],
)
def test_a_dist_info_folder_with_an_odd_name_is_kept_escaped(
    venv: Path, folder: str, shown: str
) -> None:
    """METADATA's name is fine; the folder's own name (any name a file system allows) is
    what the report carried as metadata_dir."""
    info = make_dist_info(site_packages(venv), "odd", "1.0", record="odd/__init__.py,,\n")
    info.rename(info.parent / folder)
    assert package(snapshot_of(venv), "odd")["version"] == "1.0"
    (record,) = [p for p in probe_report(venv, os.environ)["packages"] if p["name"] == "odd"]
    assert record["metadata_dir"] == shown
    # The probe still read the RECORD through the folder's real name.
    assert record["fingerprint"] is not None


@pytest.mark.parametrize(
    ("installer", "recorded"),
    [
        (f"pip{BIDI}", "pip\\u202e"),
        (f"uv{ESCAPE}", "uv\\x1b[2J"),
        ("uv\npip", "uv\\npip"),
        (LONG, None),
    ],
)
def test_an_odd_installer_file_is_escaped_or_left_out(
    venv: Path, installer: str, recorded: str | None
) -> None:
    make_dist_info(site_packages(venv), "odd", "1.0", installer=installer)
    assert package(snapshot_of(venv), "odd")["installer"] == recorded


# ---- torch's build, as torch/version.py says ------------------------------------------------


@pytest.mark.parametrize(
    ("line", "key", "recorded"),
    [
        (f"cuda = '12.8{BIDI}'", "cuda", "12.8\\u202e"),
        ("git_version = '\\x1b[2Jabc'", "git_version", "\\x1b[2Jabc"),
        (f"hip = '{LONG}'", "hip", None),
    ],
)
def test_an_odd_torch_version_py_is_escaped_or_left_out(
    venv: Path, line: str, key: str, recorded: str | None
) -> None:
    site = site_packages(venv)
    make_dist_info(site, "torch", "2.11.0")
    (site / "torch").mkdir()
    (site / "torch" / "version.py").write_text(f"__version__ = '2.11.0'\n{line}\n")
    data = snapshot_of(venv)
    assert data["torch"][key] == recorded


# ---- the machine: user, tools on PATH, caches, the interpreter's own paths ------------------


@pytest.mark.parametrize(
    ("user", "recorded"),
    [(f"ro{BIDI}ot", "ro\\u202eot"), (f"me{ESCAPE}", "me\\x1b[2J")],
)
def test_an_odd_user_name_is_escaped(
    venv: Path, monkeypatch: pytest.MonkeyPatch, user: str, recorded: str
) -> None:
    monkeypatch.setenv("LOGNAME", user)
    assert snapshot_of(venv)["user"] == recorded


def _tool(folder: Path, name: str, output: str) -> None:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\ncat <<'EOF'\n" + output + "\nEOF\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize(
    ("smi", "gpus", "driver"),
    [
        (f"NVIDIA H{BIDI}100, 550.54.15, 9.0", ["NVIDIA H\\u202e100"], "550.54.15"),
        (f"NVIDIA{ESCAPE} H100, 550.54.15, 9.0", ["NVIDIA\\x1b[2J H100"], "550.54.15"),
        ("NVIDIA H100, 550.54.15" + LONG + ", 9.0", ["NVIDIA H100"], None),
    ],
)
def test_odd_nvidia_smi_output_is_escaped_or_left_out(
    venv: Path,
    in_tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    smi: str,
    gpus: list[str],
    driver: str | None,
) -> None:
    _tool(in_tmp / "bin", "nvidia-smi", smi)
    monkeypatch.setenv("PATH", f"{in_tmp / 'bin'}:{os.environ['PATH']}")
    accelerator = snapshot_of(venv)["accelerator"]
    assert accelerator["gpus"] == gpus
    # Left out, the driver is the kernel module's where this machine has one.
    assert accelerator["driver"] == driver or (driver is None and len(accelerator["driver"]) < 64)


def test_a_long_nvcc_release_is_left_out(
    venv: Path, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tool(in_tmp / "bin", "nvcc", "Cuda compilation tools, release 12.8, V12." + "8" * 70000)
    monkeypatch.setenv("PATH", f"{in_tmp / 'bin'}:{os.environ['PATH']}")
    assert snapshot_of(venv)["accelerator"]["nvcc"] is None


ODD_FOLDERS = [(f"ind{BIDI}uctor", "ind\\u202euctor"), (f"ind{ESCAPE}uctor", "ind\\x1b[2Juctor")]


@pytest.mark.parametrize(("folder", "shown"), [*ODD_FOLDERS, ("ind\nuctor", "ind\\nuctor")])
def test_a_cache_folder_with_an_odd_name_is_kept_escaped_and_measured_again(
    venv: Path, in_tmp: Path, monkeypatch: pytest.MonkeyPatch, folder: str, shown: str
) -> None:
    """The snapshot records the folder as its escape; a diff sends that back to the probe,
    which measures the folder it names (not a cold cache at a path that is not there)."""
    cache = in_tmp / folder
    (cache / "fxgraph").mkdir(parents=True)
    (cache / "entry").write_bytes(b"x" * 10)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))
    (record,) = [c for c in snapshot_of(venv)["caches"] if c["kind"] == "inductor"]
    assert record["path"] == f"{in_tmp}/{shown}"
    assert record["exists"] and record["bytes"] == 10


@pytest.mark.parametrize(("name", "shown"), ODD_FOLDERS)
def test_a_tracked_file_with_an_odd_name_is_kept_escaped_and_hashed_again(
    venv: Path, in_tmp: Path, name: str, shown: str
) -> None:
    (in_tmp / name).write_text("lr: 0.1\n")
    code, _out, err = invoke("snapshot", "--python", str(venv), "--name", "odd", "--file", name)
    assert code == 0, err
    (record,) = json.loads(Path("snapshots", "odd.json").read_text())["files"]
    assert record["path"] == f"{in_tmp}/{shown}" and record["size"] == 8
    code, out, err = invoke("diff", "odd", "--python", str(venv))
    assert code == 0, out + err
    (in_tmp / name).write_text("lr: 0.2\n")
    code, out, err = invoke("diff", "odd", "--python", str(venv))
    assert code == 1 and "changed" in out, out + err


@pytest.mark.parametrize(
    ("folder", "shown"), [(f"ven{BIDI}v", "ven\\u202ev"), (f"ven{ESCAPE}v", "ven\\x1b[2Jv")]
)
def test_a_venv_in_a_folder_with_an_odd_name_is_kept_escaped(
    in_tmp: Path, folder: str, shown: str
) -> None:
    venv = in_tmp / folder
    make_venv(venv)
    make_dist_info(site_packages(venv), "odd", "1.0")
    data = snapshot_of(venv)
    assert data["interpreter"]["prefix"] == f"{in_tmp}/{shown}"
    assert data["interpreter"]["executable"] == f"{in_tmp}/{shown}/bin/python"
    assert package(data, "odd")["location"] == str(site_packages(Path(in_tmp, shown)))


def test_a_triton_whose_key_cannot_be_computed_in_an_odd_folder(in_tmp: Path) -> None:
    """The error names the folder: kept as one line, escaped."""
    venv = in_tmp / f"ven{BIDI}v"
    make_venv(venv)
    make_dist_info(site_packages(venv), "triton", "3.1.0")
    triton = snapshot_of(venv)["compile"]["triton"]
    assert triton["digest"] is None and "ven\\u202ev" in triton["error"]


@needs_gcc
def test_an_extension_file_with_an_odd_name_that_cannot_load(venv: Path, in_tmp: Path) -> None:
    """fit's entry names the file as the RECORD does: escaped."""
    site = site_packages(venv)
    torch_site(site, "c10_a")
    other = c10(in_tmp / "other" / "libc10.so", "c10_a", "c10_gone")
    ext = f"vision/od{BIDI}d_C.so"
    cc(
        site / ext,
        "int c10_gone(void);\nint vision_init(void) { return c10_gone(); }\n",
        link=(other,),
    )
    make_dist_info(site, "vision", "0.29.1", record=f"{ext},sha256=x,1\n")
    code, _out, err = invoke("snapshot", "--python", str(venv), "--name", "odd")
    assert code == 0, err
    (broken,) = json.loads(Path("snapshots", "odd.json").read_text())["fit"]["broken"]
    assert broken["path"] == "vision/od\\u202ed_C.so" and broken["symbols"] == ["c10_gone"]


def test_a_gpu_model_with_a_bidi_override_in_the_kernel_module(venv: Path, in_tmp: Path) -> None:
    """Without nvidia-smi, the GPU models are the kernel module's files: the characters a
    line may not hold are replaced by a space, as the host layer's values are."""
    root = make_host_tree(in_tmp / "host", gpus=((f"NVIDIA H{BIDI}100", "0x2330"),))
    report = probe_report(venv, {**os.environ, "PATH": "/nonexistent"}, host_root=str(root))
    validate_report(report, label="odd", returncode=0)
    assert report["accelerator"]["gpus"] == ["NVIDIA H 100"]


def _own_uts_namespace() -> bool:
    """Whether this user may give a child its own host name (root, or user namespaces)."""
    import shutil
    import subprocess

    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    probe = [unshare, "-u", sys.executable, "-c", "import socket; socket.sethostname(b'x')"]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


@pytest.mark.skipif(not _own_uts_namespace(), reason="cannot set a host name (unshare -u)")
@pytest.mark.parametrize(
    ("node", "recorded"),
    [
        (b"odd node", "odd%20node"),
        (b"rack/7", "rack%2F7"),
        ("no\u202ede".encode(), "no%E2%80%AEde"),
        (b"n\x1b[2J\xff", "n%1B[2J%FF"),
    ],
)
def test_a_host_name_the_report_may_not_carry_is_percent_encoded(
    venv: Path, node: bytes, recorded: str
) -> None:
    """The kernel takes any 64 bytes as a host name; a report's host holds no space, slash,
    control or bidi mark. Run in a UTS namespace of its own, so this machine's name is
    never touched."""
    import subprocess

    script = (
        "import socket, sys\n"
        f"socket.sethostname({node!r})\n"
        "from envguard.cli import app\n"
        f"app(['snapshot', '--python', {str(venv)!r}, '--name', 'odd'], prog_name='envguard')\n"
    )
    proc = subprocess.run(
        ["unshare", "-u", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(Path("snapshots", "odd.json").read_text())["host"] == recorded


def test_a_diff_finds_the_interpreter_a_snapshot_recorded_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`envguard diff NAME` with no --python runs the interpreter the snapshot recorded: an
    escaped path names the venv's real folder (the same safety checks then apply)."""
    venv = tmp_path / f"ven{BIDI}v"
    make_venv(venv)
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    code, _out, err = invoke("snapshot", "--python", str(venv), "--name", "odd")
    assert code == 0, err
    code, out, err = invoke("diff", "odd")
    assert code == 0, out + err
    make_dist_info(site_packages(venv), "odd", "1.0")
    code, out, err = invoke("diff", "odd")
    assert code == 1 and "odd" in out, out + err


@needs_gcc
def test_torch_in_a_venv_in_an_odd_folder_finds_its_own_libraries(in_tmp: Path) -> None:
    """torch/_C finds libc10 by RUNPATH $ORIGIN/lib: in a folder named with U+202E the
    loader's search goes on as ld.so's does (it used to pass such a folder over, and torch
    was reported unable to load)."""
    venv = in_tmp / f"ven{BIDI}v"
    make_venv(venv)
    torch_site(site_packages(venv), "c10_a")
    data = snapshot_of(venv)
    assert data["fit"]["broken"] == [] and data["fit"]["checked"] == 1
    assert not [w for w in data["warnings"] if "passed over" in w]


def test_a_venv_in_a_folder_named_with_bytes_that_are_not_utf8(in_tmp: Path) -> None:
    """A byte that is not UTF-8 reaches Python as a lone surrogate, which the host takes and
    a snapshot has always recorded as itself: kept so (an escape would be a new path
    against every older snapshot of that venv), while a bidi mark beside it is escaped."""
    make_venv(in_tmp / "made")
    # uv makes no venv in such a folder: one made beside is moved there
    venv = Path(os.fsdecode(bytes(in_tmp) + b"/ven\xff" + BIDI.encode() + b"v"))
    os.rename(in_tmp / "made", venv)
    data = snapshot_of(venv)
    assert data["interpreter"]["prefix"] == f"{in_tmp}/ven\udcff\\u202ev"


def test_a_repo_in_a_folder_with_an_odd_name_is_read_again_by_a_diff(
    venv: Path, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The repo's folder is recorded as its escape; a diff sends that back, and the probe
    reads the repo it names (not a missing repo outside the working directory)."""
    from factories import make_git_repo

    repo = make_git_repo(in_tmp / f"pro{BIDI}j")
    monkeypatch.chdir(repo)
    data = snapshot_of(venv)
    assert [r["path"] for r in data["repos"]] == [f"{in_tmp}/pro\\u202ej"]
    (repo / "train.py").write_text("print('changed')\n")
    code, out, err = invoke("diff", "odd", "--python", str(venv))
    assert code == 1 and "dirty" in out, out + err


def test_a_kernel_that_names_itself_oddly_is_recorded_escaped(
    venv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """uname's release and version are whatever the kernel's build (or a shim) wrote: an
    escape or a bidi mark there made ``interpreter.markers`` refuse the whole report."""
    from envguard.probe.payload import local_package

    system = local_package().system
    odd = os.uname_result(("Li" + ESCAPE + "nux", "node", "6.1" + BIDI, "#1 " + ESCAPE, "x86"))
    monkeypatch.setattr(system.os, "uname", lambda: odd)
    report = probe_report(venv, os.environ)
    report["interpreter"] = system.interpreter(report["interpreter"]["site_packages"])
    validate_report(report, label="odd", returncode=0)
    markers = report["interpreter"]["markers"]
    assert markers["platform_release"] == "6.1\\u202e"
    assert markers["platform_version"] == "#1 \\x1b[2J"
    assert report["interpreter"]["os"] == "li\\x1b[2jnux"
