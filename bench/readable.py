"""Readable drift, measured: what the verdict and the install groups add to a diff of an
sglang-style pollution (156 changes), `envguard log` over 1,000 snapshots, `--help`.

Absolute limits from the readable-drift issue (30 ms, 1 s, 100 ms); the fixtures are made
from a real snapshot of this venv inside a fresh git work tree.

    .venv/bin/python bench/readable.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _pollution(template: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A good snapshot of 300 packages, and the same after an install that pulled in 155
    packages and moved torch: the shape of the real sglang pollution."""
    base = template["packages"][0]
    good = copy.deepcopy(template)
    good["packages"] = [
        dict(base, name=f"dep{i:03d}", display_name=f"dep{i:03d}", version="1.0", requires=[])
        for i in range(300)
    ]
    bad = copy.deepcopy(good)
    pulled = [f"new{i:03d}" for i in range(155)]
    bad["packages"] += [
        dict(base, name=n, display_name=n, version="1.0", requires=[]) for n in pulled
    ]
    bad["packages"].append(
        dict(base, name="sglang", display_name="sglang", version="0.5.23", requires=pulled)
    )
    return good, bad


def _time(fn: Any, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    envguard = str(Path(sys.executable).with_name("envguard"))
    # Bytecode first (PYTHONDONTWRITEBYTECODE may be set): else every run compiles envguard.
    import compileall

    import fixtures

    fixtures.compile_site(Path(sys.prefix))
    compileall.compile_dir(str(Path(__file__).resolve().parents[1] / "src"), quiet=2)
    rows = []
    with tempfile.TemporaryDirectory(prefix="envguard-readable-") as tmp:
        work = Path(tmp)
        subprocess.run(["git", "init", "-q", str(work)], check=True)
        subprocess.run(
            [envguard, "snapshot", "--python", sys.executable, "--name", "template"],
            cwd=work,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        template = json.loads((work / "snapshots" / "template.json").read_text())

        from envguard.compare.causes import CAUSED_KINDS, group_changes
        from envguard.compare.engine import Collector, diff
        from envguard.compare.policy import Policy
        from envguard.compare.sections import REGISTRY
        from envguard.compare.verdict import verdict
        from envguard.snapshots.models import Snapshot

        good_raw, bad_raw = _pollution(template)
        good, bad = Snapshot.model_validate(good_raw), Snapshot.model_validate(bad_raw)
        drift = diff(good, bad)
        changes = len(drift.changes)

        def sections_only() -> None:
            for section in REGISTRY:
                section.compare(Collector(Policy(), section=section.name), good, bad)

        def readable() -> None:
            caused = {c.name for c in drift.changes if c.kind in CAUSED_KINDS}
            causes = group_changes(bad, caused)
            verdict(good, bad, drift.changes, causes, Policy())

        full = _time(lambda: diff(good, bad), args.repeats)
        extra = _time(readable, args.repeats)
        base = _time(sections_only, args.repeats)
        rows.append((f"verdict + groups on a {changes}-change drift", extra, 0.030))
        rows.append(
            (
                f"(the whole in-process diff: {full * 1000:.1f} ms; sections alone {base * 1000:.1f} ms)",
                None,
                None,
            )
        )

        folder = work / "snapshots"
        for i in range(1000):
            snap = copy.deepcopy(template)
            snap["name"] = f"run{i:04d}"
            snap["created"] = f"2026-{1 + i // 28 % 12:02d}-{1 + i % 28:02d}T{i % 24:02d}:00:00Z"
            snap["metrics"] = {"tok_s": 21500 - i}
            (folder / f"run{i:04d}.json").write_text(json.dumps(snap))
        env = {**os.environ, "COLUMNS": "200"}

        def log() -> None:
            subprocess.run(
                [envguard, "log", "--metric", "tok_s"],
                cwd=work,
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
            )

        rows.append(
            ("envguard log --metric tok_s over 1,000 snapshots", _time(log, args.repeats), 1.0)
        )

        def help_() -> None:
            subprocess.run([envguard, "--help"], check=True, stdout=subprocess.DEVNULL)

        rows.append(("envguard --help", _time(help_, args.repeats), 0.100))
    print(f"| what | median of {args.repeats} | limit | |")
    print("|---|---|---|---|")
    for label, value, limit in rows:
        if value is None:
            print(f"| {label} | | | |")
            continue
        verdict_ = "PASS" if limit is None or value <= limit else "FAIL"
        print(f"| {label} | {value * 1000:.1f} ms | {limit * 1000:.0f} ms | {verdict_} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
