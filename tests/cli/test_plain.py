"""A plain `envguard snapshot` runs without typer (prestart.plain_snapshot reads its argv,
recording.run_plain runs it): it must read argv exactly as typer does, and say and exit
exactly as the typer program does."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envguard import recording, terminal
from envguard.prestart import PLAIN_FLAGS, PLAIN_VALUED, plain_snapshot

PY = sys.executable


@pytest.mark.parametrize(
    "argv",
    [
        ["snapshot"],
        ["snapshot", "--python", "/v", "--out", "-"],
        ["snapshot", "--python=/v", "-o", "f.json", "--force", "--name", "good"],
        ["snapshot", "--name", "a", "--name", "b", "--no-force", "--force"],  # the last wins
        ["snapshot", "--metric", "tok_s=21500", "--metric=loss=0.5", "--note", "after fix"],
        ["snapshot", "--out=-", "-q", "--force", "--no-force"],
        ["snapshot", "--note", "", "--quiet", "--python", "venv dir/with space"],
        ["snapshot", "--out", "-", "--name", "x=y"],
        ["snapshot", "--repo", ".", "--file", "model.py", "--file=train.py", "--cache", "c"],
        ["snapshot", "--repo=a", "--repo", "b", "--root", "/r", "--root=/s", "--deep"],
        ["snapshot", "--keep-files", "--keep-cache", "--store", "st", "--deep", "--no-deep"],
        ["snapshot", "--no-keep-files", "--no-keep-cache", "-o", "x.json", "--store=s"],
    ],
)
def test_a_plain_snapshot_is_read_as_typer_reads_it(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What record() is called with, through typer and without it, for the same argv."""
    from typer.testing import CliRunner

    from envguard.cli import app

    calls: list[dict[str, Any]] = []

    def recorded(where: object, **kwargs: object) -> None:
        calls.append({"where": where, **kwargs})

    monkeypatch.setattr(recording, "record", recorded)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["envguard", *argv])  # the command line both record
    monkeypatch.setattr(sys, "stdout", io.StringIO())  # run_plain guards standard output
    hushed: list[tuple[object, io.TextIOBase]] = []
    monkeypatch.setattr(terminal, "_HUSHED", hushed)  # -q: this test's own null device
    try:
        for run in ("typer", "plain"):
            monkeypatch.setattr(terminal, "_QUIET", [])
            if run == "typer":
                result = CliRunner().invoke(app, argv)
                assert result.exit_code == 0, result.output
            else:
                options = plain_snapshot(argv)
                assert options is not None
                assert recording.run_plain(options, argv) == 0
    finally:
        for _, sink in hushed:
            sink.close()
    typer_call, plain_call = calls
    typer_call = {k: v for k, v in typer_call.items() if v}  # () from one, [] from the other
    plain_call = {k: v for k, v in plain_call.items() if v}
    assert plain_call == typer_call
    assert options["quiet"] == ("-q" in argv or "--quiet" in argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["snapshot", "--via", "ssh gpu01"],  # what typer has and the plain reading has not
        ["snapshot", "--hosts", "a,b"],
        ["snapshot", "--timeout", "5"],  # numbers: typer's, through the one number reader
        ["snapshot", "--jobs", "2"],
        ["snapshot", "--pid", "1"],
        ["snapshot", "--help"],
        ["snapshot", "-v"],
        ["snapshot", "extra"],
        ["snapshot", "--"],
        ["snapshot", "--python"],  # no value: typer's own error
        ["snapshot", "-ofile"],
        ["snapshot", "-o=file"],
        ["snapshot", "--name", "-q"],  # click would take -q as the name
        ["snapshot", "--nam", "x"],
        ["-q", "snapshot"],
        ["diff", "good"],
        [],
    ],
)
def test_anything_else_is_left_to_typer(argv: list[str]) -> None:
    assert plain_snapshot(argv) is None


def test_shell_completion_is_left_to_typer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("_ENVGUARD_COMPLETE", "complete_bash")
    assert plain_snapshot(["snapshot"]) is None


def test_the_plain_options_are_typers_snapshot_options() -> None:
    """Each option read without typer is one of typer's snapshot options, of the same kind
    (a value, a flag)."""
    from envguard.cli import app
    from envguard.cli.program import command_line

    assert app is not None
    group = command_line()
    command = group.get_command(group.make_context("envguard", ["snapshot"]), "snapshot")
    valued = {o for p in command.params if not p.is_flag for o in (*p.opts, *p.secondary_opts)}
    flags = {o for p in command.params if p.is_flag for o in (*p.opts, *p.secondary_opts)}
    assert set(PLAIN_VALUED) <= valued
    assert set(PLAIN_FLAGS) - {"-q", "--quiet"} <= flags  # -q: the root's too (program.py)


_ENTRY = """
import atexit, sys
atexit.register(lambda: sys.stderr.write("typer loaded: %s\\n" % ("typer" in sys.modules)))
sys.argv = ["envguard", *sys.argv[1:]]
from envguard.__main__ import main
main()
"""


def _entry(cwd: Path, *argv: str, stdout: Any = subprocess.PIPE) -> tuple[int, str, list[str]]:
    """(exit code, stdout, stderr's lines) of the console entry point run with ``argv``."""
    proc = subprocess.run(
        [PY, "-c", _ENTRY, *argv],
        stdout=stdout, stderr=subprocess.PIPE, text=True, cwd=cwd, timeout=120, check=False,
    )  # fmt: skip
    return proc.returncode, proc.stdout or "", proc.stderr.splitlines()


_LOADED = """
import atexit, sys
before = set(sys.modules)
heavy = ("typing", "dataclasses", "inspect", "ipaddress", "hmac", "subprocess", "datetime", "typer")
real = lambda m: m in sys.modules and type(sys.modules[m]).__name__ == "module"
atexit.register(lambda: sys.stderr.write(
    "loaded: %s\\n" % " ".join(m for m in heavy if real(m) and m not in before)
))
sys.argv = ["envguard", *sys.argv[1:]]
from envguard.__main__ import main
main()
"""


def test_a_plain_snapshot_loads_nothing_its_document_does_not_need(tmp_path: Path) -> None:
    """A snapshot's own process works beside its probe on a two-core machine: each module
    it imports is CPU the probe's shares wait for. None of these is needed to write the
    document: typer (click), typing, subprocess (a local probe is spawned without it),
    hmac (OpenSSL; the signature's HMAC is made with CPython's own SHA-256: see
    test_signing for hashlib, which the payload's code key loads until its sources
    settle), datetime (the time module spells the time)."""
    proc = subprocess.run(
        [PY, "-c", _LOADED, "snapshot", "--python", PY, "--out", "-"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["signature"]
    assert proc.stderr.splitlines()[-1] == "loaded: dataclasses"


def test_a_plain_snapshot_is_written_without_typer_and_as_typer_writes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "good.json"
    code, stdout, stderr = _entry(tmp_path, "snapshot", "--python", PY, "--out", str(out))
    assert code == 0, stderr
    assert stdout.startswith(f"wrote {out}: Python ") and stdout.count("\n") == 1
    assert stderr[-1] == "typer loaded: False"
    assert json.loads(out.read_text())["signature"]
    code, shown, _ = _entry(tmp_path, "show", str(out))  # read back by typer's commands
    assert code == 0 and shown.startswith("snapshot")
    code, stdout, stderr = _entry(tmp_path, "snapshot", "--python", PY, "--out", "-", "-q")
    assert code == 0 and stderr == ["typer loaded: False"]
    assert json.loads(stdout)["interpreter"]["executable"]
    # After a good run, as the README has it: the work tree and a script, still no typer.
    from factories import git, make_git_repo

    work = make_git_repo(tmp_path / "work")  # train.py, committed
    code, stdout, stderr = _entry(
        work, "snapshot", "--python", PY, "--out", "-", "--repo", ".",
        "--file", "train.py", "--metric", "tok_s=21500",
    )  # fmt: skip
    assert code == 0 and stderr[-1] == "typer loaded: False", stderr
    doc = json.loads(stdout)
    heads = {r["path"]: r.get("head") for r in doc["repos"]}  # (and editable installs')
    assert heads[str(work)] == git(work, "rev-parse", "HEAD")
    assert [f["path"] for f in doc["files"]] == [str(work / "train.py")]
    assert doc["metrics"] == {"tok_s": 21500}
    # The same refusals, the same words, the same exit codes, typer or not (--timeout 60:
    # typer's, the default's value).
    for typer_too in ([], ["--timeout", "60"]):
        loaded = f"typer loaded: {bool(typer_too)}"
        code, stdout, stderr = _entry(tmp_path, "snapshot", "--out", str(out), *typer_too)
        assert (code, stdout) == (2, "")
        assert stderr == [
            f"error: {out}: already exists",
            "hint: choose another name or path (--force replaces it, if it is yours to replace)",
            loaded,
        ]
        code, stdout, stderr = _entry(tmp_path, "snapshot", "--metric", "bad", *typer_too)
        assert (code, stderr) == (
            2,
            ["error: --metric 'bad': expected NAME=VALUE, e.g. tok_s=21500", loaded],
        )
        # The "wrote" line as click.echo writes it: on an ASCII stdout (a C locale) too, and
        # nothing (not a traceback) when standard output is closed.
        ascii_out = subprocess.run(
            [PY, "-c", _ENTRY, "snapshot", "--python", PY, "-o", "a::b.json", "--force",
             *typer_too],
            capture_output=True, cwd=tmp_path, timeout=120, check=False,
            env={**os.environ, "PYTHONIOENCODING": "ascii"},
        )  # fmt: skip
        assert ascii_out.returncode == 0, ascii_out.stderr
        assert ascii_out.stdout.startswith(b"wrote a:\xe2\x80\x8b:b.json: Python ")
        (tmp_path / "closed.json").unlink(missing_ok=True)
        closed = subprocess.run(
            ["sh", "-c", 'exec "$@" >&-', "sh", PY, "-c", _ENTRY, "snapshot", "--python", PY,
             "-o", "closed.json", *typer_too],
            capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
        )  # fmt: skip
        assert (closed.returncode, closed.stderr) == (0, loaded + "\n")
        assert json.loads((tmp_path / "closed.json").read_text())["signature"]
        with open("/dev/full", "w") as full:
            code, _, stderr = _entry(tmp_path, "snapshot", "--python", PY, "--out", "-",
                                     *typer_too, stdout=full)  # fmt: skip
        assert (code, stderr) == (1, ["error: cannot write the output: No space left on device",
                                      loaded])  # fmt: skip


def test_modules_deferred_by_the_command_line_are_the_real_ones_once_used() -> None:
    """__main__ puts stand-ins for inspect and ipaddress in place (dataclasses and
    urllib.parse import them, and a snapshot never uses them): whatever uses one then
    (typer, pydantic, a URL with an IPv6 host) gets the real module, through the stand-in
    it imported too, and sys.modules holds the real one from then on."""
    code = (
        "import sys\n"
        "from envguard.__main__ import _defer_imports\n"
        "_defer_imports()\n"
        "import dataclasses, inspect\n"
        "assert type(sys.modules['inspect']).__name__ == 'Deferred'\n"
        "def f(a, *, b=2): pass\n"
        "print(inspect.signature(f), inspect.isfunction(f))\n"
        "import inspect as again\n"
        "print(type(sys.modules['inspect']).__name__, again.getdoc(f) is None)\n"
        "@dataclasses.dataclass\n"
        "class NoDoc:\n"
        "    x: int = 1\n"
        "print(NoDoc.__doc__)\n"
        "from urllib.parse import urlsplit\n"
        "print(urlsplit('http://[::1]:8080/x').hostname, type(sys.modules['ipaddress']).__name__)\n"
    )
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "(a, *, b=2) True", "module True", "NoDoc(x: int = 1)", "::1 module"
    ]  # fmt: skip
