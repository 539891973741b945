"""`envguard fit` on a real venv holding an extension built against another torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from elflibs import CUBIN, c10, entry, extension, fatbin, fatbin_extension, needs_gcc, torch_site
from envguard.cli import app
from factories import make_venv

runner = CliRunner()
pytestmark = needs_gcc

SAID = (
    "vision/_C.so cannot load: 1 symbol torch 2.13.0+cpu does not export (c10_gone) [vision 0.29.1]"
)


def broken_venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    make_venv(venv)
    site = next((venv / "lib").glob("python3*/site-packages"))
    torch_site(site, "c10_a")
    extension(site, c10(tmp_path / "other" / "libc10.so", "c10_a", "c10_gone"), "c10_a", "c10_gone")
    return venv


def test_fit_names_the_extension_and_exits_1(tmp_path: Path) -> None:
    venv = broken_venv(tmp_path)
    result = runner.invoke(app, ["fit", "--python", str(venv)])
    assert result.exit_code == 1, result.output
    assert SAID in result.stdout
    assert "1 of 2 extensions that use torch or CUDA cannot load" in result.stdout
    result = runner.invoke(app, ["fit", "--python", str(venv), "--format", "json"])
    doc = json.loads(result.stdout)
    assert result.exit_code == 1 and doc["loads"] is False and doc["checked"] == 2
    (entry,) = doc["broken"]
    assert entry["symbols"] == ["c10_gone"] and entry["message"] + " [vision 0.29.1]" == SAID


def test_fit_as_a_process_exit_codes(tmp_path: Path) -> None:
    venv = broken_venv(tmp_path)
    command = [sys.executable, "-m", "envguard", "fit", "--python"]
    done = subprocess.run([*command, str(venv)], capture_output=True, text=True, check=False)
    assert done.returncode == 1 and SAID in done.stdout
    other = c10(
        next((venv / "lib").glob("python3*/site-packages")) / "torch/lib/libc10.so",
        "c10_a",
        "c10_gone",
    )
    assert other.is_file()
    done = subprocess.run([*command, str(venv)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 extensions that use torch or CUDA: all load" in done.stdout
    done = subprocess.run(
        [*command, str(tmp_path / "nowhere")], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2 and done.stderr.startswith("error: ")


def test_fit_names_an_extension_with_no_kernel_for_the_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node whose nvidia-smi says 9.0, an extension built for sm_75 and sm_86 only."""
    venv = tmp_path / "venv"
    make_venv(venv)
    site = next((venv / "lib").glob("python3*/site-packages"))
    torch_site(site, "c10_a")
    blob = tmp_path / "fatbin.bin"
    blob.write_bytes(fatbin(entry(CUBIN, 75), entry(CUBIN, 86)))
    fatbin_extension(site, blob)
    tools = tmp_path / "tools"
    tools.mkdir()
    smi = tools / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\ncase "$*" in\n  *compute_cap*) echo 9.0 ;;\n'
        "  *) echo 'NVIDIA H100 80GB HBM3, 580.82.07' ;;\nesac\n"
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    said = "vision/_C.so has no kernel for sm_90 (built for sm_75, sm_86; no PTX to JIT)"
    result = runner.invoke(app, ["fit", "--python", str(venv)])
    assert result.exit_code == 1, result.output
    assert said in result.stdout
    assert "2 extensions that use torch or CUDA: all load; 1 with no kernel" in result.stdout
    result = runner.invoke(app, ["fit", "--python", str(venv), "--format", "json"])
    doc = json.loads(result.stdout)
    assert result.exit_code == 1 and doc["loads"] is False and doc["no_kernel"] == [said]
    # An sm_86 GPU runs it.
    smi.write_text(smi.read_text().replace("9.0", "8.6"))
    result = runner.invoke(app, ["fit", "--python", str(venv)])
    assert result.exit_code == 0, result.output
