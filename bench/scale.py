"""Scale limits: a 100,000-package diff, a fleet of 100,000-package snapshots and a
200,000-line lockfile, each within 10 s (issue: untrusted input, item 11).

These are absolute limits, not ratios: no peer tool compares snapshots. The fixtures are
generated from a real snapshot of this venv (so every field looks like the field), inside a
fresh git work tree, and each command runs as a subprocess, median of ``--repeats`` runs.

    .venv/bin/python bench/scale.py [--repeats 3] [--hosts 4]
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

LIMIT_S = 10.0
PACKAGES = 100_000
LOCK_LINES = 200_000


def _snapshot(template: dict[str, Any], *, shift: int, name: str) -> dict[str, Any]:
    """``template`` with PACKAGES packages; ``shift`` moves a third of the versions and every
    fingerprint, so a diff between two shifts has one change per package."""
    snap = copy.deepcopy(template)
    snap["name"], snap["repos"], snap["caches"], snap["files"] = name, [], [], []
    base = template["packages"][0]
    packages = []
    for i in range(PACKAGES):
        pkg = dict(base, name=f"pkg-{i:06d}", display_name=f"pkg-{i:06d}")
        pkg["version"] = f"1.{(i * shift) % 3}.0"
        pkg["fingerprint"] = "%064x" % (i + shift * 7)
        packages.append(pkg)
    snap["packages"] = packages
    return snap


def fixtures(work: Path, envguard: str, hosts: int) -> None:
    env = dict(os.environ, GIT_CONFIG_GLOBAL="/dev/null")
    subprocess.run(["git", "init", "-q", str(work)], check=True, env=env)
    subprocess.run(
        [envguard, "snapshot", "--python", sys.executable, "--name", "template"],
        cwd=work,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    template = json.loads((work / "snapshots" / "template.json").read_text())
    for name, shift in (("a", 0), ("b", 1)):
        (work / f"{name}.json").write_text(json.dumps(_snapshot(template, shift=shift, name=name)))
    (work / "fleet").mkdir()
    for h in range(hosts):
        snap = _snapshot(template, shift=h % 3, name=f"gpu{h:02d}")
        (work / "fleet" / f"gpu{h:02d}.json").write_text(json.dumps(snap))
    lines = [f"pkg-{i:06d}==1.0.0\n" for i in range(LOCK_LINES)]
    (work / "requirements.txt").write_text("".join(lines))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=4)
    args = parser.parse_args()
    envguard = str(Path(sys.executable).with_name("envguard"))
    rows = []
    with tempfile.TemporaryDirectory(prefix="envguard-scale-") as tmp:
        work = Path(tmp)
        print("building fixtures ...", file=sys.stderr)
        fixtures(work, envguard, args.hosts)
        cases = [
            (
                f"diff, {PACKAGES:,} changed packages (table)",
                ["diff", "a.json", "--against", "b.json"],
            ),
            ("same, --format json", ["diff", "a.json", "--against", "b.json", "--format", "json"]),
            (f"fleet, {args.hosts} x {PACKAGES:,} packages (table)", ["fleet", "fleet"]),
            ("same, --format json", ["fleet", "fleet", "--format", "json"]),
            (
                f"check --lock, {LOCK_LINES:,}-line requirements.txt",
                ["check", "a.json", "--lock", "requirements.txt"],
            ),
        ]
        for label, argv in cases:
            samples = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                proc = subprocess.run([envguard, *argv], cwd=work, capture_output=True)
                samples.append(time.perf_counter() - start)
                if proc.returncode not in (0, 1):
                    label += f" (exit {proc.returncode}: {proc.stderr.decode()[-200:]})"
                    break
            median = statistics.median(samples)
            verdict = "PASS" if median <= LIMIT_S else "FAIL"
            rows.append((label, median, verdict))
            print(f"{label}: {median:.2f} s {verdict}", file=sys.stderr)
    print(f"| what | median of {args.repeats} | limit | |")
    print("|---|---|---|---|")
    for label, median, verdict in rows:
        print(f"| {label} | {median:.2f} s | {LIMIT_S:.0f} s | {verdict} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
