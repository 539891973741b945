"""A probe of an unchanged venv with its distribution cache warm: the report byte for byte
what the cold probe printed, and none of the cold probe's costly reads and starts again (no
ELF file opened, no nvcc or compiler started)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from elflibs import NVCC, build_lib, build_program, extension, needs_gcc, torch_site
from envguard.probe.payload import probe_payload
from factories import make_dist_info, make_git_repo, make_venv

NCCL = "nvidia/nccl/lib/libnccl.so.2"


def _before_main(payload: str, code: str) -> str:
    """``payload`` with ``code`` run after the target package is installed, before main."""
    call = payload.index("_code = _pkg.main.main(")  # its last lines
    return payload[:call] + code + payload[call:]


def counting_payload(args: dict[str, object], log: Path) -> str:
    """The probe's payload, with every open of an ELF file (by the library, fit and fatbin
    readers) written to ``log``."""
    count = (
        f"_log = open({str(log)!r}, 'a')\n"
        "def _counted(real):\n"
        "    def opened(path, *rest):\n"
        "        _log.write(path + '\\n'); _log.flush()\n"
        "        return real(path, *rest)\n"
        "    return opened\n"
        "for _m in (_pkg.elf, _pkg.symbols, _pkg.fatbin):\n"
        "    _m.open_regular = _counted(_m.open_regular)\n"
    )
    return _before_main(probe_payload(args), count)


@pytest.fixture
def gpu_venv(tmp_path: Path) -> Path:
    """A venv with a "torch" (libc10, torch/_C), an extension needing a symbol it lacks, and
    an NCCL carrying its version string: every reader of ELF files has work."""
    venv = tmp_path / "venv"
    make_venv(venv)
    site = next((venv / "lib").glob("python*/site-packages"))
    torch_site(site, "c10_a")
    extension(site, site / "torch" / "lib" / "libc10.so", "c10_a")
    build_lib(site / NCCL, "libnccl.so.2", text="NCCL version 2.30.7+cuda13.3")
    make_dist_info(site, "nvidia-nccl-cu13", "2.30.7", record=f"{NCCL},sha256=x,1\n")
    return venv


@needs_gcc
@pytest.mark.parametrize("verify", ["off", "quick"])
def test_a_warm_probe_prints_the_cold_report_and_reads_no_elf_file(
    verify: str, gpu_venv: Path, tmp_path: Path
) -> None:
    repo = make_git_repo(tmp_path / "proj", {"train.py": "print('train')\n"})
    (repo / "train.py").write_text("print('changed')\n")
    (repo / "notes.txt").write_text("untracked\n")
    tools = tmp_path / "tools"
    tools.mkdir()
    runs = tmp_path / "tool-runs"
    build_program(tools / "nvcc", runs, NVCC)
    cxx = build_program(tools / "g++", runs, "g++ (Test) 12.2.0\n")
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(tmp_path / "xdg"),
        "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
        "CXX": str(cxx),
    }
    args = {
        "verify": verify,
        "git": True,
        "repos": [str(repo)],
        "files": [],
        "caches": [],
        "default_caches": False,
        "cache_quiet_seconds": 0,  # the venv is seconds old: kept all the same
    }
    reports, opened = [], []
    for n in range(2):
        log = tmp_path / f"elf-{n}.log"
        log.touch()
        proc = subprocess.run(
            [str(gpu_venv / "bin" / "python"), "-I", "-S", "-"],
            input=counting_payload(args, log).encode(),
            capture_output=True,
            env=env,
            cwd=repo,
            timeout=120,
            check=True,
        )
        reports.append(proc.stdout)
        opened.append(log.read_text().splitlines())
    cold, warm = reports
    report = json.loads(cold)
    assert "error" not in report, report
    assert [lib["embedded_version"] for lib in report["libraries"]] == ["2.30.7+cuda13.3"]
    assert report["fit"]["checked"] == 2 and report["repos"][0]["dirty"] is True
    assert report["accelerator"]["nvcc"] == "13.0.88"
    assert report["compile"]["cxx"]["version"] == "g++ (Test) 12.2.0"
    assert warm == cold, "the warm probe's report differs from the cold one's"
    assert opened[0], "the cold probe read no ELF file: the test measures nothing"
    assert opened[1] == [], f"the warm probe read ELF files: {opened[1]}"
    assert len(runs.read_text().splitlines()) == 2, "nvcc or the compiler started again"


def test_a_warm_probe_loads_neither_subprocess_nor_openssl(tmp_path: Path) -> None:
    """What a probe imports is paid at every probe: git is started without subprocess (its
    imports were a twentieth of a probe), and hashlib (OpenSSL) loads only where something
    is hashed (here nothing: a clean repo, no triton, every record kept)."""
    venv = tmp_path / "venv"
    make_venv(venv)
    repo = make_git_repo(tmp_path / "proj", {"train.py": "print('train')\n"})
    (repo / "notes.txt").write_text("untracked\n")
    loaded = tmp_path / "modules"
    args = {"git": True, "repos": [str(repo)], "files": [], "caches": [], "verify": "off"}
    args.update(default_caches=False, cache_quiet_seconds=0)
    record = (  # once main returned (the probe then ends without atexit: os._exit)
        "_real_main = _pkg.main.main\n"
        "def _recorded(args):\n"
        "    try:\n"
        "        return _real_main(args)\n"
        "    finally:\n"
        f"        open({str(loaded)!r}, 'w').write(' '.join(sys.modules))\n"
        "_pkg.main.main = _recorded\n"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    for _ in range(2):
        proc = subprocess.run(
            [str(venv / "bin" / "python"), "-I", "-S", "-"],
            input=_before_main(probe_payload(args), record).encode(),
            capture_output=True,
            env=env,
            timeout=120,
            check=True,
        )
    report = json.loads(proc.stdout)
    assert report["repos"][0]["untracked"] == 1 and report["repos"][0]["dirty"] is False
    modules = set(loaded.read_text().split())
    assert "envguard_probe.gitrepos" in modules, "the record of modules is not the probe's"
    assert not modules & {"subprocess", "hashlib", "_hashlib"}, modules & {"subprocess", "hashlib"}


def test_a_warm_probe_starts_its_check_without_re_or_json(tmp_path: Path) -> None:
    """Everything before the installed-files check starts is on the way to every answer
    (the check's shares wait for it): re (with enum) and json (which imports re) were 10
    to 15 ms of it. A warm probe reads its argument and its distribution cache, checks
    the kept records (names, console scripts, bytecode folders) and prepares the check
    without loading them."""
    venv = tmp_path / "venv"
    python = make_venv(venv)
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "my_tool").mkdir()
    (site / "my_tool" / "__init__.py").write_text("VALUE = 1\n")
    subprocess.run([str(python), "-m", "compileall", "-q", str(site / "my_tool")], check=True)
    size = (site / "my_tool" / "__init__.py").stat().st_size
    make_dist_info(
        site,
        "My_Tool.x",
        "1.0",
        metadata="Metadata-Version: 2.1\nName: My_Tool.x\nVersion: 1.0\nRequires-Dist: six\n\n",
        record=f"my_tool/__init__.py,sha256=x,{size}\n../../../bin/my-tool,sha256=y,10\n",
    )
    loaded = tmp_path / "modules"
    record = (  # the modules loaded when the check's shares are about to start
        "_pkg.checking.spare_core = lambda: True\n"  # shares, however busy the machine
        "_real_start = _pkg.checking.Checking.start\n"
        "def _recorded(self, *args):\n"
        f"    open({str(loaded)!r}, 'w').write(' '.join(sys.modules))\n"
        "    return _real_start(self, *args)\n"
        "_pkg.checking.Checking.start = _recorded\n"
    )
    args = {"git": False, "files": [], "caches": [], "verify": "quick"}
    args.update(default_caches=False, cache_quiet_seconds=0)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    reports = []
    for _ in range(3):  # cold, then warm: the cache holds what the cold run read
        proc = subprocess.run(
            [str(python), "-I", "-S", "-"],
            input=_before_main(probe_payload(args), record).encode(),
            capture_output=True,
            env=env,
            timeout=120,
            check=True,
        )
        reports.append(json.loads(proc.stdout))
    dist = next(p for p in reports[-1]["packages"] if p["name"] == "my-tool-x")
    assert dist["on_disk"]["checked"] == 1 and dist["requires"] == ["six"]
    assert reports[-1]["packages"] == reports[0]["packages"]
    modules = set(loaded.read_text().split())
    assert "envguard_probe.installed" in modules, "the record of modules is not the probe's"
    assert not modules & {"re", "enum", "json"}, modules & {"re", "enum", "json"}
