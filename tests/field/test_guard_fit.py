"""guard reads the wheels an install would bring before it runs, on the registry's wheels:
PyPI's torchvision 0.29.1 (built for torch 2.14.1 and CUDA 13) beside the machine's torch
2.13.0+cpu is refused for the extension it would leave unable to load; beside the torch it
was built for, it passes."""

from __future__ import annotations

import subprocess
from pathlib import Path

from field.corpus import UV, Corpus, cpu_torch_venv, envguard, uv

TORCHVISION = (UV, "pip", "install", "--no-deps", "torchvision==0.29.1")


def _freeze(venv: Path) -> str:
    return uv("pip", "freeze", "--python", str(venv / "bin" / "python")).stdout


def _guard(venv: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return envguard("guard", *options, "--venv", str(venv), "--", *TORCHVISION)


def test_torchvision_for_another_torch_is_refused_before_the_install(
    field_env: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "cpu-torch"
    cpu_torch_venv(venv)
    before = _freeze(venv)
    done = _guard(venv)
    assert done.returncode == 1, done.stdout + done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith(
        "this install would leave torchvision/_C_stable.so unable to load: needs "
    )
    assert "aoti_torch_get_current_cuda_stream" in first
    assert "refused (--fail-on critical): nothing was installed or removed" in done.stderr
    assert _freeze(venv) == before


def test_torchvision_beside_the_torch_it_was_built_for_passes(
    corpus: Corpus, field_env: Path
) -> None:
    member = corpus("torch-cuda")
    before = _freeze(member.venv)
    done = _guard(member.venv, "--preview")  # the member is shared: nothing installed
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("this install would add 1 package")
    assert _freeze(member.venv) == before
