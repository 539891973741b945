"""What the compile cache's key ingredients cost the probe (issue 36), side by side with
what triton itself pays for the same value, in one run.

- ``triton digest``: the probe's sha256 of triton_key(), recomputed from triton's files
  without importing it (probe/target/compilekey.py), for the triton in ``--site``;
- ``triton_key()``: triton's own, in a fresh process (``import triton.runtime.cache``, then
  the call: it reads libtriton whole), never writing bytecode into ``--site``;
- ``cache builds``: who built an inductor cache's entries, over ``--entries`` copies of one
  real FX graph entry (``--entry``) laid out as inductor does.

Best of ``--repeats``.

    .venv/bin/python bench/compile_key.py --site VENV/lib/python3.11/site-packages \\
        --entry CACHE/fxgraph/xx/KEY/ENTRY [--entries 200] [--repeats 5]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from factories import load_target


def best(repeats: int, work: object) -> float:
    """The fastest of ``repeats`` calls of ``work``, in seconds."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--site", required=True, type=Path)
    parser.add_argument("--entry", required=True, type=Path)
    parser.add_argument("--entries", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    target = load_target()
    info = next(args.site.glob("triton-*.dist-info"))
    version = info.name.removeprefix("triton-").removesuffix(".dist-info")
    dist = {
        "name": "triton",
        "version": version,
        "location": str(args.site),
        "metadata_dir": str(info),
        "shadowed": False,
    }
    ours = best(args.repeats, lambda: target.triton_key([dist], []))
    python = args.site.parents[2] / "bin" / "python"
    code = "from triton.runtime.cache import triton_key; triton_key()"
    theirs = best(
        args.repeats,
        lambda: subprocess.run(
            [str(python), "-I", "-B", "-c", code],
            check=True,
            env={"PYTHONDONTWRITEBYTECODE": "1"},
        ),
    )
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.entries):
            folder = Path(tmp) / "fxgraph" / f"{i % 50:02d}" / f"f{i:05d}"
            folder.mkdir(parents=True)
            shutil.copy(args.entry, folder / "entry")
        builds = best(args.repeats, lambda: target.cache_builds(tmp, []))
    size = args.entry.stat().st_size
    print(f"triton {version} digest (probe)      {ours * 1000:8.1f} ms")
    print(f"triton_key() (import + call)     {theirs * 1000:8.1f} ms  ({theirs / ours:.0f}x)")
    print(f"cache builds, {args.entries} entries of {size} B {builds * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
