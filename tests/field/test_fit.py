"""The fit check on real wheels: PyPI's torchvision (built for torch 2.14.1 and CUDA 13)
installed with --no-deps beside the machine's torch 2.13.0+cpu is named before anything is
imported, and the loader itself agrees; every untouched member of the corpus fits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from field.corpus import Corpus, cpu_torch_venv, envguard, load_json, uv

MEMBERS = sorted(Corpus.SPECS)


def _in_ld_cache(name: str) -> bool:
    try:
        listed = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return any(line.strip().startswith(name + " ") for line in listed.stdout.splitlines())


def test_torchvision_for_another_torch_is_named_before_import(
    corpus: Corpus, field_env: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "torchvision-split"
    py = str(cpu_torch_venv(venv))
    uv("pip", "install", "--quiet", "--python", py, "--no-deps", "torchvision==0.29.1")
    done = envguard("fit", "--python", py, "--format", "json")
    assert done.returncode == 1, done.stdout + done.stderr
    doc = load_json(done.stdout)
    entries = {e["path"]: e for e in doc["broken"]}  # type: ignore[union-attr]
    entry = entries["torchvision/_C_stable.so"]
    assert entry["dist"] == "torchvision 0.29.1"
    assert {"libc10_cuda.so", "libtorch_cuda.so"} <= set(entry["missing"])
    # A machine with a CUDA 13 runtime in ld.so.cache gives the extension that one.
    assert ("libcudart.so.13" in entry["missing"]) == (not _in_ld_cache("libcudart.so.13"))
    assert "aoti_torch_get_current_cuda_stream" in entry["symbols"]
    assert entry["symbols_from"] == "torch 2.13.0+cpu"
    assert entry["message"].startswith("torchvision/_C_stable.so cannot load: needs ")
    # The oracle: the loader itself, after torch's own libraries loaded, refuses it for a
    # library the check named.
    site = next((venv / "lib").glob("python3*/site-packages"))
    oracle = subprocess.run(
        [
            py,
            "-c",
            "import ctypes, sys, torch\n"
            "try:\n    ctypes.CDLL(sys.argv[1])\n"
            "except OSError as exc:\n    print(exc)\n    sys.exit(3)\n",
            str(site / "torchvision" / "_C_stable.so"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert oracle.returncode == 3, oracle.stdout + oracle.stderr
    assert any(name in oracle.stdout for name in entry["missing"]), oracle.stdout


@pytest.mark.parametrize("name", MEMBERS)
def test_an_untouched_member_fits(name: str, corpus: Corpus, field_env: Path) -> None:
    member = corpus(name)
    done = envguard("fit", "--python", str(member.python), "--format", "json")
    doc = load_json(done.stdout)
    assert doc["broken"] == [], done.stdout
    assert done.returncode == 0, done.stderr
    if name.startswith("torch"):
        assert doc["checked"] >= 1  # torch/_C at least


def test_real_fatbins_are_read_and_held_to_the_gpu(corpus: Corpus, field_env: Path) -> None:
    """torch 2.14.1 and torchvision 0.29.1 (CUDA 13) from the registry: torchvision's
    fatbins name the archs the wheel was built for, and a GPU outside them is named."""
    from envguard import api
    from envguard.compare.sections.fit import no_kernel
    from envguard.snapshots.models import CompileKey

    venv = corpus.root / "vision-archs"  # on the cache's filesystem: uv links, not copies
    uv("venv", "--quiet", "--python", sys.executable, str(venv), env=corpus.env)
    py = str(venv / "bin" / "python")
    uv("pip", "install", "--quiet", "--python", py, "torch==2.14.1", "torchvision==0.29.1")
    snap = api.fit(python=py)
    assert snap.fit is not None and snap.fit.broken == ()
    archs = {a.path: a for a in snap.fit.archs}
    vision = archs["torchvision/_C_stable.so"]
    assert vision.dist == "torchvision 0.29.1"
    # The archs cuobjdump lists for this wheel: cubins up to sm_120, PTX for compute_120.
    assert vision.cubins == (75, 80, 86, 90, 100, 120)
    assert vision.ptx == (120,)

    def on(*caps: str) -> dict[str, str]:
        update = {"compile": CompileKey(capabilities=caps)}
        return dict(no_kernel(snap.model_copy(update=update)))

    # No GPU recorded: nothing judged. An H100, an L4 (8.9: sm_86 runs), a B300 (10.3).
    assert on() == {} and on("9.0", "8.9", "10.3", "12.1") == {}
    assert on("7.0")["torchvision/_C_stable.so"] == (
        "torchvision/_C_stable.so has no kernel for sm_70 (built for sm_75, sm_80, sm_86,"
        " sm_90, sm_100, sm_120; PTX only for compute_120, newer than the GPU)"
    )
    assert "torchvision/_C_stable.so" in on("9.0", "11.0")
