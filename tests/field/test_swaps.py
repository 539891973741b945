"""I2 and I3 for the incident's first step: torch swapped for another build of the same
version (PyPI's CUDA builds carry no local label; cu128 and cu130 of one release share a
version string). diff names it with its cause; restore brings the good build back, every
file of torch equal to its RECORD."""

from __future__ import annotations

import sys
from pathlib import Path

from field.corpus import (
    MACHINE_WHEELS,
    envguard,
    load_json,
    rebuilt_torch,
    record_mismatches,
    uv,
    uv_env,
)


def test_a_same_version_torch_build_swap_is_named_and_restored(field_env: Path) -> None:
    env = uv_env()
    venv = field_env / ".venv"
    python = str(venv / "bin" / "python")
    uv("venv", "--quiet", "--python", sys.executable, str(venv), env=env)
    links = ("--find-links", str(MACHINE_WHEELS))
    uv("pip", "install", "--quiet", "--python", python, *links, "torch==2.13.0+cpu", env=env)
    taken = envguard("snapshot", "--name", "good", "--python", python, env=env)
    assert taken.returncode == 0, taken.stderr

    rebuilt = rebuilt_torch("13.0")
    swap = ("--reinstall-package", "torch", "--no-index", "--find-links", str(rebuilt))
    uv("pip", "install", "--quiet", "--python", python, *swap, "torch==2.13.0+cpu", env=env)
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert "cuda: Optional[str] = '13.0'" in (site / "torch" / "version.py").read_text()

    done = envguard("diff", "good", "--python", python, "--format", "json", env=env)
    report = load_json(done.stdout)
    assert done.returncode == 1, done.stderr
    critical = [c for c in report["changes"] if c["severity"] == "critical"]  # type: ignore[union-attr]
    torch_lines = " ".join(str(c["message"]) for c in critical if "torch" in str(c["name"]))
    assert "13.0" in torch_lines, critical  # the cause: the CUDA the new build was made for

    restored = envguard(
        "restore",
        "good",
        "--execute",
        "--venv",
        str(venv),
        "--find-links",
        str(MACHINE_WHEELS),
        env=env,
    )
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert record_mismatches(site, {"torch"}) == {}
    assert "cuda: Optional[str] = None" in (site / "torch" / "version.py").read_text()
    again = envguard("diff", "good", "--python", python, env=env)
    assert again.returncode == 0, again.stdout
