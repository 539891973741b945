"""I4: the lock gate agrees with uv, on real uv projects built from the registry.

Each project is locked and synced by uv the way a user would (its [tool.uv] or uv.toml
read, the user's own config an empty folder), then put through the states of
docs/lock-gate.md. In each state uv's verdict (`uv lock --check`, then `uv sync --locked
--check` with the same flags) and envguard's (`envguard check --lock uv.lock --python
.venv`, a real process) must agree: both pass or both fail. The table of answers is
printed (`-s`) for the report."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from factories import make_project, make_wheel
from field.corpus import UV, envguard, load_json, uv_env

TABLE: list[tuple[str, str, str, str]] = []


@pytest.fixture
def user_env(field_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """uv as a user runs it: the project's config read (no UV_NO_CONFIG), the user's own
    config an empty folder, the corpus's cache, the registry reachable."""
    xdg = tmp_path / "xdg"
    xdg.mkdir()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    monkeypatch.delenv("UV_NO_CONFIG", raising=False)
    env = {k: v for k, v in uv_env().items() if k not in ("UV_NO_CONFIG", "UV_OFFLINE")}
    env["XDG_CONFIG_HOME"] = str(xdg)
    return env


def sh(env: dict[str, str], cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [UV, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def must(env: dict[str, str], cwd: Path, *argv: str) -> None:
    done = sh(env, cwd, *argv)
    assert done.returncode == 0, f"uv {' '.join(argv)}:\n{done.stderr}"


def verdicts(
    env: dict[str, str], proj: Path, project: str, state: str, *flags: str, cwd: Path | None = None
) -> tuple[bool, bool, list[dict[str, str]]]:
    """(uv fails, envguard fails, envguard's failing changes), recorded in TABLE."""
    lock = sh(env, proj, "lock", "--check")
    sync = sh(env, proj, "sync", "--locked", "--check", *flags)
    assert lock.returncode in (0, 1) and sync.returncode in (0, 1, 2), lock.stderr + sync.stderr
    uv_fails = lock.returncode != 0 or sync.returncode != 0
    checked = envguard(
        "check", "--lock", str(proj / "uv.lock"), "--python", str(proj / ".venv"),
        "--format", "json", *flags, cwd=cwd or proj, env={**os.environ, **env},
    )  # fmt: skip
    assert checked.returncode in (0, 1), checked.stdout + checked.stderr
    changes = load_json(checked.stdout)["changes"]
    assert isinstance(changes, list)
    failing = [c for c in changes if c["severity"] != "info"]
    uv_said = f"lock {lock.returncode}, sync {sync.returncode}"
    kinds = ", ".join(sorted({f"{c['kind']} {c['name']}" for c in failing})) or "-"
    TABLE.append((project, state, uv_said, f"exit {checked.returncode} ({kinds})"))
    return uv_fails, checked.returncode != 0, failing


def agree(env: dict[str, str], proj: Path, project: str, state: str, *flags: str) -> None:
    uv_fails, gate_fails, failing = verdicts(env, proj, project, state, *flags)
    assert uv_fails == gate_fails, (state, failing)


def drift_states(
    env: dict[str, str], proj: Path, project: str, *flags: str, upgrade: str, remove: str
) -> None:
    """fresh, pyproject changed, a package upgraded, removed, one added: each agrees."""
    agree(env, proj, project, "fresh, synced", *flags)
    pyproject = proj / "pyproject.toml"
    text = pyproject.read_text()
    pyproject.write_text(text.replace("dependencies = [", 'dependencies = ["attrs", ', 1))
    agree(env, proj, project, "pyproject changed", *flags)
    pyproject.write_text(text)
    pip(env, proj, "install", upgrade)
    agree(env, proj, project, f"upgraded ({upgrade})", *flags)
    must(env, proj, "sync", "-q", "--locked", *flags)
    pip(env, proj, "uninstall", remove)
    agree(env, proj, project, f"removed ({remove})", *flags)
    must(env, proj, "sync", "-q", "--locked", *flags)
    pip(env, proj, "install", "attrs")
    agree(env, proj, project, "added (attrs)", *flags)
    must(env, proj, "sync", "-q", "--locked", *flags)


def pip(env: dict[str, str], proj: Path, command: str, *argv: str) -> None:
    """Change the project's venv behind uv sync's back, as another tool would."""
    must(env, proj, "pip", command, "-q", "--no-config", "--python", str(proj / ".venv"), *argv)


def project(root: Path, body: str, *, deps: str, name: str = "app") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\nversion = "0.1.0"\nrequires-python = ">=3.10"\n'
        f"dependencies = [{deps}]\n\n{body}"
    )
    return root


def locked(env: dict[str, str], proj: Path, *sync: str) -> Path:
    must(env, proj, "lock", "-q")
    must(env, proj, "sync", "-q", "--locked", *sync)
    return proj


SETTINGS = {
    "exclude-newer": 'exclude-newer = "2024-06-01T00:00:00Z"\n',
    "lowest-direct": 'resolution = "lowest-direct"\n',
    "prerelease": 'prerelease = "allow"\n',
}


@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.parametrize("where", ["pyproject", "uv.toml"])
def test_resolver_settings(
    user_env: dict[str, str], tmp_path: Path, setting: str, where: str
) -> None:
    line = SETTINGS[setting]
    body = "[tool.uv]\npackage = false\n" + (line if where == "pyproject" else "")
    proj = project(tmp_path / "p", body, deps='"six", "idna>=3.0", "packaging>=22"')
    if where == "uv.toml":
        (proj / "uv.toml").write_text(line)
    locked(user_env, proj)
    label = f"{setting} ({where})"
    drift_states(user_env, proj, label, upgrade="idna==3.4", remove="six")


def test_a_workspace(user_env: dict[str, str], tmp_path: Path) -> None:
    proj = project(
        tmp_path / "ws",
        '[tool.uv]\npackage = false\n[tool.uv.workspace]\nmembers = ["packages/*"]\n'
        "[tool.uv.sources]\nlib = { workspace = true }\n"
        '[dependency-groups]\ndev = ["packaging"]\n',
        deps='"lib", "six"',
    )
    for name, deps in (("lib", '"idna"'), ("other", '"attrs"')):
        member(proj / "packages" / name, name, deps)
    locked(user_env, proj)
    drift_states(user_env, proj, "workspace", upgrade="six==1.16.0", remove="idna")
    agree(user_env, proj, "workspace --all-packages", "fresh, not synced", "--all-packages")
    must(user_env, proj, "sync", "-q", "--locked", "--all-packages")
    agree(user_env, proj, "workspace --all-packages", "synced", "--all-packages")
    must(user_env, proj, "sync", "-q", "--locked")
    # The lock and the venv shipped without pyproject.toml (a Docker image): envguard walks
    # the lock by hand, relative to its own folder, from another working directory.
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    uv_fails, _, _ = verdicts(user_env, proj, "workspace", "fresh (uv)")
    (proj / "pyproject.toml").rename(hidden / "pyproject.toml")
    checked = envguard(
        "check", "--lock", str(proj / "uv.lock"), "--python", str(proj / ".venv"),
        "--format", "json", cwd=tmp_path, env={**os.environ, **user_env},
    )  # fmt: skip
    report = load_json(checked.stdout)
    failing = [c for c in report["changes"] if c["severity"] != "info"]  # type: ignore[union-attr]
    TABLE.append(
        ("workspace, no pyproject", "fresh, walked", "(as fresh)", f"exit {checked.returncode}")
    )
    assert (checked.returncode != 0, failing) == (uv_fails, [])
    assert any("own walk" in n for n in report["notes"])  # type: ignore[union-attr]
    (hidden / "pyproject.toml").rename(proj / "pyproject.toml")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Callable[[Path], str]]:
    """Files of tmp_path/www over http on 127.0.0.1: a wheel's URL."""
    www = tmp_path / "www"
    www.mkdir()
    handler = functools.partial(_Quiet, directory=str(www))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def url(wheel: Path) -> str:
        shutil.copy(wheel, www / wheel.name)
        return f"http://127.0.0.1:{server.server_address[1]}/{wheel.name}"

    yield url
    server.shutdown()
    thread.join()
    server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def test_direct_sources(
    user_env: dict[str, str], tmp_path: Path, served: Callable[[Path], str]
) -> None:
    """A path (editable), a wheel by URL, a wheel by path and a git repo as sources."""
    make_project(tmp_path / "lib", "lib", "0.1.0")
    make_project(tmp_path / "gitdep", "gitdep", "0.2.0")
    # six 1.17.0 from our own wheel file: the registry's six is "another source" of it.
    url = served(make_wheel(tmp_path / "wh1", "six", "1.17.0"))
    local = make_wheel(tmp_path / "wh2", "idna", "3.10")
    proj = project(
        tmp_path / "p",
        "[tool.uv]\npackage = false\n[tool.uv.sources]\n"
        f'lib = {{ path = "{tmp_path / "lib"}", editable = true }}\n'
        f'six = {{ url = "{url}" }}\n'
        f'idna = {{ path = "{local}" }}\n'
        f'gitdep = {{ git = "{(tmp_path / "gitdep").as_uri().replace("file:", "git+file:")}" }}\n',
        deps='"lib", "six", "idna", "gitdep", "packaging"',
    )
    locked(user_env, proj)
    drift_states(user_env, proj, "sources", upgrade="packaging==23.2", remove="gitdep")
    for name, elsewhere, state in (
        ("six", "six==1.17.0", "url wheel reinstalled from the registry"),
        ("idna", str(make_wheel(tmp_path / "wh3", "idna", "3.10")), "path wheel from another file"),
        ("idna", "idna==3.10", "path wheel reinstalled from the registry"),
        ("lib", str(tmp_path / "lib"), "editable reinstalled as a wheel"),
    ):
        pip(user_env, proj, "install", "--reinstall", elsewhere)
        uv_fails, gate_fails, failing = verdicts(user_env, proj, "sources", state)
        assert uv_fails and gate_fails, (state, failing)
        assert {(c["kind"], c["name"]) for c in failing} == {("source_differs", name)}
        must(user_env, proj, "sync", "-q", "--locked")


def test_a_docker_style_sync(user_env: dict[str, str], tmp_path: Path) -> None:
    """`uv sync --locked --no-install-project --no-editable`, as a Dockerfile runs it."""
    proj = member(tmp_path / "p", "app", '"lib", "six"')
    member(proj / "lib", "lib", "")
    with (proj / "pyproject.toml").open("a") as f:
        f.write('\n[tool.uv.sources]\nlib = { path = "lib", editable = true }\n')
    flags = ("--no-install-project", "--no-editable")
    locked(user_env, proj, *flags)
    drift_states(user_env, proj, "docker", *flags, upgrade="six==1.16.0", remove="lib")
    # The same venv, checked without the flags: uv and envguard both want the project
    # installed and lib editable.
    agree(user_env, proj, "docker, checked without flags", "synced with flags")


def member(path: Path, name: str, deps: str) -> Path:
    """A package with an in-tree build backend (nothing to download to build it)."""
    make_project(path, name, "0.1.0")
    text = (path / "pyproject.toml").read_text()
    text = text.replace(
        'version = "0.1.0"\n',
        f'version = "0.1.0"\nrequires-python = ">=3.10"\ndependencies = [{deps}]\n',
    )
    (path / "pyproject.toml").write_text(text)
    return path


@pytest.fixture(scope="module", autouse=True)
def _table() -> Iterator[None]:
    yield
    if TABLE:
        width = max(len(p) for p, *_ in TABLE)
        print("\n| project | state | uv (exit codes) | envguard |\n| --- | --- | --- | --- |")
        for proj, state, uv_said, gate_said in TABLE:
            print(f"| {proj:<{width}} | {state} | {uv_said} | {gate_said} |")
