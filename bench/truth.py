"""What checking installed files against RECORD costs the probe: off, quick (the default)
and deep, side by side in one run, on a venv of real distributions, beside the floor: a
bare ``os.lstat`` loop over the same files, in the same interpreter.

    .venv/bin/python bench/truth.py [--python VENV_OR_PYTHON] [--repeats 9] [--cold]
                                    [--before OTHER_CHECKOUT/src]

The floor is timed inside a process of the venv's interpreter (``lstat`` of each file the
quick check looks at, read from the RECORDs as the check reads them), round-robin with the
modes; the goal (issue 33): quick <= off + 1.2 x floor.

Each mode runs the probe exactly as `envguard snapshot` sends it (the same payload, stdin,
``python -I -S -``), round-robin, with the distribution cache warm (one unmeasured run per
mode first; ``--cold``: an empty one for every run, as at the first snapshot after an
install); CPU is the probe process's user+system time, wall its elapsed time. Default
venv: the cached field-like fixture (bench/fixtures.real_venv). ``--before SRC``: another
checkout's probe (its ``src`` folder) runs in the same rounds, each side with a cache of its
own warmed first (until no bytecode is left to compare): a machine whose speed drifts by
10-20% between runs is compared with itself. A report, not a test: it always exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from envguard.probe.payload import probe_payload

MODES = ("off", "quick", "deep")


def _python(where: str) -> str:
    path = Path(where)
    return str(path / "bin" / "python") if path.is_dir() else str(path)


def payload_of(mode: str, src: str | None = None) -> bytes:
    """The probe's payload for ``mode``, as `envguard snapshot` sends it: this checkout's,
    or the one whose ``src`` folder is given."""
    args = {"verify": mode, "git": False, "files": [], "caches": []}
    if src is None:
        return probe_payload(args).encode()
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); "
        "from envguard.probe.payload import probe_payload; "
        "sys.stdout.write(probe_payload(json.loads(sys.argv[2])))"
    )
    return subprocess.run(
        [sys.executable, "-c", code, src, json.dumps(args)], capture_output=True, check=True
    ).stdout


def run_probe(
    python: str, mode: str, cold: bool = False, payload: bytes | None = None, xdg: str | None = None
) -> tuple[float, float, dict[str, object]]:
    """(cpu seconds, wall seconds, report) of one probe run in ``mode``; ``cold``: with an
    empty distribution cache; ``payload``: another's (payload_of); ``xdg``: its cache."""
    if payload is None:
        payload = payload_of(mode)
    env = dict(os.environ)
    if xdg is not None:
        env["XDG_CACHE_HOME"] = xdg
    scratch = tempfile.mkdtemp(prefix="envguard-truth-") if cold else None
    if scratch is not None:
        env["XDG_CACHE_HOME"] = scratch
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [python, "-I", "-S", "-"],
        input=payload,
        capture_output=True,
        check=False,
        env=env,
    )
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if proc.returncode != 0:
        raise SystemExit(f"probe failed ({mode}): {proc.stdout[-300:]!r} {proc.stderr[-300:]!r}")
    return cpu, wall, json.loads(proc.stdout)


# Run by the venv's interpreter: the paths on stdin, one a line; prints the loop's seconds.
_FLOOR = """
import os, sys, time
paths = sys.stdin.read().split("\\n")
lstat = os.lstat
start, cpu = time.perf_counter(), time.process_time()
for path in paths:
    try:
        lstat(path)
    except OSError:
        pass
print(time.perf_counter() - start, time.process_time() - cpu)
"""


def quick_paths(report: dict[str, object], python: str) -> tuple[list[str], list[str]]:
    """The files the quick check lstats: each RECORD's rows of files that run, and the
    bytecode of ``python``'s tag in the ``__pycache__`` of every folder those rows name
    that RECORD does not hash (loaded.py compares each with its source: one lstat each
    when its folder is unchanged)."""
    import csv

    from envguard.probe.payload import local_package

    tag = subprocess.run(
        [python, "-I", "-S", "-c", "import sys; print(sys.implementation.cache_tag)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    runs = local_package().records.runs
    out: list[str] = []
    pycs: list[str] = []
    packages = report["packages"]
    assert isinstance(packages, list)
    for dist in packages:
        if not dist["metadata_dir"].endswith(".dist-info"):
            continue
        record = Path(dist["location"], dist["metadata_dir"], "RECORD")
        try:
            text = record.read_bytes().decode("utf-8", "surrogateescape")
        except OSError:
            continue
        rows = [r for r in csv.reader(text.splitlines()) if len(r) == 3 and r[2]]
        hashed = {r[0] for r in rows}
        files = [r[0] for r in rows if runs(r[0]) and not r[0].startswith("../")]
        out += [dist["location"] + "/" + f for f in files]
        for folder in sorted({f.rpartition("/")[0] for f in files}):
            cache = Path(dist["location"], folder, "__pycache__")
            lead = folder + "/" if folder else ""
            try:
                names = sorted(n for n in os.listdir(cache) if f".{tag}." in n)
            except OSError:
                continue
            pycs += [
                f"{cache}/{n}"
                for n in names
                if n.endswith(".pyc") and f"{lead}__pycache__/{n}" not in hashed
            ]
    return out, sorted(set(pycs))


def run_floor(python: str, paths: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of a bare ``os.lstat`` loop over ``paths`` in ``python`` (its
    start-up not counted)."""
    proc = subprocess.run(
        [python, "-I", "-S", "-c", _FLOOR],
        input="\n".join(paths).encode("utf-8", "surrogateescape"),
        capture_output=True,
        check=True,
    )
    wall, cpu = proc.stdout.split()
    return float(wall), float(cpu)


def summary(report: dict[str, object]) -> str:
    packages = report["packages"]
    assert isinstance(packages, list)
    checked = sum((p.get("on_disk") or {}).get("checked", 0) for p in packages)
    odd = {
        p["name"]: {k: v for k, v in p["on_disk"].items() if k != "checked" and v}
        for p in packages
        if p.get("on_disk") and any(p["on_disk"][k] for k in ("modified", "missing", "added"))
    }
    clashes = report.get("clashes") or []
    return (
        f"{len(packages)} dists, {checked} files checked, {len(clashes)} clashes,"  # type: ignore[arg-type]
        f" unowned {report.get('unowned')}, not as RECORD: {json.dumps(odd)[:600]}"
    )


def _warm(python: str, mode: str, payload: bytes, xdg: str) -> None:
    """Probe until the cache at ``xdg`` holds every verdict (no bytecode left uncompared:
    a first run compares for at most 3 s), at most 10 times."""
    for _ in range(10):
        report = run_probe(python, mode, payload=payload, xdg=xdg)[2]
        warnings = report.get("warnings") or []
        assert isinstance(warnings, list)
        if not any("not compared with their source" in w for w in warnings):
            return


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", help="the venv or interpreter measured")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--cold", action="store_true", help="an empty cache for every run")
    parser.add_argument("--before", help="another checkout's src folder, run beside this one")
    args = parser.parse_args(argv)
    if args.python:
        python = _python(args.python)
    else:
        sys.path.insert(0, str(Path(__file__).parent))
        import fixtures

        python = str(fixtures.real_venv(fixtures.find_tools(), log=print).venv / "bin" / "python")
    modes = args.modes.split(",")
    # (label, payload by mode, cache folder): this checkout's with the user's cache, or, with
    # --before, both sides with caches of their own
    sides: list[tuple[str, dict[str, bytes], str | None]] = [
        ("", {m: payload_of(m) for m in modes}, None)
    ]
    if args.before:
        sides = [
            (label, {m: payload_of(m, src) for m in modes}, tempfile.mkdtemp(prefix="truth-"))
            for label, src in (("", None), (" (before)", args.before))
        ]
    rows = [(mode + label, label, mode) for label, _, _ in sides for mode in modes]
    cpu: dict[str, list[float]] = {row: [] for row, _, _ in rows}
    wall: dict[str, list[float]] = {row: [] for row, _, _ in rows}
    report: dict[str, object] = {}
    for label, payloads, xdg in sides:  # warm each cache, and say what each mode found
        for mode in modes:
            if xdg is not None:
                _warm(python, mode, payloads[mode], xdg)
            report = run_probe(python, mode, payload=payloads[mode], xdg=xdg)[2]
            print(f"{mode}{label}: {summary(report)}")
    records, pycs = quick_paths(report, python)
    paths = records + pycs
    floor: list[tuple[float, float]] = []
    for round_ in range(args.repeats):
        # Each side first in every other round: a run after the floor's loop (or after the
        # other side's) must not always be the same side's.
        for label, payloads, xdg in sides if round_ % 2 == 0 else sides[::-1]:
            for mode in modes:
                c, w, _report = run_probe(python, mode, args.cold, payloads[mode], xdg)
                cpu[mode + label].append(c)
                wall[mode + label].append(w)
        floor.append(run_floor(python, paths))
    for _, _, xdg in sides:
        if xdg is not None:
            shutil.rmtree(xdg, ignore_errors=True)
    base = statistics.median(cpu[modes[0]])
    lstat_wall = statistics.median(f[0] for f in floor)
    lstat_cpu = statistics.median(f[1] for f in floor)
    print(f"\nprobe of {python}, {args.repeats} runs each, medians")
    print(f"floor: a bare os.lstat loop over the {len(paths)} files quick looks at "
          f"({len(records)} RECORD rows, {len(pycs)} pycs compared with their source): "
          f"{lstat_wall * 1e3:.1f} ms wall, {lstat_cpu * 1e3:.1f} ms CPU")  # fmt: skip
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    print(
        "| mode | CPU | wall | CPU / "
        + modes[0]
        + " | (wall - off) / floor | (CPU - off) / floor |"
    )
    print("|---|---|---|---|---|---|")
    for row, label, _ in rows:
        c, w = statistics.median(cpu[row]), statistics.median(wall[row])
        # per run: the median of each round's (mode - off), not the difference of medians
        over_wall = over_cpu = float("nan")
        if "off" in modes:
            pairs = zip(wall[row], wall["off" + label], strict=True)
            over_wall = statistics.median(a - b for a, b in pairs) / lstat_wall
            pairs = zip(cpu[row], cpu["off" + label], strict=True)
            over_cpu = statistics.median(a - b for a, b in pairs) / lstat_cpu
        print(
            f"| {row} | {c * 1e3:.1f} ms | {w * 1e3:.1f} ms | {c / base:.2f}x"
            f" | {over_wall:.2f} | {over_cpu:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
