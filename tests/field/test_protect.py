"""I5: no command has more than a handful of processes alive. Under `envguard protect`, with
the venv active, every installer form (uv's project commands, uv run, uv tool, pip, python -m
pip, uv pip) ends within its timeout, and never more than a few envguard processes are alive
at once: guard's own installer runs (its preview, its install) go past protect's shim and
hook, never back into guard."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from envguard.lifecycle import parent_of, processes
from field.corpus import UV, envguard, uv, uv_env

# envguard processes alive at once, at most: the guard, its early probe, its snapshot probe.
MOST = 4
# Past this many the command is a runaway: it is stopped at once, not left to its timeout.
RUNAWAY = 12
TIMEOUT = 180.0
SAMPLE = 0.05


@dataclass
class Watched:
    """A command run under watch: how it ended and the most processes seen at once."""

    argv: tuple[str, ...]
    code: int | None  # None: killed at its timeout, or as a runaway
    stdout: str
    stderr: str
    seconds: float
    most_envguard: int
    most_processes: int


def _children() -> dict[int, list[int]]:
    """Each live process's children (Linux /proc), by parent pid."""
    out: dict[int, list[int]] = {}
    for pid in processes():
        parent = parent_of(pid)
        if parent is not None:
            out.setdefault(parent, []).append(pid)
    return out


def _descendants(root: int) -> list[int]:
    tree = _children()
    found, pending = [], [root]
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending += tree.get(pid, [])
    return found


def _session(sid: int) -> list[int]:
    """The live processes of session ``sid`` but its leader (``sid`` itself)."""
    found = []
    for pid in processes():
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rpartition(b")")[2].split()
        except OSError:
            continue
        if pid != sid and len(fields) > 3 and fields[3] == str(sid).encode():
            found.append(pid)
    return found


def _is_envguard(pid: int) -> bool:
    """``pid`` runs envguard (`envguard ...`, `python -m envguard ...`, protect's shim as it
    becomes the guard); a path that only holds the word (the corpus's cache) is not."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return False
    return any(os.path.basename(word) == b"envguard" for word in argv)


def _stop_tree(root: int) -> None:
    """Freeze the whole tree first (a stopped process neither forks nor dies, so its
    children stay in the tree), then kill every process of it, by pid."""
    frozen: set[int] = set()
    for _ in range(50):
        found = set(_descendants(root))
        if found <= frozen:
            break
        for pid in found - frozen:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGSTOP)
        frozen |= found
    for pid in frozen:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def watch(argv: list[str], *, env: dict[str, str], cwd: Path, timeout: float) -> Watched:
    """Run ``argv`` in a process group of its own, sampling its process tree every
    SAMPLE seconds; stopped (its whole tree, by pid) at ``timeout`` or as a runaway."""
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    most = [0, 0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            tree = _descendants(proc.pid)
            ours = sum(1 for pid in tree if _is_envguard(pid))
            most[0], most[1] = max(most[0], ours), max(most[1], len(tree))
            if ours > RUNAWAY or time.monotonic() - started > timeout:
                _stop_tree(proc.pid)
                return
            done.wait(SAMPLE)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    code: int | None = None
    try:
        out, err = proc.communicate(timeout=timeout + 30)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        out, err = "", "still running past its timeout"
    finally:
        done.set()
        sampler.join()
        if proc.returncode is None:  # not reaped: its pid is still its own
            _stop_tree(proc.pid)
            proc.kill()
        proc.communicate()
        # What it left behind in its session (reparented, out of its tree). Never by its
        # pid once reaped: another process may have it now; a session id is not given out
        # again while a member of that session lives.
        for pid in _session(proc.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    seconds = time.monotonic() - started
    if code is not None and code < 0 and seconds >= timeout:
        code = None  # killed by the watch
    if code is not None and most[0] > RUNAWAY:
        code = None
    return Watched(tuple(argv), code, out, err, seconds, most[0], most[1])


@pytest.fixture
def protected(field_env: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """(a uv project whose environment is protected, the environment of a shell with it
    active): idna installed from the registry, idna held as critical by the project's
    policy, pip in the venv (a dependency: uv sync and uv remove keep it), and on PATH
    only the venv's bin and uv (never this suite's own pip)."""
    project = field_env / "app"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[project]\nname = "app"\nversion = "0.1.0"\nrequires-python = ">=3.10"\n'
        'dependencies = ["idna", "pip"]\n\n[tool.envguard]\ncritical-packages = ["idna"]\n'
    )
    env = uv_env()
    venv = project / ".venv"
    uv("venv", "--quiet", "--python", sys.executable, str(venv), env=env)
    uv("sync", "--quiet", env=env, cwd=project)
    done = envguard("protect", "--venv", str(venv), cwd=project, env=env)
    assert done.returncode == 0, done.stderr
    assert (venv / "bin" / "uv").exists()
    active = dict(env)
    active["VIRTUAL_ENV"] = str(venv)
    tools = field_env / "tools"
    tools.mkdir()
    for name in ("uv", "uvx"):
        (tools / name).symlink_to(Path(UV).parent / name)
    active["PATH"] = os.pathsep.join([str(venv / "bin"), str(tools), "/usr/bin", "/bin"])
    active["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    yield project, active


def _installed(venv: Path) -> str:
    return uv("pip", "freeze", "--python", str(venv / "bin" / "python")).stdout


# (the form, its command in the active shell, whether it succeeds)
FORMS: list[tuple[str, list[str], bool]] = [
    ("uv add", ["uv", "add", "six"], True),
    ("uv lock", ["uv", "lock"], True),
    ("uv sync", ["uv", "sync"], True),
    ("uv run", ["uv", "run", "python", "-c", "import six"], True),
    ("uv remove", ["uv", "remove", "six"], True),
    ("uv pip install", ["uv", "pip", "install", "six"], True),
    ("uv pip uninstall", ["uv", "pip", "uninstall", "six"], True),
    ("pip install", ["pip", "install", "six"], True),
    ("python -m pip uninstall", ["python", "-m", "pip", "uninstall", "-y", "six"], True),
    ("python -m pip install", ["python", "-m", "pip", "install", "six"], True),
    ("uv tool", ["uv", "tool", "run", "--from", "idna", "python", "-c", "import idna"], True),
    ("uvx", ["uvx", "--from", "idna", "python", "-c", "import idna"], True),
    ("uv add, breaking", ["uv", "add", "idna==3.6"], False),
    ("pip install, breaking", ["pip", "install", "idna==3.6"], False),
    ("uv pip install, breaking", ["uv", "pip", "install", "idna==3.6"], False),
]


def test_every_installer_form_under_protect_ends_with_a_handful_of_processes(
    protected: tuple[Path, dict[str, str]],
) -> None:
    project, env = protected
    venv = project / ".venv"
    failed = []
    for form, argv, succeeds in FORMS:
        watched = watch(argv, env=env, cwd=project, timeout=TIMEOUT)
        print(
            f"{form}: exit {watched.code}, {watched.seconds:.1f} s, at most"
            f" {watched.most_envguard} envguard / {watched.most_processes} processes"
        )
        said = f"{form}: {watched.stdout[-1500:]}\n{watched.stderr[-1500:]}"
        if watched.code is None:
            failed.append(f"did not end by itself: {said}")
        elif watched.most_envguard > MOST:
            failed.append(f"{watched.most_envguard} envguard processes at once: {said}")
        elif "--dry-run" in watched.stderr:
            failed.append(f"a nested dry run: {said}")
        elif succeeds and watched.code != 0:
            failed.append(f"failed: {said}")
        elif not succeeds and (watched.code != 1 or "refused" not in watched.stderr):
            failed.append(f"not refused: {said}")
        installed = _installed(venv)
        if not succeeds and "idna==3.6" in installed:
            failed.append(f"installed anyway: {said}")
        added = "six==" in installed and "six" in (project / "pyproject.toml").read_text()
        if form == "uv add" and watched.code == 0 and not added:
            failed.append(f"six not added: {said}")
        if form == "uv remove" and watched.code == 0 and "six==" in installed:
            failed.append(f"six not removed: {said}")
    assert not failed, "\n\n".join(failed)


def test_a_protected_cuda_torch_venv_imports_torch_and_refuses_the_swap(field_env: Path) -> None:
    """The real stack: PyPI's CUDA torch 2.14.1 (linked from the corpus's cache) in a
    protected venv imports as before (the hook only watches pip), and pip started as
    `python -m pip.__main__` is refused the swap to the machine's CPU torch, naming torch."""
    import ensurepip

    from field.corpus import MACHINE_WHEELS

    env = uv_env()
    venv = field_env / "cuda venv"
    python = str(venv / "bin" / "python")
    uv("venv", "--quiet", "--python", sys.executable, str(venv), env=env)
    uv("pip", "install", "--quiet", "--python", python, "torch==2.14.1", env=env)
    bundled = str(Path(ensurepip.__file__).parent / "_bundled")
    uv("pip", "install", "--quiet", "--python", python, "--find-links", bundled, "pip", env=env)
    done = envguard("protect", "--venv", str(venv), env=env)
    assert done.returncode == 0, done.stderr
    active = dict(env, VIRTUAL_ENV=str(venv), PIP_DISABLE_PIP_VERSION_CHECK="1")
    active["PATH"] = os.pathsep.join([str(venv / "bin"), active["PATH"]])
    imported = subprocess.run(
        [python, "-c", "import sys, torch; print(torch.__version__, 'pip' in sys.modules)"],
        env=active,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert imported.stdout.split() == ["2.14.1+cu130", "False"], imported.stderr
    links = ["--no-index", "--find-links", str(MACHINE_WHEELS)]
    argv = [python, "-m", "pip.__main__", "install", *links, "torch==2.13.0+cpu"]
    watched = watch(argv, env=active, cwd=field_env, timeout=TIMEOUT)
    assert watched.code == 1, watched.stderr
    assert "refused" in watched.stderr and "torch" in watched.stdout + watched.stderr
    assert "torch==2.14.1" in _installed(venv)
    check = envguard("protect", "--check", "--venv", str(venv), env=env)
    assert check.returncode == 0, check.stdout
