"""A warm probe of a real torch venv (CPU and CUDA builds, their nvidia-* and triton
wheels) loads no re: what it asks at every run (torch's version.py, the GPU libraries'
names, build tags, the loader's cache, the host layer, the variables it records) is told
by string operations, and re's import with enum was 8 ms of its CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from factories import steady_modules
from field.corpus import Corpus


@pytest.mark.parametrize("name", ["torch-cpu", "torch-cuda"])
def test_a_warm_probe_of_a_torch_venv_loads_no_re(
    name: str, corpus: Corpus, field_env: Path
) -> None:
    modules = steady_modules(str(corpus(name).python))
    assert "re" not in modules and "json" not in modules, sorted(modules)
