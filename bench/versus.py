"""Two envguard installs side by side: snapshot, live diff, the CI gate, --help (field-like venv).

    .venv/bin/python bench/versus.py --before OTHER/.venv/bin/envguard [--after THIS/bin/envguard]
                                     [--repeats 9] [--venv V]

"after" is the envguard beside this interpreter; "before" is another install (a worktree of
an older commit with its own venv: `git worktree add ../base REV`, then the Quickstart's
install there). Both run round-robin in one process on the same cached venv of real
distributions (bench/fixtures.real_venv), from inside a small git work tree, with bytecode
compiled on both sides; each side diffs against a snapshot it wrote itself (an older
envguard may not read a newer file): as a person reads it (a table), as a program does
(``--format json``) and as CI gates on it (``check --format github``). `uv pip freeze`
runs beside them as the yardstick.
A report, not a test: it always exits 0.
"""

from __future__ import annotations

import argparse
import compileall
import sys
import tempfile
from pathlib import Path

import fixtures
from measure import Command, measure, static, timings_table
from run import Report, _given_venv


def _compile_install(envguard: str) -> None:
    """Byte-compile the install (its venv, and the source tree an editable install uses)."""
    import subprocess

    python = Path(envguard).parent / "python"
    where = subprocess.run(
        [str(python), "-c", "import envguard, os; print(os.path.dirname(envguard.__file__))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    compileall.compile_dir(where, quiet=2)
    fixtures.compile_site(python.parent.parent)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the other install's envguard")
    parser.add_argument(
        "--after",
        help="this side's envguard (default: the one beside this interpreter); give one"
        " installed as --before's was: a venv made by `python -m venv` starts setuptools'"
        " distutils hook at every start, one made by `uv venv` does not",
    )
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument(
        "--venv", help="the venv both sides read instead of the real-distributions fixture"
    )
    args = parser.parse_args(argv)
    report = Report()
    tools = fixtures.find_tools()
    sides = {"before": args.before, "after": args.after or tools.envguard}
    for envguard in sides.values():
        _compile_install(envguard)
    if args.venv:
        real = _given_venv(tools, Path(args.venv))
    else:
        real = fixtures.real_venv(tools, log=report.log)
    venv = str(real.venv)
    with tempfile.TemporaryDirectory(prefix="envguard-versus-") as tmp:
        repo = Path(tmp) / "repo"
        fixtures.git_work_tree(repo)
        env = fixtures.bench_env(repo, tools)
        commands: list[Command] = [
            static(
                "uv pip freeze", [tools.uv, "pip", "freeze", "--python", venv], cwd=repo, env=env
            )
        ]
        for side, envguard in sides.items():
            # A cache of its own per side: the probe's caches are tagged with the version
            # that wrote them, and the two sides would discard each other's at every run.
            env = {**env, "XDG_CACHE_HOME": str(Path(tmp) / f"cache-{side}")}
            warmed = fixtures.warm_probe_caches(envguard, real.venv, env=env, cwd=repo)
            report.log(f"{side}: the probe's caches were warm after {warmed} snapshots")
            snap = repo / f"{side}.json"
            fixtures.run(
                [envguard, "snapshot", "--python", venv, "--out", str(snap)], env=env, cwd=repo
            )
            snapshot = [envguard, "snapshot", "--python", venv, "--out", "-"]
            diff = [envguard, "diff", str(snap), "--python", venv]
            gate = [envguard, "check", str(snap), "--python", venv, "--format", "github"]
            commands += [
                static(f"snapshot ({side})", snapshot, cwd=repo, env=env),
                static(f"live diff ({side})", diff, cwd=repo, env=env, ok=(0, 1)),
                static(
                    f"diff json ({side})", [*diff, "--format", "json"], cwd=repo, env=env, ok=(0, 1)
                ),
                static(f"CI gate ({side})", gate, cwd=repo, env=env, ok=(0, 1)),
                static(f"--help ({side})", [envguard, "--help"], cwd=repo, env=env),
            ]
        timings = measure(commands, args.repeats, log=report.log)
    uv = timings["uv pip freeze"].median
    print(f"venv: {venv}, {real.distributions} distributions; repeats: {args.repeats} (medians)")
    print(f"before: {args.before}\nafter:  {sides['after']}\n")
    print(f"{'what':<12} {'before':>10} {'after':>10} {'after/before':>13} {'after/uv':>9}")
    for what in ("snapshot", "live diff", "diff json", "CI gate", "--help"):
        before, after = timings[f"{what} (before)"].median, timings[f"{what} (after)"].median
        if before and after and uv:
            print(
                f"{what:<12} {before * 1000:>8.1f}ms {after * 1000:>8.1f}ms"
                f" {after / before:>12.3f}x {after / uv:>8.2f}x"
            )
    print("\nall commands:")
    print(timings_table(list(timings.values())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
