"""Builders for hermetic test environments: wheels, dist-infos, venvs, git repos, snapshots."""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from envguard.snapshots.models import Interpreter, Package, Snapshot, Source
from envguard.testing import (  # re-exported for the tests
    dist_name,
    make_simple_index,  # noqa: F401
    make_torch_wheel,  # noqa: F401
    make_wheel,  # noqa: F401
)
from envguard.tools import find_uv

UV = find_uv()


def make_dist_info(
    site: Path,
    name: str,
    version: str,
    *,
    installer: str | None = "pip",
    requested: bool = False,
    direct_url: str | None = None,
    record: str | None = None,
    metadata: str | None = None,
) -> Path:
    """A .dist-info directory written by hand (for broken and odd installs)."""
    info = site / f"{dist_name(name)}-{version}.dist-info"
    info.mkdir(parents=True)
    if metadata is None:
        metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n"
    (info / "METADATA").write_text(metadata)
    if installer is not None:
        (info / "INSTALLER").write_text(installer + "\n")
    if requested:
        (info / "REQUESTED").write_text("")
    if direct_url is not None:
        (info / "direct_url.json").write_text(direct_url)
    if record is not None:
        (info / "RECORD").write_text(record)
    return info


def json_values(max_leaves: int) -> Any:
    """A hypothesis strategy of what JSON holds (finite numbers): for a reader or a writer
    held to json's own."""
    from hypothesis import strategies as st

    return st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(),
        lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
        max_leaves=max_leaves,
    )


# Where the probe keeps its distribution cache, under $XDG_CACHE_HOME (distcache.py).
DIST_CACHE = Path("envguard") / "dists-v4"


def cache_file(xdg: Path) -> Path:
    """The one per-venv distribution cache file under ``xdg`` (a test probes one venv)."""
    (found,) = (xdg / DIST_CACHE).glob("*.bin")
    return found


def read_cache(path: Path) -> dict[str, Any]:
    """A distribution cache file's data, as the probe wrote it (distcache.sealed)."""
    from envguard.probe.payload import local_package

    data = local_package().distcache.unsealed(path.read_bytes())
    assert isinstance(data, dict)
    return data


def write_cache(path: Path, data: Any, version: int = 2) -> None:
    """``data`` as the distribution cache file ``path`` (a test's edit of the cache), in
    marshal's ``version`` (4 shares what is written twice: a forger's tool)."""
    body = marshal.dumps(data, version)
    path.write_bytes(b"envguard-dists\0" + b"%016x" % len(body) + body)


def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure raise with its output, which pytest then shows."""
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)
    if proc.returncode != 0:
        raise AssertionError(f"{argv} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def make_venv(path: Path) -> Path:
    """A real venv made by uv from this interpreter; returns its python."""
    run([UV, "venv", "--quiet", "--python", sys.executable, str(path)])
    return path / "bin" / "python"


def probe_report(venv: Path, env: Mapping[str, str], **args: Any) -> dict[str, Any]:
    """The probe's raw report of ``venv`` as snapshot sends it (no default caches), its
    distribution-cache records kept however new the files are (the venvs here are seconds
    old), unless ``args`` say otherwise."""
    from envguard.probe.payload import probe_payload

    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-I", "-S", "-"],
        input=probe_payload({"default_caches": False, "cache_quiet_seconds": 0, **args}),
        capture_output=True,
        text=True,
        env=dict(env),
        timeout=120,
        check=True,
    )
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


def uv_install(venv: Path, wheelhouse: Path, *reqs: str, extra: Iterable[str] = ()) -> None:
    """Install offline from ``wheelhouse`` into ``venv`` with uv."""
    run(
        [
            UV,
            "pip",
            "install",
            "--quiet",
            "--offline",
            "--no-index",
            "--find-links",
            str(wheelhouse),
            "--python",
            str(venv),
            *extra,
            *reqs,
        ]
    )


def pip_install(venv: Path, wheel: Path) -> None:
    """Install one wheel into ``venv`` with this interpreter's pip (isolated from config);
    the test is skipped where this interpreter has no pip."""
    import pytest

    pytest.importorskip("pip", reason="this interpreter has no pip")
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "--isolated",
            "--disable-pip-version-check",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "--quiet",
            "--no-index",
            "--no-deps",
            str(wheel),
        ]
    )


def uv_freeze(venv: Path) -> set[tuple[str, str]]:
    """(canonical name, version or "@url") pairs as `uv pip freeze` reports them."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    out = run([UV, "pip", "freeze", "--python", str(venv)]).stdout
    pairs = set()
    for line in out.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-e "):
            pairs.add(("-e", line[3:].strip()))
            continue
        req = Requirement(line)
        if req.url:
            pairs.add((canonicalize_name(req.name), "@" + req.url))
        else:
            (spec,) = req.specifier
            pairs.add((canonicalize_name(req.name), spec.version))
    return pairs


GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+00:00",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    return run(["git", "-C", str(repo), *args], env=env).stdout.strip()


def make_git_repo(path: Path, files: Mapping[str, str] | None = None) -> Path:
    """A real git repo with one commit, fixed author and date."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "--quiet", "--initial-branch=main")
    for rel, text in (files or {"train.py": "print('train')\n"}).items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "--quiet", "-m", "initial")
    return path


# A PEP 517 backend small enough to live inside a test project, so that editable and VCS
# installs build offline with no build dependency to download.
TINY_BACKEND = """
import base64, hashlib, os, zipfile

NAME, VERSION = "@NAME@", "@VERSION@"
DIST = NAME.replace("-", "_")


def get_requires_for_build_wheel(config_settings=None):
    return []


get_requires_for_build_editable = get_requires_for_build_wheel


def _write(wheel_directory, files):
    info = DIST + "-" + VERSION + ".dist-info"
    files[info + "/METADATA"] = "Metadata-Version: 2.1\\nName: %s\\nVersion: %s\\n\\n" % (NAME, VERSION)
    files[info + "/WHEEL"] = "Wheel-Version: 1.0\\nGenerator: tiny\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    record = []
    for path, text in files.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (path, digest, len(data)))
    record.append(info + "/RECORD,,")
    files[info + "/RECORD"] = "\\n".join(record) + "\\n"
    name = DIST + "-" + VERSION + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = {}
    for root, _, names in os.walk(DIST):
        for n in names:
            if n.endswith(".py"):
                path = os.path.join(root, n)
                with open(path) as fh:
                    files[path.replace(os.sep, "/")] = fh.read()
    return _write(wheel_directory, files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write(wheel_directory, {"_" + DIST + "_editable.pth": os.path.abspath(".") + "\\n"})
"""


def uv_project_toml(
    dependencies: Iterable[str],
    *,
    extras: Mapping[str, Iterable[str]] = {},
    groups: Mapping[str, Iterable[str]] = {},
    default_groups: Iterable[str] = ("dev",),
) -> str:
    """The pyproject.toml of a virtual uv project `app` (`package = false`) for Python >= 3.10."""

    def table(name: str, rows: Mapping[str, Iterable[str]]) -> str:
        body = "".join(f"{k} = {json.dumps(list(v))}\n" for k, v in rows.items())
        return f"\n[{name}]\n{body}" if rows else ""

    return (
        '[project]\nname = "app"\nversion = "0.1.0"\nrequires-python = ">=3.10"\n'
        f"dependencies = {json.dumps(list(dependencies))}\n"
        + table("project.optional-dependencies", extras)
        + table("dependency-groups", groups)
        + f"\n[tool.uv]\npackage = false\ndefault-groups = {json.dumps(list(default_groups))}\n"
    )


def make_project(path: Path, name: str, version: str) -> Path:
    """A git repo holding an installable project with an in-tree build backend."""
    module = dist_name(name)
    return make_git_repo(
        path,
        {
            "pyproject.toml": f'[project]\nname = "{name}"\nversion = "{version}"\n\n'
            '[build-system]\nrequires = []\nbuild-backend = "tiny_backend"\nbackend-path = ["."]\n',
            "tiny_backend.py": TINY_BACKEND.replace("@NAME@", name).replace("@VERSION@", version),
            f"{module}/__init__.py": f"VERSION = {version!r}\n",
        },
    )


def package(
    name: str,
    version: str,
    *,
    source: Source | None = None,
    fingerprint: str | None = None,
    installer: str | None = "uv",
    requested: bool = False,
    location: str = "/venv/site-packages",
) -> Package:
    """A Package model for pure tests."""
    return Package(
        name=name,
        display_name=name,
        version=version,
        installer=installer,
        requested=requested,
        location=location,
        source=source or Source(),
        fingerprint=fingerprint if fingerprint is not None else f"fp-{name}-{version}",
    )


def interpreter(version: str = "3.11.7", **changes: Any) -> Interpreter:
    data: dict[str, Any] = {
        "version": version,
        "implementation": "cpython",
        "executable": "/venv/bin/python",
        "prefix": "/venv",
        "base_prefix": "/usr",
        "is_venv": True,
        "os": "linux",
        "machine": "x86_64",
        "libc": "glibc 2.36",
        "site_packages": ("/venv/site-packages",),
        "markers": {
            "implementation_name": "cpython",
            "os_name": "posix",
            "platform_machine": "x86_64",
            "platform_system": "Linux",
            "python_full_version": version,
            "python_version": ".".join(version.split(".")[:2]),
            "sys_platform": "linux",
            "platform_python_implementation": "CPython",
        },
    }
    data.update(changes)
    return Interpreter(**data)


def snapshot(packages: Iterable[Package] = (), **changes: Any) -> Snapshot:
    """A Snapshot model for pure tests."""
    data: dict[str, Any] = {
        "name": "good",
        "created": datetime(2024, 1, 1, tzinfo=timezone.utc),
        "host": "gpu01",
        "user": "trainer",
        "envguard_version": "0.1.0",
        "interpreter": interpreter(),
        "packages": tuple(sorted(packages, key=lambda p: p.name)),
    }
    data.update(changes)
    return Snapshot(**data)


def load_target() -> SimpleNamespace:
    """The probe's target package, installed in-process exactly as the payload installs it
    on the target (a package of its own, never imported from envguard), its functions
    gathered in one namespace."""
    from envguard.probe.payload import LOADER, target_sources

    namespace: dict[str, Any] = {"sys": sys}
    exec(LOADER, namespace)
    package = namespace["_envguard_install"]("envguard_probe_under_test", target_sources())
    members: dict[str, Any] = {}
    for name, _source in target_sources():
        module = getattr(package, name)
        members.update({k: v for k, v in vars(module).items() if not k.startswith("__")})
    return SimpleNamespace(**members)


_REAL_REPORT: list[dict[str, Any]] = []


def real_report() -> dict[str, Any]:
    """One real probe report of this interpreter (measured once; a fresh copy each call)."""
    import json

    from envguard.probe.payload import probe_payload

    if not _REAL_REPORT:
        out = subprocess.run(
            [sys.executable, "-I", "-S", "-"],
            input=probe_payload({"default_caches": False}),
            capture_output=True, text=True, check=True, timeout=120,
        )  # fmt: skip
        _REAL_REPORT.append(json.loads(out.stdout))
    copy: dict[str, Any] = json.loads(json.dumps(_REAL_REPORT[0]))
    return copy


def envguard_cli(
    *args: str | Path, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`envguard ARGS` as a real subprocess of this interpreter, without colour (``env``:
    variables set on top of this process's)."""
    return subprocess.run(
        [sys.executable, "-m", "envguard", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})},
        check=False,
    )


def engine_answers(*argv: str) -> bool:
    """The engine (sinfo, clush, pdsh, ansible-playbook) is installed and answers; for
    Slurm, its daemons run."""
    try:
        return subprocess.run(argv, capture_output=True, timeout=10, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@contextlib.contextmanager
def slurm_job() -> Iterator[str]:
    """An allocation of one node, sharing it (--oversubscribe), cancelled afterwards: the
    id of a job whose steps a test runs with `srun --jobid=ID --overlap`."""
    got = subprocess.run(
        ["salloc", "--no-shell", "-N1", "--oversubscribe", "--immediate=60", "-J", "eg-test"],
        capture_output=True,
        text=True,
        timeout=90,
        check=True,
    )
    job = got.stderr.split("Granted job allocation")[1].split()[0]
    try:
        yield job
    finally:
        subprocess.run(["scancel", job], check=False)


# A real Slurm of a test's own: its configuration, on free ports, one slurmd per node
# (Debian's slurm-wlm runs several on one machine, each its own port).
OWN_SLURM_CONF = """\
ClusterName=envguardtest
SlurmctldHost={host}
SlurmctldPort={ctld_port}
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmdSpoolDir={d}/spool-%n
StateSaveLocation={d}/state
SlurmUser=root
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def own_slurm_missing() -> str | None:
    """Why a Slurm of the test's own cannot start here (None: it can)."""
    import shutil

    if os.geteuid() != 0:
        return "starts slurmctld and slurmd: needs root"
    if not (shutil.which("slurmctld") and shutil.which("slurmd") and shutil.which("srun")):
        return "needs Slurm (slurmctld, slurmd, srun)"
    if not Path("/run/munge/munge.socket.2").exists():
        return "needs a running munged"
    return None


@contextlib.contextmanager
def own_slurm(
    d: Path, nodes: tuple[str, ...] = ("egnode",), *, prolog: bool = False
) -> Iterator[dict[str, str]]:
    """A Slurm of the test's own in ``d`` with ``nodes`` (one slurmd each; ``prolog``:
    Prolog=d/prolog.sh, written by the test); yields its environment (SLURM_CONF) for
    clients. Its daemons are stopped, by their pids, when the block ends."""
    import signal
    import socket
    import time

    (d / "state").mkdir(parents=True)
    host = socket.gethostname()
    text = OWN_SLURM_CONF.format(host=host, ctld_port=_free_port(), d=d)
    text += f"Prolog={d}/prolog.sh\n" if prolog else ""
    for node in nodes:
        (d / f"spool-{node}").mkdir()
        text += f"NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 Port={_free_port()}"
        text += " CPUs=1 State=UNKNOWN\n"
    text += f"PartitionName=eg Nodes={','.join(nodes)} Default=YES MaxTime=INFINITE State=UP"
    text += " OverSubscribe=YES\n"
    conf = d / "slurm.conf"
    conf.write_text(text, encoding="utf-8")
    env = dict(os.environ, SLURM_CONF=str(conf))
    started = []
    try:
        subprocess.run(["slurmctld", "-f", str(conf), "-i"], env=env, check=True)
        started.append(d / "slurmctld.pid")
        for node in nodes:
            subprocess.run(["slurmd", "-f", str(conf), "-N", node], env=env, check=True)
            started.append(d / f"slurmd-{node}.pid")
        deadline = time.monotonic() + 30
        argv = ["sinfo", "-h", "-N", "-o", "%t"]
        while subprocess.run(argv, capture_output=True, text=True, env=env).stdout.split() != [
            "idle"
        ] * len(nodes):
            assert time.monotonic() < deadline, (d / "slurmctld.log").read_text()
            time.sleep(0.3)
        yield env
    finally:
        for pidfile in reversed(started):
            for _ in range(50):  # a daemon writes its pid file just after forking
                if pidfile.exists():
                    break
                time.sleep(0.1)
            if pidfile.exists():
                pid = int(pidfile.read_text().strip())
                os.kill(pid, signal.SIGTERM)
                for _ in range(100):
                    try:
                        os.kill(pid, 0)
                    except ProcessLookupError:
                        break
                    time.sleep(0.1)


def make_host_tree(
    root: Path,
    *,
    driver: str | None = "550.54.15",
    gpus: Iterable[tuple[str, str]] = (("NVIDIA H100 80GB HBM3", "0x2330"),) * 2,
    plugins: Mapping[str, bytes] | None = None,
    nccl_conf: str | None = None,
    peermem: bool = True,
    infiniband: Mapping[str, str] | None = None,
) -> Path:
    """A fake node under ``root``: /proc/driver/nvidia (version, one folder per GPU), sysfs
    PCI devices (an NVIDIA display controller per GPU, beside a non-NVIDIA one and an
    NVSwitch, which are not GPUs), /sys/module, /sys/class/infiniband, /etc/nccl.conf, and
    net plugins under /usr/lib (``plugins``: file name -> bytes)."""
    proc = root / "proc" / "driver" / "nvidia"
    pci = root / "sys" / "bus" / "pci" / "devices"
    pci.mkdir(parents=True)
    for bus, (vendor, cls, device) in {
        "0000:00:1f.0": ("0x8086", "0x060100", "0xa1c8"),
        "0000:c0:00.0": ("0x10de", "0x068000", "0x22a3"),  # NVSwitch: a bridge
    }.items():
        (pci / bus).mkdir()
        for key, value in (("vendor", vendor), ("class", cls), ("device", device)):
            (pci / bus / key).write_text(value + "\n")
    if driver is not None:
        proc.mkdir(parents=True)
        (proc / "version").write_text(
            f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {driver}  Tue Mar  5 2024\n"
        )
    for i, (model, device) in enumerate(gpus):
        bus = f"0000:{0x18 + i:02x}:00.0"
        if driver is not None:
            (proc / "gpus" / bus).mkdir(parents=True)
            (proc / "gpus" / bus / "information").write_text(
                f"Model: \t\t {model}\nIRQ:   \t\t 42\nBus Location: \t {bus}\n"
            )
        (pci / bus).mkdir()
        for key, value in (("vendor", "0x10de"), ("class", "0x030200"), ("device", device)):
            (pci / bus / key).write_text(value + "\n")
    module = root / "sys" / "module"
    (module / "nvidia").mkdir(parents=True)
    if peermem:
        (module / "nvidia_peermem").mkdir()
    for name, fw in (infiniband or {}).items():
        (root / "sys" / "class" / "infiniband" / name).mkdir(parents=True)
        (root / "sys" / "class" / "infiniband" / name / "fw_ver").write_text(fw + "\n")
    (root / "etc").mkdir(exist_ok=True)
    if nccl_conf is not None:
        (root / "etc" / "nccl.conf").write_text(nccl_conf)
    (root / "usr" / "lib").mkdir(parents=True)
    for name, data in (plugins or {}).items():
        (root / "usr" / "lib" / name).write_bytes(data)
    return root


def steady_modules(python: str, runs: int = 6, before_main: str = "") -> list[str]:
    """The modules a quick probe of ``python`` has loaded once it answered, when its caches
    are warm: it runs until a run leaves its distribution cache as it was (a warm probe of
    an unchanged venv writes nothing), ``runs`` at most. ``before_main``: lines the probe
    runs once its package is installed (``_pkg``), before its main call.
    The caches are the process's (the tests' own XDG_CACHE_HOME), and keep what was read of
    files changed a moment ago (a venv the test just made)."""
    import subprocess

    from envguard.probe.payload import probe_payload

    args = {"verify": "quick", "git": False, "files": [], "caches": [], "cache_quiet_seconds": 0}
    payload = probe_payload(args)
    listing = payload.replace("_code = ", before_main + "_sm = sys.modules\n_code = ", 1).replace(
        "sys.stdout.flush()\n", "sys.stdout.flush()\nsys.stderr.write(' '.join(_sm))\n", 1
    )
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / DIST_CACHE

    def kept() -> dict[str, tuple[int, int]]:
        found = folder.glob("*.bin") if folder.is_dir() else []
        return {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in found}

    modules: list[str] = []
    for _ in range(runs):
        before = kept()
        proc = subprocess.run(
            [python, "-I", "-S", "-"], input=listing.encode(), capture_output=True, check=False
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        modules = proc.stderr.decode().split()
        if before and kept() == before:
            return modules
    raise AssertionError(f"every one of {runs} probes rewrote its distribution cache")
