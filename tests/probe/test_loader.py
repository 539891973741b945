"""The probe's compiled code kept in the user's cache: the same report with or without it,
and a code file anyone else could have written (or one that does not fit) is never run."""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envguard.probe.payload import PACKAGE, code_key, entry_sources, probe_payload


def probe(xdg: Path) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-"],
        input=probe_payload({"default_caches": False, "fingerprint_cache": False}),
        capture_output=True,
        text=True,
        env={**os.environ, "XDG_CACHE_HOME": str(xdg)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    report: dict[str, object] = json.loads(proc.stdout)
    return report


def code_file(xdg: Path) -> Path:
    (found,) = (xdg / "envguard").glob(f"code-{code_key('main')}-*.bin")
    return found


def planted(marker: Path) -> bytes:
    """Code objects under the probe's own module names that only touch ``marker``."""
    evil = f"open({str(marker)!r}, 'w').write('ran')\n"
    files = [f"<{PACKAGE}/{name}.py>" for name, _ in entry_sources("main")]
    return marshal.dumps(tuple(compile(evil, f, "exec") for f in files))


def test_the_kept_code_gives_the_same_report(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    cold = probe(xdg)
    kept = code_file(xdg)
    assert kept.stat().st_mode & 0o777 == 0o600
    assert (xdg / "envguard").stat().st_mode & 0o777 == 0o700
    warm = probe(xdg)

    def same(report: dict[str, Any]) -> dict[str, Any]:
        # How many pycs are still to compare depends on the clock (a budget per run): the
        # rest of the report may not.
        kept = [w for w in report.get("warnings", []) if "bytecode files were not" not in w]
        return {k: v for k, v in report.items() if k != "elapsed"} | {"warnings": kept}

    assert same(warm) == same(cold)
    assert kept.stat().st_mtime_ns == code_file(xdg).stat().st_mtime_ns  # used, not rewritten


@pytest.mark.parametrize("damage", ["garbage", "truncated", "other names", "fifo"])
def test_damaged_or_mismatched_code_is_compiled_again(tmp_path: Path, damage: str) -> None:
    xdg = tmp_path / "xdg"
    honest = probe(xdg)
    kept = code_file(xdg)
    data = kept.read_bytes()
    kept.unlink()
    if damage == "garbage":
        kept.write_bytes(b"\x00not marshal" * 50)
    elif damage == "truncated":
        kept.write_bytes(data[: len(data) // 2])
    elif damage == "other names":
        kept.write_bytes(marshal.dumps((compile("x = 1", "<other/mod.py>", "exec"),)))
    elif damage == "fifo":
        os.mkfifo(kept)
    kept.chmod(0o600)
    assert probe(xdg)["packages"] == honest["packages"]


@pytest.mark.parametrize("how", ["group-writable file", "world-writable folder", "symlinked"])
def test_code_someone_else_could_have_written_never_runs(tmp_path: Path, how: str) -> None:
    xdg = tmp_path / "xdg"
    probe(xdg)
    kept = code_file(xdg)
    marker = tmp_path / "ran"
    if how == "symlinked":  # the cache folder is a link into a folder the attacker fills
        elsewhere = tmp_path / "elsewhere"
        (xdg / "envguard").rename(elsewhere)
        (elsewhere / kept.name).write_bytes(planted(marker))
        (xdg / "envguard").symlink_to(elsewhere)
    else:
        kept.write_bytes(planted(marker))
        if how == "group-writable file":
            kept.chmod(0o664)
        else:
            (xdg / "envguard").chmod(0o777)
    report = probe(xdg)
    assert not marker.exists()
    assert report["packages"]  # the probe compiled its own code and ran
