"""Replay the case envguard exists for, end to end, offline, in a few seconds.

A training venv ran at 21.5k tok/s. Then an inference stack was installed into it, torch was
swapped from its cu128 to its cu130 build, the compile cache was deleted and a debugging hack
was left in the model script. This script builds that story from tiny fake wheels in a temp
dir (the fake torch raises on import: nothing here imports it), then recovers with envguard:

    envguard snapshot --keep-files --keep-cache   after the good run
    envguard diff       shows what drifted, worst first (exit 1)
    envguard restore    one command: packages rebuilt and verified, the model script and
                        the compile cache put back (hashes checked), a variables file
    envguard diff       clean (exit 0) with the variables file sourced
    envguard restore --via ./fake-pct   the same recovery inside a (fake) container, where
                        the checkout lives at another path

Run: python examples/seed-story/story.py [--keep]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from envguard.testing import make_simple_index, make_torch_wheel, make_wheel
from envguard.tools import find_uv

GOOD = {
    "transformers": "4.46.0",
    "datasets": "3.1.0",
    "safetensors": "0.4.5",
    "wandb": "0.18.7",
    "boto3": "1.35.0",
    "nvidia-nccl-cu12": "2.21.5",
}
INFERENCE_STACK = {
    "sglang": "0.4.0",
    "flashinfer-python": "0.2.0",
    "orjson": "3.10.12",
    "uvloop": "0.21.0",
    "outlines": "0.1.11",
}
# The stand-in benchmark: the inference stack in the venv costs the throughput.
BENCH = """\
import importlib.util
slow = importlib.util.find_spec("sglang") is not None
print("tok_s=%d" % (4300 if slow else 21500))
"""
WARMUP = """\
import os, pathlib
cache = pathlib.Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]) / "fxgraph"
cache.mkdir(parents=True, exist_ok=True)
for i in range(8):
    (cache / f"graph{i}.bin").write_bytes(b"compiled kernel " * 256)
print("warm-up: compiled 8 graphs")
"""


def step(title: str) -> None:
    print(f"\n=== {title}", flush=True)


def sh(*argv: str | Path, cwd: Path, env: dict[str, str], expect: int = 0) -> str:
    """Run a command, echo it and its output; fail the story on an unexpected exit code."""
    print("$ " + " ".join(str(a) for a in argv), flush=True)
    proc = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    sys.stdout.write(proc.stdout)
    sys.stdout.write(proc.stderr)
    if proc.returncode != expect:
        raise SystemExit(f"story failed: exit {proc.returncode}, expected {expect}")
    return proc.stdout


def main(keep: bool = False) -> int:
    root = Path(tempfile.mkdtemp(prefix="envguard-seed-story-"))
    uv = find_uv()
    envguard = (sys.executable, "-m", "envguard")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PIP_", "UV_INDEX", "UV_EXTRA_INDEX")) and k != "VIRTUAL_ENV"
    }
    env.update(
        UV_OFFLINE="1",
        UV_NO_CONFIG="1",
        UV_PYTHON_DOWNLOADS="never",
        UV_CACHE_DIR=str(root / "uv-cache"),
        NO_COLOR="1",
        COLUMNS="120",
        TORCHINDUCTOR_CACHE_DIR=str(root / "torchinductor"),
        TRITON_CACHE_DIR=str(root / "triton"),
    )
    try:
        wh = root / "wheelhouse"
        cu128 = make_torch_wheel(wh, "2.11.0+cu128", "12.8")
        cu130 = make_torch_wheel(wh, "2.11.0+cu130", "13.0")
        for name, version in {**GOOD, **INFERENCE_STACK}.items():
            make_wheel(wh, name, version)
        torch_index = make_simple_index(
            root / "pytorch-index", {"cu128": [cu128], "cu130": [cu130]}
        )
        offline = ["--no-index", "--find-links", str(wh), "--offline"]

        step("a good training run: venv, model code, warm compile cache")
        sh(uv, "venv", "--quiet", "--python", sys.executable, ".venv", cwd=root, env=env)
        sh(
            uv,
            "pip",
            "install",
            "--quiet",
            *offline,
            "--python",
            ".venv",
            "torch==2.11.0+cu128",
            *(f"{n}=={v}" for n, v in GOOD.items()),
            cwd=root,
            env=env,
        )
        code = root / "code"
        code.mkdir()
        (code / "model.py").write_text("def attention(q, k, v):\n    return (q @ k.T) @ v\n")
        (code / "warmup.py").write_text(WARMUP)
        git = ["git", "-C", str(code), "-c", "user.name=Trainer", "-c", "user.email=t@example.com"]
        sh(*git, "init", "--quiet", cwd=root, env=env)
        sh(*git, "add", "-A", cwd=root, env=env)
        sh(*git, "commit", "--quiet", "-m", "known-good model", cwd=root, env=env)
        sh(".venv/bin/python", code / "warmup.py", cwd=root, env=env)
        env["NCCL_P2P_DISABLE"] = "1"  # part of the good run's environment
        sh(
            *envguard,
            "snapshot",
            "--name",
            "good",
            "--keep-files",
            "--keep-cache",
            "--repo",
            code,
            "--file",
            code / "model.py",
            "--metric",
            "tok_s=21500",
            "--note",
            "8 GPUs, warm inductor cache",
            cwd=root,
            env=env,
        )

        step("the drift: inference stack, torch swapped to cu130, cache deleted, a hack")
        sh(
            uv,
            "pip",
            "install",
            "--quiet",
            *offline,
            "--python",
            ".venv",
            *(f"{n}=={v}" for n, v in INFERENCE_STACK.items()),
            cwd=root,
            env=env,
        )
        sh(
            uv,
            "pip",
            "install",
            "--quiet",
            "--offline",
            "--index-url",
            f"{torch_index}/cu130",
            "--reinstall-package",
            "torch",
            "--python",
            ".venv",
            "torch==2.11.0+cu130",
            cwd=root,
            env=env,
        )
        shutil.rmtree(root / "torchinductor")
        with (code / "model.py").open("a") as fh:
            fh.write("\n# debugging monkey-patch\nimport builtins; builtins.DEBUG_ATTN = True\n")
        env["NCCL_P2P_DISABLE"] = "0"

        step("envguard diff: what changed since 21.5k tok/s, worst first")
        sh(*envguard, "diff", "good", cwd=root, env=env, expect=1)

        step("envguard bisect: which change costs the throughput?")
        (root / "bench.py").write_text(BENCH)
        check = ("--run", "python bench.py", "--metric", "tok_s", "--min", "20000")
        sources = (*offline, "--torch-index", torch_index)
        out = sh(*envguard, "bisect", "good", "--python", ".venv", *check, *sources,
                 cwd=root, env=env)  # fmt: skip
        verdict = next((line for line in out.splitlines() if line.startswith("bisect ")), "")
        if "it is" not in verdict or "sglang" not in verdict:
            raise SystemExit("story failed: bisect did not name sglang")

        step("envguard restore: packages, model script, compile cache, variables")
        restore = ("restore", "good", "--venv", ".venv", *offline, "--torch-index", torch_index)
        sh(*envguard, *restore, cwd=root, env=env)  # the plan: nothing changes
        sh(*envguard, *restore, "--execute", "--no-backup", cwd=root, env=env)

        step("envguard diff, variables file sourced: provably the good environment again")
        sourced = f". ./good.env.sh && exec {' '.join(envguard)} diff good"
        out = sh("sh", "-c", sourced, cwd=root, env=env, expect=0)
        if "no drift" not in out:
            raise SystemExit("story failed: the final diff is not clean")

        step("a race lands in the training code: bisect says it is not the environment")
        # The benchmark reads the model from the directory it runs in (the worktree).
        race = root / "bench_race.py"
        race.write_text(
            "print('tok_s=%d' % (4300 if 'race' in open('model.py').read() else 21500))\n"
        )
        with (code / "model.py").open("a") as fh:
            fh.write("# a race: two streams share a buffer\n")
        sh(*git, "commit", "--quiet", "-am", "overlap the all-reduce (the race)", cwd=root, env=env)
        good = root / "snapshots" / "good.json"
        run_race = ("--run", f"python {race}", *check[2:])
        out = sh(*envguard, "bisect", good, "--python", root / ".venv", *run_race, *sources,
                 "--repo", code, cwd=code, env=env)  # fmt: skip
        if "not the cause" not in out or "(the race)" not in out:
            raise SystemExit("story failed: bisect did not name the commit")
        sh(*git, "reset", "--quiet", "--hard", "HEAD~1", cwd=root, env=env)

        step("the same recovery in a (fake) container, its checkout at another path")
        container(root, code, envguard, env, offline, torch_index)
        print("\nstory complete: any remaining failure is in the code, not the environment")
        return 0
    finally:
        if keep:
            print(f"(kept {root})")
        else:
            shutil.rmtree(root, ignore_errors=True)


def container(
    root: Path,
    code: Path,
    envguard: tuple[str, ...],
    env: dict[str, str],
    offline: list[str],
    torch_index: str,
) -> None:
    """A prefix that runs the command as `pct exec` would, in the container's own working
    directory: the checkout there is a clone at another path, polluted the same way."""
    box = root / "container"
    box.mkdir()
    prefix = root / "fake-pct"
    prefix.write_text(f'#!/bin/sh\ncd {box} && exec "$@"\n')
    prefix.chmod(0o755)
    clone = box / "code"
    sh("git", "clone", "--quiet", code, clone, cwd=root, env=env)
    with (clone / "model.py").open("a") as fh:
        fh.write("\nimport builtins; builtins.DEBUG_ATTN = True\n")
    sh(
        *envguard,
        "restore",
        "good",
        "--via",
        prefix,
        "--python",
        sys.executable,
        "--venv",
        box / "venv",
        "--root",
        clone,
        *offline,
        "--torch-index",
        torch_index,
        "--execute",
        cwd=root,
        env=env,
    )
    # A prefix that sources the variables file restore wrote there, as a shell in the
    # container would (pct exec 200 -- sh -c '. ./good.env.sh && exec "$@"' sh ...).
    sourcing = root / "fake-pct-sourced"
    sourcing.write_text(f'#!/bin/sh\ncd {box} && . ./good.env.sh && exec "$@"\n')
    sourcing.chmod(0o755)
    venv_python = box / "venv" / "bin" / "python"
    diff = ("diff", "good", "--via", sourcing, "--python", venv_python, "--root", clone)
    out = sh(*envguard, *diff, cwd=root, env=env, expect=0)
    # Clean in every section; only the venv's own path differs (info: it lives elsewhere).
    if "critical" in out or "warning" in out:
        raise SystemExit("story failed: the container's diff is not clean")


if __name__ == "__main__":
    sys.exit(main(keep="--keep" in sys.argv[1:]))
