"""The house's size rule: a module is readable in one sitting. One over 800 lines has more
than one concern (recovery/bisect.py had four at 971 lines): split it where they part."""

from __future__ import annotations

from pathlib import Path

import envguard

SRC = Path(envguard.__file__).parent
LIMIT = 800


def test_no_module_over_800_lines() -> None:
    sizes = {
        str(path.relative_to(SRC.parent)): len(path.read_text(encoding="utf-8").splitlines())
        for path in SRC.rglob("*.py")
    }
    assert len(sizes) > 100, "the walk found too few modules: is SRC the package?"
    over = {name: n for name, n in sorted(sizes.items()) if n > LIMIT}
    assert not over, f"modules over {LIMIT} lines (split each by concern): {over}"


# Where and how to measure: one frozen value (snapshots.measure.Measure), not its parts.
MEASURE_PARTS = {"python", "via", "timeout", "allow", "root", "deep", "pid"}
# The functions that may still take two or more of them, each for its reason.
TAKES_PARTS = {
    # typer commands declare the options; each builds the value once (cli.program.measure)
    "cli/capture.py:snapshot", "cli/compare.py:diff", "cli/compare.py:check",
    "cli/compare.py:fit", "cli/restore.py:restore", "cli/restore.py:bisect",
    "cli/guard.py:guard",
    "cli/program.py:measure",  # the one function from the options to the value
    # the public API keeps the keywords scripts were written with, beside measure=
    "api/capture.py:snapshot", "api/capture.py:snapshot_document", "api/capture.py:fit",
    "api/compare.py:diff", "api/compare.py:check", "api/compare.py:diff_locks",
    "api/hosts.py:snapshot_hosts", "api/records.py:keep",
    "api/_shared.py:settings",  # those keywords into the value, once
    # below the value: the request from resolved parts, and the probe's own channels
    "snapshots/live.py:request_like", "probe/channel.py:__init__", "probe/runner.py:__init__",
    # the installer's interpreter asked for its config files: not where envguard measures
    "guard/target.py:pip_files",
}  # fmt: skip


def test_where_to_measure_travels_as_one_value() -> None:
    """A function past the command line takes the Measure, not python=, via=, timeout=, ...
    (the last flag before the value, --deep, touched 22 files, 7 only to pass it on)."""
    import ast

    found = set()
    for path in SRC.rglob("*.py"):
        if "target" in path.relative_to(SRC).parts:
            continue  # the probe's far side: stdlib only, its own arguments
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                a = node.args
                names = {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
                if len(names & MEASURE_PARTS) >= 2:
                    found.add(f"{path.relative_to(SRC).as_posix()}:{node.name}")
    assert not found - TAKES_PARTS, "take a Measure (envguard.snapshots.measure) instead"
    assert not TAKES_PARTS - found, "no longer takes them: drop it from TAKES_PARTS"
