"""The field corpus's members and helpers; the fixtures are in conftest.py."""

from __future__ import annotations

import base64
import contextlib
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

from envguard.tools import find_uv

UV = find_uv()
HERE = Path(__file__).parent
CACHE = Path(
    os.environ.get("ENVGUARD_FIELD_CACHE") or Path.home() / ".cache" / "envguard-field"
).expanduser()
# The machine's own folder of wheels (torch's CPU build for this Python lies there).
MACHINE_WHEELS = Path("/opt/wheels")
# Seconds one uv install may take: a cold cache downloads a few GB.
INSTALL_TIMEOUT = 1200


def uv_env(cache: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment a corpus uv runs in: the registry on, no user config, the corpus's
    cache (or ``cache``), and this machine's pip settings out of the way."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PIP_", "UV_", "VIRTUAL_ENV", "CONDA_"))
    }
    env["PATH"] = os.pathsep.join([os.path.dirname(UV), env.get("PATH", os.defpath)])
    env.update(
        UV_CACHE_DIR=str(cache or CACHE / "uv"),
        UV_NO_CONFIG="1",
        UV_PYTHON_DOWNLOADS="never",
        UV_LINK_MODE="hardlink",
        NO_COLOR="1",
    )
    env.update(extra)
    return env


def uv(
    *argv: str,
    env: dict[str, str] | None = None,
    timeout: float = INSTALL_TIMEOUT,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run uv; a failure raises with uv's own words."""
    done = subprocess.run(
        [UV, *argv],
        env=env or uv_env(),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise AssertionError(f"uv {' '.join(argv)} failed ({done.returncode}):\n{done.stderr}")
    return done


def cpu_torch_venv(venv: Path) -> Path:
    """A venv at ``venv`` holding the machine's torch 2.13.0+cpu; returns its python."""
    uv("venv", "--quiet", "--python", sys.executable, str(venv))
    py = venv / "bin" / "python"
    links = ["--find-links", str(MACHINE_WHEELS)]
    uv("pip", "install", "--quiet", "--python", str(py), *links, "torch==2.13.0+cpu")
    return py


NETWORK_WORDS = (
    "network",
    "connect",
    "dns",
    "resolve host",
    "timed out",
    "timeout",
    "tls",
    "certificate",
    "failed to fetch",
    "request failed",
    "offline",
    "unreachable",
)


@dataclass
class Member:
    """One venv of the corpus."""

    name: str
    venv: Path
    reqs: tuple[str, ...]
    installer: str  # "uv" (hardlinks into the corpus cache) or "pip" (copies)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def site(self) -> Path:
        return next((self.venv / "lib").glob("python3*/site-packages"))


def record_mismatches(site: Path, only: set[str] | None = None) -> dict[str, list[str]]:
    """Distribution -> its installed files whose bytes differ from its RECORD, every file
    hashed (not a quick rule): the oracle the repair tests and the corpus's own check use."""
    bad: dict[str, list[str]] = {}
    records: dict[str, list[list[str]]] = {}
    claims: dict[str, int] = {}
    for record in sorted(site.glob("*.dist-info/RECORD")):
        dist = canonicalize_name(record.parent.name.removesuffix(".dist-info").rsplit("-", 1)[0])
        with open(record, newline="") as f:
            records[dist] = list(csv.reader(f))
        for row in records[dist]:
            if row:
                claims[row[0]] = claims.get(row[0], 0) + 1
    for dist, rows in records.items():
        if only is not None and dist not in only:
            continue
        for row in rows:
            if len(row) != 3 or not row[1] or row[0].startswith(("..", "/")):
                continue
            if claims.get(row[0], 0) > 1:
                continue  # claimed twice (flashinfer-python and torch-c-dlpack-ext both
                # ship build_backend.py): the last install owns it; envguard's clashes
            path, digest = row[0], row[1]
            algorithm, _, expected = digest.partition("=")
            try:
                h = hashlib.new(algorithm)
                with open(site / path, "rb") as data:
                    for block in iter(lambda: data.read(1 << 20), b""):
                        h.update(block)
            except OSError:
                bad.setdefault(dist, []).append(f"{path} (missing)")
                continue
            if base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode() != expected:
                bad.setdefault(dist, []).append(path)
    return bad


class Corpus:
    """Members built on first use, once per session, into ``root``."""

    SPECS: dict[str, tuple[str, tuple[str, ...]]] = {
        # name: (installer, requirements)
        "torch-cpu": ("uv-machine", ("torch==2.13.0+cpu",)),
        "torch-cuda": ("uv", ("torch==2.14.1",)),
        "torch-cuda-pip": ("pip", ("torch==2.14.1",)),
        "nccl-12-then-13": ("uv-seq", ("nvidia-nccl-cu12", "nvidia-nccl-cu13")),
        "nccl-13-then-12": ("uv-seq", ("nvidia-nccl-cu13", "nvidia-nccl-cu12")),
        "opencv-both": ("uv-seq", ("opencv-python", "opencv-python-headless")),
        "sglang": ("uv", ("torch==2.14.1", "sglang")),
    }

    def __init__(self, root: Path, cache: Path | None = None) -> None:
        self.root = root
        self.env = uv_env(cache)
        self.built: dict[str, Member] = {}

    def __call__(self, name: str) -> Member:
        member = self.built.get(name)
        if member is None:
            member = self.built[name] = self._build(name)
        return member

    def _build(self, name: str) -> Member:
        kind, reqs = self.SPECS[name]
        venv = self.root / name
        started = time.monotonic()
        member = Member(name, venv, reqs, "pip" if kind == "pip" else "uv")
        for attempt in (1, 2):
            shutil.rmtree(venv, ignore_errors=True)
            uv("venv", "--quiet", "--python", sys.executable, str(venv), env=self.env)
            self._install(kind, venv, reqs)
            bad = record_mismatches(member.site)
            # pip copies from wheels it keeps zipped; a later install over an earlier one
            # (uv-seq) overwrites shared paths by design: those members are what they are.
            if not bad or kind in ("pip", "uv-seq"):
                break
            if attempt == 2:
                raise AssertionError(f"{name}: built twice, files still differ: {bad}")
            # A cache entry that is not its wheel (half-written, or edited through a link):
            # drop the packages that carry the bad files and build again.
            member.notes.append(f"cache entries rebuilt: {sorted(bad)}")
            uv("cache", "clean", *sorted(bad), env=self.env)
        member.seconds = time.monotonic() - started
        return member

    def _install(self, kind: str, venv: Path, reqs: tuple[str, ...]) -> None:
        python = str(venv / "bin" / "python")
        if kind == "pip":
            uv("pip", "install", "--quiet", "--python", python, "pip", env=self.env)
            env = {k: v for k, v in self.env.items() if not k.startswith("UV_")}
            env["PIP_CACHE_DIR"] = str(CACHE / "pip")
            env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
            env["PIP_CONFIG_FILE"] = os.devnull
            subprocess.run(
                [python, "-m", "pip", "install", "--quiet", *reqs],
                env=env,
                check=True,
                timeout=INSTALL_TIMEOUT,
                stdin=subprocess.DEVNULL,
            )
        elif kind == "uv-machine":
            uv(
                "pip",
                "install",
                "--quiet",
                "--python",
                python,
                "--find-links",
                str(MACHINE_WHEELS),
                *reqs,
                env=self.env,
            )
        elif kind == "uv-seq":
            for req in reqs:
                uv("pip", "install", "--quiet", "--python", python, req, env=self.env)
        else:
            uv("pip", "install", "--quiet", "--python", python, *reqs, env=self.env)


def envguard(
    *argv: str, cwd: Path | None = None, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The envguard command as a user runs it (a real process)."""
    return subprocess.run(
        [sys.executable, "-m", "envguard", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def load_json(text: str) -> dict[str, object]:
    with contextlib.suppress(json.JSONDecodeError):
        return json.loads(text)  # type: ignore[no-any-return]
    raise AssertionError(f"not JSON: {text[:500]}")


def rebuilt_torch(cuda: str) -> Path:
    """The machine's CPU torch wheel as if rebuilt for CUDA ``cuda``: the same version and
    file name, torch/version.py saying ``cuda = '<cuda>'`` and RECORD hashing it, the rest
    the real bytes. Kept in the corpus cache; written whole or not at all."""
    source = next(MACHINE_WHEELS.glob("torch-2.13.0+cpu-*.whl"))
    folder = CACHE / "built" / f"torch-cuda{cuda}"
    wheel = folder / source.name
    if wheel.is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / (source.name + ".partial")
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(partial, "w", zipfile.ZIP_STORED) as zout:
        record_name = next(n for n in zin.namelist() if n.endswith(".dist-info/RECORD"))
        version = zin.read("torch/version.py").replace(
            b"cuda: Optional[str] = None", f"cuda: Optional[str] = '{cuda}'".encode()
        )
        digest = base64.urlsafe_b64encode(hashlib.sha256(version).digest()).rstrip(b"=")
        rows = []
        for line in zin.read(record_name).decode().splitlines():
            if line.startswith("torch/version.py,"):
                line = f"torch/version.py,sha256={digest.decode()},{len(version)}"
            rows.append(line)
        for info in zin.infolist():
            if info.filename == "torch/version.py":
                zout.writestr(info.filename, version)
            elif info.filename == record_name:
                zout.writestr(info.filename, "\n".join(rows) + "\n")
            else:
                with zin.open(info) as src, zout.open(info.filename, "w", force_zip64=True) as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
    os.replace(partial, wheel)
    return folder
