"""The compile cache forecast held to torch's own counters, on the CPU torch.

An FX graph cache is built by a small ``torch.compile``; then one key ingredient at a time
is changed and, before anything is compiled again, ``envguard diff`` forecasts whether the
cache will be used; then the compile runs in a fresh process and torch's own
``counters["inductor"]["fxgraph_cache_hit"]``/``_miss`` say whether it was. Each case has a
copy of the cache and a snapshot of its own, so the cases run two at a time.
The table this prints is docs/compile-cache.md's (``ENVGUARD_COMPILE_TABLE=FILE`` writes it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from field.corpus import MACHINE_WHEELS, envguard, load_json, rebuilt_torch, uv, uv_env

COMPILE = """
import json, time
import torch
from torch._dynamo.utils import counters

def f(x):
    return torch.sin(x) * 2 + x.cos()

started = time.monotonic()
torch.compile(f)(torch.randn(8))
print(json.dumps({
    "hit": counters["inductor"]["fxgraph_cache_hit"],
    "miss": counters["inductor"]["fxgraph_cache_miss"],
    "seconds": round(time.monotonic() - started, 1),
}))
"""
# One compile: a cold one takes 20-50 s here, the import of torch 15-25 s of it.
COMPILE_TIMEOUT = 300


@dataclass
class Case:
    name: str
    changed: str  # the ingredient, as the docs' table says it
    env: dict[str, str] = field(default_factory=dict)
    venv: str = "base"
    # What envguard says of the inductor cache: "hit", "miss" or "rebuild" (hits, then
    # the C++ kernels are compiled again).
    forecast: str = ""
    said: str = ""
    hit: int = 0
    miss: int = 0
    seconds: float = 0.0
    new_kernels: int = 0


def _clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The compile's environment: inductor's temporary folder, where it keeps its
    precompiled headers (155 MB each, one set per venv path), inside the test's own."""
    scratch = tmp / "tmpdir"
    scratch.mkdir(exist_ok=True)
    env = {
        k: v
        for k, v in uv_env().items()
        if not k.startswith(("TORCHINDUCTOR_", "TRITON_", "TORCH_COMPILE_", "CXX", "CC"))
    }
    env.update(TORCHINDUCTOR_FX_GRAPH_CACHE="1", TORCHINDUCTOR_COMPILE_THREADS="1")
    env.update(TMPDIR=str(scratch))
    env.update(extra)
    return env


def _kernels(cache: Path) -> int:
    return sum(1 for _ in cache.rglob("*.so"))


def _compile(python: Path, script: Path, env: dict[str, str]) -> dict[str, float]:
    done = subprocess.run(
        [str(python), str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=COMPILE_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _forecast(report: dict[str, object], cache: Path) -> tuple[str, str]:
    """("hit" | "miss" | "rebuild", the messages) for the inductor cache at ``cache``."""
    changes = [
        c
        for c in report["changes"]  # type: ignore[attr-defined]
        if c["section"] == "caches" and str(c["name"]).startswith(str(cache))
    ]
    kinds = {c["kind"] for c in changes}
    said = "; ".join(sorted(str(c["message"]).split(": ", 1)[-1] for c in changes))
    if kinds & {"will-miss", "stale", "cold"}:
        return "miss", said
    if "rebuild" in kinds:
        return "rebuild", said
    return "hit", said


def _run_case(case: Case, *, base: Path, tmp: Path, pythons: dict[str, Path], script: Path) -> Case:
    cache = tmp / "caches" / case.name
    shutil.copytree(base, cache, symlinks=True)
    good = tmp / f"{case.name}.json"
    env = _clean_env(tmp, TORCHINDUCTOR_CACHE_DIR=str(cache), TRITON_CACHE_DIR=str(tmp / "triton"))
    taken = envguard(
        "snapshot", "--python", str(pythons["base"]), "-o", str(good), env=env, cwd=tmp
    )
    assert taken.returncode == 0, taken.stderr
    live = {**env, **case.env}
    done = envguard(
        "diff", str(good), "--python", str(pythons[case.venv]), "--format", "json",
        env=live, cwd=tmp,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    case.forecast, case.said = _forecast(load_json(done.stdout), cache)
    before = _kernels(cache)
    counters = _compile(pythons[case.venv], script, live)
    case.hit, case.miss, case.seconds = (
        int(counters["hit"]),
        int(counters["miss"]),
        counters["seconds"],
    )
    case.new_kernels = _kernels(cache) - before
    return case


def _table(cold: float, cases: list[Case], tmp: Path) -> str:
    rows = [
        "| changed | envguard's forecast | torch: fxgraph hit / miss | new C++ kernels | compile s |"
        " agree |",
        "|---|---|---|---|---|---|",
        f"| (cold: the cache built) | | 0 / 1 | | {cold} | |",
    ]
    for c in cases:
        said = (f"{c.forecast}: {c.said}" if c.said else c.forecast).replace(str(tmp), "$TMP")
        rows.append(
            f"| {c.changed} | {said} | {c.hit} / {c.miss} | {c.new_kernels} | {c.seconds} |"
            f" {'yes' if _agrees(c) else 'NO'} |"
        )
    return "\n".join(rows) + "\n"


def _agrees(c: Case) -> bool:
    if c.forecast == "miss":
        return c.hit == 0 and c.miss >= 1
    if c.forecast == "rebuild":
        return c.hit >= 1 and c.miss == 0 and c.new_kernels > 0
    return c.hit >= 1 and c.miss == 0


def test_the_forecast_agrees_with_torchs_counters(field_env: Path) -> None:
    tmp = field_env
    env = uv_env()
    pythons: dict[str, Path] = {}
    venvs = (
        ("base", MACHINE_WHEELS, ()),
        ("cuda-build", rebuilt_torch("13.0"), ()),
        # triton from the registry beside the CPU torch: no GPU, so not in the graph key
        ("triton", MACHINE_WHEELS, ("triton==3.8.0",)),
        # copies, not links into the corpus's cache: one of its files is edited below
        ("edited", MACHINE_WHEELS, ("--link-mode=copy",)),
    )
    for name, links, more in venvs:
        venv = tmp / f"venv-{name}"
        uv("venv", "--quiet", "--python", sys.executable, str(venv), env=env)
        python = venv / "bin" / "python"
        uv(
            "pip", "install", "--quiet", "--python", str(python), "--find-links", str(links),
            "torch==2.13.0+cpu", *more, env=env,
        )  # fmt: skip
        pythons[name] = python
    site = next((tmp / "venv-edited" / "lib").glob("python3*/site-packages"))
    edited = site / "torch" / "_tensor_str.py"
    assert edited.stat().st_nlink == 1  # a copy of its own
    with edited.open("a") as f:
        f.write("# edited in place\n")
    # triton's key as envguard reads it (no import) is triton's own, hashed
    taken = envguard(
        "snapshot", "--python", str(pythons["triton"]), "-o", str(tmp / "triton-key.json"), env=env
    )
    assert taken.returncode == 0, taken.stderr
    digest = load_json((tmp / "triton-key.json").read_text())["compile"]["triton"]["digest"]  # type: ignore[index]
    code = "import hashlib; from triton.runtime.cache import triton_key as k;"
    code += " print(hashlib.sha256(k().encode()).hexdigest())"
    own = subprocess.run(
        [str(pythons["triton"]), "-I", "-c", code], capture_output=True, text=True, check=True
    )
    assert digest == own.stdout.strip()
    script = tmp / "compile_once.py"
    script.write_text(COMPILE)

    # Compilers: another name for the same g++ ($CXX), and g++ "upgraded" under its own
    # name (a g++ first on PATH that says it is another version, and compiles as g++).
    gxx = shutil.which("g++")
    assert gxx, "the field corpus needs g++ (torch inductor's C++ compiler)"
    wrap = tmp / "bin-wrap" / "cxx-wrapper"
    wrap.parent.mkdir()
    wrap.write_text(f'#!/bin/sh\nexec {gxx} "$@"\n')
    wrap.chmod(0o755)
    upgraded = tmp / "bin-upgraded" / "g++"
    upgraded.parent.mkdir()
    upgraded.write_text(
        '#!/bin/sh\ncase "$1" in --version|-v) echo "g++ (Upgraded) 99.1.0"; exit 0;; esac\n'
        f'exec {gxx} "$@"\n'
    )
    upgraded.chmod(0o755)

    base = tmp / "base-cache"
    started = time.monotonic()
    built = _compile(pythons["base"], script, _clean_env(tmp, TORCHINDUCTOR_CACHE_DIR=str(base)))
    assert built["miss"] == 1 and built["hit"] == 0, built
    cold = built["seconds"]
    cases = [
        Case("same", "nothing"),
        Case("cxx", "the compiler's name ($CXX: a wrapper of g++)", {"CXX": str(wrap)}),
        Case(
            "gxx-version",
            "the compiler's version (g++ upgraded under its name)",
            {"PATH": f"{upgraded.parent}{os.pathsep}{os.environ.get('PATH', os.defpath)}"},
        ),
        Case(
            "chunk",
            "an inductor variable (TORCHINDUCTOR_CPP_MIN_CHUNK_SIZE=256)",
            {"TORCHINDUCTOR_CPP_MIN_CHUNK_SIZE": "256"},
        ),
        Case(
            "threads",
            "a variable left out of the key (TORCHINDUCTOR_COMPILE_THREADS 1 -> 2)",
            {"TORCHINDUCTOR_COMPILE_THREADS": "2"},
        ),
        Case(
            "torch-build", "the torch build (2.13.0+cpu rebuilt for CUDA 13.0)", venv="cuda-build"
        ),
        Case("torch-edit", "a torch source file edited in place", venv="edited"),
        Case("triton", "triton 3.8.0 added, no GPU", venv="triton"),
    ]
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = list(
            pool.map(
                lambda c: _run_case(c, base=base, tmp=tmp, pythons=pythons, script=script), cases
            )
        )
    table = _table(cold, done, tmp)
    print(f"\n{table}(all in {time.monotonic() - started:.0f} s)")
    if os.environ.get("ENVGUARD_COMPILE_TABLE"):
        Path(os.environ["ENVGUARD_COMPILE_TABLE"]).write_text(table)
    forecasts = [c.forecast for c in done]
    assert forecasts == ["hit", "miss", "rebuild", "miss", "hit", "miss", "miss", "hit"], table
    assert all(_agrees(c) for c in done), table
