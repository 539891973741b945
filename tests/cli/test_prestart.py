"""The probe starts before typer loads (envguard.prestart), on a guess from argv; the command
takes it over only when it asks for exactly that probe, and a guess it did not take is
stopped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envguard.prestart import FLAGS, VALUED, guess
from envguard.snapshots import request as capture


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["snapshot"], ("snapshot", None, None)),
        (["snapshot", "--python", "/v", "--out", "-", "--force"], ("snapshot", "/v", None)),
        (["snapshot", "--python=/v", "-o", "f", "--metric", "tok_s=1"], ("snapshot", "/v", None)),
        (["diff", "good", "--python", "/v", "--format", "json"], ("diff", "/v", "good")),
        (["diff"], None),  # the newest snapshot: found once, by the command
        # Anything that may change what is measured, or how: no guess.
        (["snapshot", "--via", "ssh gpu01"], None),
        (["snapshot", "--repo", "."], None),
        (["snapshot", "--help"], None),
        (["snapshot", "-v"], None),
        (["snapshot", "--python"], None),
        (["snapshot", "extra"], None),
        (["diff", "a", "b"], None),
        (["diff", "good", "--against", "bad"], None),
        (["diff", "good", "--lock", "uv.lock"], None),
        (["-q", "snapshot"], None),
        (["check"], None),
        ([], None),
    ],
)
def test_the_guess_is_made_only_from_plain_argv(
    argv: list[str], expected: tuple[str, str | None, str | None] | None
) -> None:
    assert guess(argv) == expected


# Typer's options that mean no guess: each may change what the command's probe measures,
# or how (--via, --root, --deep, ...), or is simply not worth a guess (-v). A new option of
# these commands goes into prestart's VALUED or FLAGS when it leaves the probe as it is, or
# here when it does not.
NO_GUESS = {
    "snapshot": {
        "--repo", "--file", "--cache", "--pid", "--via", "--hosts", "--store", "--root",
        "--keep-files", "--no-keep-files", "--keep-cache", "--no-keep-cache", "--deep",
        "--no-deep", "--verbose", "-v",
    },
    "diff": {
        "--against", "--via", "--allow", "--root", "--lock", "--extra", "--all-extras",
        "--group", "--only-group", "--no-default-groups", "--all-groups", "--package",
        "--no-group", "--no-dev", "--all-packages", "--no-install-project",
        "--no-install-workspace", "--no-editable", "--timeout", "--deep", "--no-deep",
        "--verbose", "-v",
    },
    "check": {
        "--lock", "--find-lock", "--against", "--via", "--allow", "--root", "--extra",
        "--all-extras", "--group", "--only-group", "--no-default-groups", "--all-groups",
        "--package", "--no-group", "--no-dev", "--all-packages", "--no-install-project",
        "--no-install-workspace", "--no-editable", "--timeout", "--deep", "--no-deep",
        "--verbose", "-v",
    },
    "guard": {"--verbose", "-v"},
    "undo": {"--verbose", "-v"},
}  # fmt: skip


def _typer_options(command: str) -> tuple[dict[str, str], list[int]]:
    """Each option of the real command (typer's) with its arity ("flag" or "valued"), and
    the nargs of its arguments in order."""
    import typer.main

    from envguard.cli import app

    group = typer.main.get_command(app)
    built = group.get_command(group.context_class(group), command)  # type: ignore[attr-defined]
    options: dict[str, str] = {}
    arguments = []
    for param in built.params:
        if param.param_type_name == "argument":
            arguments.append(param.nargs)
            continue
        arity = "flag" if param.is_flag else "valued" if param.nargs == 1 else f"{param.nargs}"
        for name in (*param.opts, *param.secondary_opts):
            options[name] = arity
    return options, arguments


@pytest.mark.parametrize("command", sorted(VALUED))
def test_prestart_knows_each_option_of_the_command_with_typers_arity(command: str) -> None:
    """prestart reads argv before typer, so it is held to typer's options: an option it
    skips with a value must take one value in typer (else it would skip a positional, or
    take one as a value), a flag it skips must be a flag, and every option typer has is one
    of these or means no guess (not an option prestart has never heard of)."""
    options, arguments = _typer_options(command)
    wrong = {o: options.get(o, "missing") for o in VALUED[command] if options.get(o) != "valued"}
    assert not wrong, f"prestart skips a value after these; typer says: {wrong}"
    wrong = {o: options.get(o, "missing") for o in FLAGS[command] if options.get(o) != "flag"}
    assert not wrong, f"prestart skips these as flags; typer says: {wrong}"
    known = VALUED[command] | FLAGS[command] | NO_GUESS[command]
    assert not NO_GUESS[command] & (VALUED[command] | FLAGS[command])
    assert not set(options) - known, f"options prestart does not know: {set(options) - known}"
    assert not NO_GUESS[command] - set(options), "no longer options of the command"
    # The positionals guess() takes: none for snapshot, one snapshot for diff; guard's
    # words and undo's steps end what it reads or are passed over.
    expected = {"snapshot": [], "diff": [1], "check": [1], "guard": [-1], "undo": [1]}[command]
    assert arguments == expected


def test_guard_and_undo_guess_their_venv_and_only_a_venv(tmp_path: Path) -> None:
    """guard and undo probe the venv first (--venv's python); a folder that is not a venv
    (no pyvenv.cfg) is refused by the command before anything in it runs: no guess."""
    v = tmp_path / "v"
    (v / "bin").mkdir(parents=True)
    argv = ["guard", "--venv", str(v), "--allow", "torch", "--", "pip", "install", "--python", "x"]
    assert guess(argv) is None
    (v / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert guess(argv) == ("guard", str(v / "bin" / "python"), None)
    undo = ["undo", "2", "--venv", str(v), "--find-links", "/w", "--offline"]
    assert guess(undo) == ("undo", str(v / "bin" / "python"), None)
    assert guess(["guard", "--venv", str(v), "--via", "x", "--", "pip"]) is None
    assert guess(["undo", "--venv", str(v), "--help"]) is None


_COUNT = """
import sys
import envguard.probe.runner as runner
made, cancelled = [], []
init, cancel = runner.ProbeRun.__init__, runner.ProbeRun.cancel
def counted_init(self, *a, **k):
    made.append("typer" in sys.modules)
    init(self, *a, **k)
def counted_cancel(self):
    cancelled.append(self.proc.returncode is None)
    cancel(self)
runner.ProbeRun.__init__, runner.ProbeRun.cancel = counted_init, counted_cancel
import atexit
atexit.register(lambda: sys.stderr.write(f"\\nPROBES {made} CANCELLED {cancelled}\\n"))
sys.argv = ["envguard", *sys.argv[1:]]
from envguard.__main__ import main
main()
"""


def _run(tmp_path: Path, *args: str) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-c", _COUNT, *args],
        capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
    )  # fmt: skip
    return proc.returncode, proc.stderr.strip().splitlines()[-1]


def test_snapshot_and_diff_take_over_the_probe_started_before_typer(tmp_path: Path) -> None:
    code, counts = _run(tmp_path, "snapshot", "--python", sys.executable, "--name", "good")
    assert code == 0
    assert counts == "PROBES [False] CANCELLED []"  # one probe, started before typer, taken
    code, counts = _run(tmp_path, "diff", "good", "--python", sys.executable)
    assert code == 0
    assert counts == "PROBES [False] CANCELLED []"
    code, counts = _run(tmp_path, "check", "good", "--python", sys.executable)  # the gate
    assert code == 0
    assert counts == "PROBES [False] CANCELLED []"


_BOOTED = """
import sys
import envguard.probe.booting as booting
take = booting.take_boot
taken = []
def counted_take(python, entry):
    booted = take(python, entry)
    taken.append(booted is not None)
    return booted
booting.take_boot = counted_take
import envguard.probe.runner as runner
runner.take_boot = counted_take
import atexit
atexit.register(lambda: sys.stderr.write(f"\\nBOOTS TAKEN {taken} TYPER {'typer' in sys.modules}\\n"))
sys.argv = ["envguard", *sys.argv[1:]]
from envguard.__main__ import main
main()
"""


def test_a_plain_snapshot_naming_a_repo_takes_over_its_interpreter_booted_first(
    tmp_path: Path,
) -> None:
    """No probe is guessed for --repo, --file, --cache, --root or --deep, but a plain
    snapshot's interpreter is booted before anything else loads all the same: the command's
    probe takes it over with its own argument (and records what that argument names)."""
    from factories import make_git_repo

    work = make_git_repo(tmp_path / "work")
    argv = ["snapshot", "--python", sys.executable, "--out", "-", "--repo", ".", "--file"]
    proc = subprocess.run(
        [sys.executable, "-c", _BOOTED, *argv, "train.py"],
        capture_output=True, text=True, cwd=work, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "BOOTS TAKEN [True] TYPER False"
    doc = json.loads(proc.stdout)
    assert [f["path"] for f in doc["files"]] == [str(work / "train.py")]
    assert str(work) in [r["path"] for r in doc["repos"]]


@pytest.mark.slow
def test_guard_takes_over_the_probe_of_its_venv_started_before_typer(tmp_path: Path) -> None:
    from factories import UV, make_venv

    venv = tmp_path / ".venv"
    make_venv(venv)
    code, counts = _run(tmp_path, "guard", "--venv", str(venv), "--", UV, "pip", "uninstall", "x")
    assert code == 0, counts
    assert counts.startswith("PROBES [False") and "CANCELLED []" in counts


def test_a_guess_the_command_does_not_take_is_stopped(tmp_path: Path) -> None:
    code, counts = _run(tmp_path, "snapshot", "--python", sys.executable, "--name", "no/such")
    assert code == 2  # the name is refused after typer parsed it: the early probe is stopped
    assert counts == "PROBES [False] CANCELLED [True]"


def test_a_capture_asking_for_another_probe_stops_the_early_one(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a")
    early = capture.CaptureRequest(python=sys.executable, name="e", cwd=tmp_path)
    capture.start_early(early)
    started_early = capture._EARLY[0][1]
    other = capture.CaptureRequest(
        python=sys.executable, name="o", cwd=tmp_path, files=(str(tmp_path / "a.txt"),)
    )
    started = capture.start_capture(other)
    try:
        assert started.probe is not started_early and not capture._EARLY
        assert started_early.proc.returncode is not None  # stopped and collected
        assert started.probe.result()["files"][0]["path"] == str(tmp_path / "a.txt")
    finally:
        started.probe.cancel()
    capture.start_early(early)
    taken = capture._EARLY[0][1]
    same = capture.start_capture(
        capture.CaptureRequest(python=sys.executable, name="x", cwd=tmp_path)
    )
    assert same.probe is taken and same.probe.result()["packages"]  # taken over, not rerun
    assert not capture._EARLY


# A snapshot typer runs (--timeout is not among prestart.PLAIN_VALUED: a plain snapshot runs
# without typer, envguard.recording.run_plain), whose probe prestart still starts early.
_TYPER = ["--timeout", "60"]


def _slow_python(tmp_path: Path) -> tuple[Path, Path]:
    """An interpreter that takes two seconds to start, then leaves a marker: a probe that
    was not stopped leaves it."""
    marker = tmp_path / "probe-still-ran"
    slow = tmp_path / "slow" / "bin" / "python3"
    slow.parent.mkdir(parents=True)
    slow.write_text(f'#!/bin/sh\nsleep 2\ntouch "{marker}"\nexec "{sys.executable}" "$@"\n')
    slow.chmod(0o755)
    return slow, marker


def run_main(set_up: str, argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """envguard's console entry point run with ``argv`` in a fresh interpreter, after the
    program ``set_up`` (which arranges the trouble)."""
    program = (
        set_up
        + f"sys.argv = ['envguard', *{argv!r}]\n"
        + "from envguard.__main__ import main\n"
        + "main()\n"
    )
    return subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True, text=True, cwd=cwd, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("trouble", ["SIGTERM", "SIGHUP", "broken-install"])
def test_an_early_probe_is_stopped_when_the_command_line_never_loads(
    tmp_path: Path, trouble: str
) -> None:
    """A signal (a CI job cancelled) or an import error while typer loads: the probe that
    prestart already started is stopped, not left to run on in its own session."""
    import time

    slow, marker = _slow_python(tmp_path)
    program = (
        "import os, signal, sys\n"
        "from envguard import prestart\n"
        "start = prestart.start\n"
        "def started(argv):\n"
        "    start(argv)\n"
        f"    if {trouble!r} == 'broken-install':\n"
        "        sys.modules['typer'] = None  # `import typer` now fails\n"
        "    else:\n"
        f"        os.kill(os.getpid(), signal.{trouble if trouble != 'broken-install' else 'SIGTERM'})\n"
        "prestart.start = started\n"
    )
    proc = run_main(program, ["snapshot", "--python", str(slow), "--out", "-", *_TYPER], tmp_path)
    if trouble == "broken-install":
        assert proc.returncode == 1 and "import of typer halted" in proc.stderr
    else:
        code = {"SIGTERM": 143, "SIGHUP": 129}[trouble]
        assert (proc.returncode, proc.stderr) == (code, f"error: interrupted ({trouble})\n")
    time.sleep(3)
    assert not marker.exists()  # the slow probe was killed before it got going


@pytest.mark.parametrize("where", ["cli set-up", "a failing stop"])
def test_a_signal_before_the_command_line_runs_is_one_line(tmp_path: Path, where: str) -> None:
    """SIGTERM while the CLI sets itself up (after typer loaded, before its command line
    runs), or while stopping the early probe goes wrong: `error: interrupted`, exit 143,
    never a traceback."""
    program = (
        "import os, signal, sys\n"
        "import envguard.cli.program as cli\n"
        "from envguard import lifecycle\n"
        "def set_up():\n"
        "    lifecycle.handle_signals()\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "cli.handle_signals = set_up\n"
        "def broken():\n"
        "    raise RuntimeError('half-registered')\n"
        f"if {where!r} == 'a failing stop':\n"
        "    lifecycle.kill_running = broken\n"
    )
    argv = ["snapshot", "--python", sys.executable, "--out", "-", *_TYPER]
    assert (proc := run_main(program, argv, tmp_path)).returncode == 143, proc.stderr
    assert proc.stderr == "error: interrupted (SIGTERM)\n"


@pytest.mark.parametrize("where", ["terminal.listen", "lifecycle.kill_running"])
def test_a_signal_in_a_plain_snapshots_set_up_is_one_line(tmp_path: Path, where: str) -> None:
    """The same for a snapshot run without typer (recording.run_plain): SIGTERM while it
    sets itself up, or while stopping the early probe goes wrong."""
    program = (
        "import os, signal, sys\n"
        "from envguard import lifecycle, terminal\n"
        "def set_up():\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "terminal.listen = set_up\n"
        "def broken():\n"
        "    raise RuntimeError('half-registered')\n"
        f"if {where!r} == 'lifecycle.kill_running':\n"
        "    lifecycle.kill_running = broken\n"
    )
    argv = ["snapshot", "--python", sys.executable, "--out", "-"]
    assert (proc := run_main(program, argv, tmp_path)).returncode == 143, proc.stderr
    assert proc.stderr == "error: interrupted (SIGTERM)\n"


def test_only_the_default_interpreter_path_itself_runs_before_validation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot naming a symlink to the default interpreter's binary is not "the default":
    run through the symlink, Python reads the pyvenv.cfg beside it (whose home may name
    another standard library), so it waits for the snapshot's validation and its checks."""
    from envguard.probe.interpreters import resolve_python
    from envguard.snapshots.live import _is_default

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    monkeypatch.setenv("VIRTUAL_ENV", str(venv))
    default = resolve_python(None)
    planted = tmp_path / "x" / "bin" / "python3"
    planted.parent.mkdir(parents=True)
    planted.symlink_to(default)
    (tmp_path / "x" / "pyvenv.cfg").write_text(f"home = {tmp_path / 'evil'}\n")
    assert _is_default(str(default))
    assert not _is_default(str(planted))


# A class whose __set_name__ is interrupted: CPython 3.11 wraps the Interrupted it raises in
# RuntimeError("Error calling __set_name__ ..."), as it did for a dataclass field loading.
_INTERRUPTED_SET_NAME = (
    "class _Field:\n"
    "    def __set_name__(self, owner, name):\n"
    "        os.kill(os.getpid(), signal.SIGINT)\n"
    "        sum(range(100))  # the handler runs here\n"
    "class _Owner:\n"
    "    field = _Field()\n"
)
# An interrupt raised inside __del__: CPython cannot raise it, and prints it as unraisable.
_INTERRUPTED_DEL = (
    "class _Gone:\n"
    "    def __del__(self):\n"
    "        os.kill(os.getpid(), signal.SIGINT)\n"
    "        sum(range(100))\n"
    "_Gone()\n"
)


@pytest.mark.parametrize(
    ("where", "how"),
    [
        ("before typer", "set_name"),
        ("in the CLI's set-up", "set_name"),
        ("before typer", "del"),
        ("while typer parses", "signal"),
    ],
)
def test_an_interrupt_anywhere_in_start_up_is_one_line(
    tmp_path: Path, where: str, how: str
) -> None:
    """However the interrupt surfaces: wrapped in a RuntimeError by __set_name__ (a module
    loading), swallowed in __del__ (it printed `Exception ignored ... Interrupted`), or
    turned by typer's parser into a silent exit 130 (SIGHUP said nothing, exit 130)."""
    trouble = {"set_name": _INTERRUPTED_SET_NAME, "del": _INTERRUPTED_DEL}.get(how, "")
    indented = "".join("    " + line + "\n" for line in trouble.splitlines())
    program = "import os, signal, sys\n"
    if where == "before typer":
        program += (
            "from envguard import prestart\n"
            "start = prestart.start\n"
            "def started(argv):\n"
            "    start(argv)\n" + indented + "prestart.start = started\n"
        )
    elif where == "in the CLI's set-up":
        program += (
            "import envguard.cli.program as cli\n"
            "from envguard import lifecycle\n"
            "def set_up():\n"
            "    lifecycle.handle_signals()\n" + indented + "cli.handle_signals = set_up\n"
        )
    else:
        program += (
            "import envguard.cli.program as cli\n"
            "make = cli._Group.make_context\n"
            "def parse(self, *args, **kwargs):\n"
            "    os.kill(os.getpid(), signal.SIGHUP)\n"
            "    sum(range(100))\n"
            "    return make(self, *args, **kwargs)\n"
            "cli._Group.make_context = parse\n"
        )
    argv = ["snapshot", "--python", sys.executable, "--out", "-"]
    proc = run_main(program, argv + (_TYPER if where != "before typer" else []), tmp_path)
    name = "SIGHUP" if how == "signal" else "SIGINT"
    code = 129 if how == "signal" else 130
    assert (proc.returncode, proc.stderr, proc.stdout) == (
        code,
        f"error: interrupted ({name})\n",
        "",
    )


def test_each_run_in_one_process_says_its_own_interrupt(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI run twice in one process (a CliRunner, a user's script), interrupted both
    times: each run says `error: interrupted`, not only the first."""
    from typer.testing import CliRunner

    from envguard import api
    from envguard.cli import app

    def interrupted(**kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "snapshot_document", interrupted)
    for _ in range(2):
        result = CliRunner().invoke(app, ["snapshot", "--python", sys.executable, "--out", "-"])
        assert (result.exit_code, result.stderr) == (130, "error: interrupted (SIGINT)\n")


_LOADED = """
import sys
at_spawn, at_wait = [], []
def audit(event, args):
    if event in ("subprocess.Popen", "os.posix_spawn") and not at_spawn:
        at_spawn.append(set(sys.modules))
sys.addaudithook(audit)
import envguard.probe.runner as runner
output = runner.ProbeRun.output
def waited(self, *args):
    at_wait.append(set(sys.modules))
    return output(self, *args)
runner.ProbeRun.output = waited
import atexit
def said():
    spawn = sorted(m for m in DEFERRED if m in at_spawn[0])
    wait = sorted(m for m in NEEDED if m not in at_wait[0])
    sys.stderr.write(f"\\nAT SPAWN {spawn} MISSING AT WAIT {wait}\\n")
atexit.register(said)
DEFERRED, NEEDED = sys.argv[1].split(","), sys.argv[2].split(",")
sys.argv = ["envguard", *sys.argv[3:]]
from envguard.__main__ import main
main()
"""
# What the early probe's start has no use for: each loads later, beside the running probe
# (diff reads its snapshot first: the store is its start's own).
_DEFERRED = "typing,datetime,shutil,hashlib,envguard.redact,envguard.api.capture,typer,pydantic"


@pytest.mark.parametrize(
    ("command", "deferred", "needed"),
    [
        # What follows the answer loads before it: signing, the summary line, the engine.
        ("snapshot", "envguard.snapshots.store", "envguard.snapshots.signing,envguard.render.text"),
        ("diff", "envguard.api._shared", "envguard.compare.engine,envguard.render.text"),
    ],
)
def test_the_probe_starts_before_what_it_does_not_need_and_what_follows_loads_meanwhile(
    tmp_path: Path, command: str, deferred: str, needed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(A diff whose snapshot was found clean before loads no engine: compare.identical;
    this one's is new.)"""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    args = ["--python", sys.executable]
    if command == "diff":
        assert _run(tmp_path, "snapshot", *args, "--name", "good")[0] == 0
        args = ["good", *args]
    proc = subprocess.run(
        [sys.executable, "-c", _LOADED, f"{_DEFERRED},{deferred}", needed, command, *args],
        capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "AT SPAWN [] MISSING AT WAIT []"


@pytest.mark.parametrize(
    "named",
    ["v/bin/python", "./v/bin/python", "v", "v/", "v//bin/python", "ABS", "ABS/", "../w/v"],
)
def test_the_interpreter_booted_early_is_the_one_the_command_resolves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, named: str
) -> None:
    """prestart boots the target before pathlib loads (booting.boot): the name it gives is
    interpreters.resolve_python's, else none (a boot the command does not take costs a
    start); what it cannot tell plainly it does not guess."""
    from envguard.prestart import _plain_python
    from envguard.probe.interpreters import resolve_python

    (tmp_path / "w").mkdir()
    venv = tmp_path / "w" / "v"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    monkeypatch.chdir(tmp_path / "w")
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    named = named.replace("ABS", str(venv))
    plain = _plain_python("snapshot", named)
    if named.startswith(".."):
        assert plain is None  # `..` after a symlink: pathlib keeps it, normpath would not
    else:
        assert plain == str(resolve_python(named)) == str(venv / "bin" / "python")
    assert _plain_python("diff", None) is None  # the snapshot's own interpreter
    (tmp_path / "w" / "~").symlink_to(tmp_path / "w")  # "~/v" is $HOME's, not this one
    assert _plain_python("snapshot", "~/v") is None
    assert _plain_python("snapshot", None) is None  # python3 on PATH: not guessed
    (tmp_path / "w" / ".venv").symlink_to(venv)
    assert _plain_python("snapshot", None) == str(resolve_python(None))
    monkeypatch.setenv("VIRTUAL_ENV", "v")  # relative, as resolve_python keeps it
    assert _plain_python("snapshot", None) == str(resolve_python(None)) == "v/bin/python"
    monkeypatch.setenv("VIRTUAL_ENV", "../w/v")
    assert _plain_python("snapshot", None) is None


# What loads beside the booted interpreter, not before it: subprocess (with locale and
# selectors), json and re, contextlib and functools (collections), signal (enum), threading.
LOADED_AFTER_BOOT = (
    "subprocess", "json", "re", "contextlib", "functools", "collections", "enum", "signal",
    "threading", "importlib",
)  # fmt: skip


def test_the_booted_interpreter_starts_before_subprocess_and_json_load(tmp_path: Path) -> None:
    """The boot (probe.booting) is on the way to every plain snapshot's answer: started by
    os.posix_spawn, it waits for none of LOADED_AFTER_BOOT, which load beside it (the
    target's start moved 10 ms earlier once lifecycle's imports were left out); the
    snapshot it serves is whole."""
    import os

    if not hasattr(os, "posix_spawn") or not Path("/proc/self/fd").is_dir():
        pytest.skip("the boot's start without subprocess is Linux's")
    set_up = (
        "import sys\n"
        "seen = []\n"
        "def audit(event, args):\n"
        "    if event in ('os.posix_spawn', 'subprocess.Popen') and not seen:\n"
        "        seen.append(event)\n"
        f"        loaded = sorted(m for m in {LOADED_AFTER_BOOT!r} if m in sys.modules)\n"
        "        sys.stderr.write('AT BOOT %s %s\\n' % (event, loaded))\n"
        "sys.addaudithook(audit)\n"
    )
    proc = run_main(set_up, ["snapshot", "--python", sys.executable, "--out", "-"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "AT BOOT os.posix_spawn []" in proc.stderr
    assert '"packages"' in proc.stdout


_AFTER_THE_ANSWER = (
    "import atexit, sys\n"
    "from envguard.probe import report\n"
    "answered = report.parse_report\n"
    "def parse_report(*args, **kwargs):\n"  # the answer read (the document is made after)
    "    if not hasattr(sys, 'loaded_then'):\n"
    "        sys.loaded_then = set(sys.modules)\n"
    "    return answered(*args, **kwargs)\n"
    "report.parse_report = parse_report\n"
    "def said():\n"
    "    after = sorted(set(sys.modules) - getattr(sys, 'loaded_then', set(sys.modules)))\n"
    "    sys.stderr.write('LOADED AFTER THE ANSWER %s\\n' % after)\n"
    "atexit.register(said)\n"
)


@pytest.mark.parametrize("command", ["snapshot", "check"])
def test_nothing_loads_once_the_probe_has_answered(tmp_path: Path, command: str) -> None:
    """What a snapshot written to a file (tempfile, the summary line) or a clean check (the
    summary) needs once the probe answers loads beside the probe: after the answer, only
    the answer's own work remains (the runs before: the user's signing key made, the
    clean answer kept)."""
    snap = tmp_path / "good.json"
    argv = ["snapshot", "--python", sys.executable, "--out", str(snap), "--force"]
    if command == "check":
        argv = ["check", str(snap), "--python", sys.executable]
        first = ["snapshot", "--python", sys.executable, "--out", str(snap)]
        assert run_main("import sys\n", first, tmp_path).returncode == 0
    assert run_main("import sys\n", argv, tmp_path).returncode == 0
    proc = run_main(_AFTER_THE_ANSWER, argv, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "LOADED AFTER THE ANSWER []" in proc.stderr
