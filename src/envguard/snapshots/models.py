"""Frozen pydantic models of what a snapshot holds (the file format, schema_version 1): the
one declaration of a snapshot's shape.

The fast paths (key sets, the pydantic-free checker and builder, history's keys) and
schema/*.json are generated from these models by ``python -m envguard.dev regenerate`` into
snapshots/shape.py; a test fails while the two disagree. A field added after 1.0 carries
``Since(minor)``: the file's ``schema_minor`` is the largest, and an envguard that reads an
older minor reads past the fields it does not know (snapshots/store.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StringConstraints,
    field_serializer,
    field_validator,
    model_validator,
)

from envguard.reading import UNSAFE_CHARS
from envguard.snapshots.shape import SCHEMA_MINOR
from envguard.version import SCHEMA_VERSION

MetricValue = int | float | str
# One line of text: snapshots are untrusted, and these fields end up in messages and files.
# A Requires-Dist line as the probe records it: one line, at most 512 characters.
Requirement = Annotated[
    str, StringConstraints(pattern="^[^" + UNSAFE_CHARS + "]*$", max_length=512)
]
# One line of text a person may be shown: no control, bidi or line-separator character.
Line = Annotated[str, StringConstraints(pattern="^[^" + UNSAFE_CHARS + "]*$")]
# A version string as PEP 440 spells one: a 10,000-digit "version" is not one, and would make
# int() refuse it (Python's 4,300-digit limit) in every command that compares versions.
VersionText = Annotated[str, StringConstraints(max_length=256)]


@dataclass(frozen=True)
class Since:
    """Annotated metadata: the schema minor version that added a field (pydantic ignores
    it; the generator reads it)."""

    minor: int


class Model(BaseModel):
    # defer_build: a schema is built when a model is first used, not at every start-up.
    # allow_inf_nan=False: NaN and Infinity are not JSON, and would be written back as such.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True, allow_inf_nan=False)


class Interpreter(Model):
    version: str
    implementation: str
    executable: str
    prefix: str
    base_prefix: str
    is_venv: bool
    os: str
    machine: str
    libc: str | None = None
    site_packages: tuple[str, ...] = ()
    markers: dict[str, str] = Field(default_factory=dict)


SourceKind = Literal["index", "url", "vcs", "dir", "editable"]


class Source(Model):
    """Where a distribution came from (PEP 610 direct_url.json; ``index`` when absent)."""

    kind: SourceKind = "index"
    url: str | None = None
    vcs: str | None = None
    commit: str | None = None
    requested_revision: str | None = None
    path: str | None = None
    archive_hash: str | None = None
    subdirectory: str | None = None


# The probe keeps at most this many paths per list (probe/target/installed.py): a
# snapshot holding more was not written by it.
Listed = Field(default=(), max_length=50)


class OnDisk(Model):
    """A distribution's installed files against its RECORD (paths relative to its
    site-packages; at most 50 per list, ``more`` counts the rest)."""

    checked: int = 0
    modified: tuple[Line, ...] = Listed
    missing: tuple[Line, ...] = Listed
    added: tuple[Line, ...] = Listed
    # Paths whose bytes on disk are another distribution's (see Clash).
    clobbered: tuple[Line, ...] = Listed
    more: int = 0


class Claimant(Model):
    name: Line
    version: VersionText


class Clash(Model):
    """A path two or more distributions' RECORDs claim with different contents."""

    path: Line
    claimants: tuple[Claimant, ...] = Field(max_length=64)
    # Whose bytes are on disk (by size, then hash, against each RECORD); None: nobody's.
    owner: Line | None = None


class Package(Model):
    name: str
    display_name: str
    version: VersionText
    installer: str | None = None
    requested: bool = False
    location: str
    # Defaults built without validation: building a validator at import would cost every
    # command its build (pydantic's plugin loader imports importlib.metadata), used or not.
    source: Source = Source.model_construct()
    fingerprint: str | None = None
    shadowed: bool = False
    # Requires-Dist as the METADATA writes it (markers and extras included): what pulled in
    # what, for grouping drift by cause. Empty in snapshots taken before it was recorded.
    requires: tuple[Requirement, ...] = Field(default=(), max_length=2000)
    # The installed files against RECORD; None when not checked (no RECORD, --verify off,
    # or a snapshot taken before it was recorded).
    on_disk: Annotated[OnDisk | None, Since(2)] = None


class TorchBuild(Model):
    version: VersionText
    cuda: str | None = None
    git_version: str | None = None
    hip: str | None = None
    debug: bool | None = None
    cudnn: str | None = None
    nccl: str | None = None
    cublas: str | None = None
    triton: str | None = None


class Library(Model):
    """A GPU library as its bytes say (probe/target/libs.py): a file in site-packages
    (``path`` relative to it, ``dist`` the distribution whose RECORD claims it), or one
    that torch would load from elsewhere (``path`` absolute, no ``dist``)."""

    name: Line
    path: Line
    dist: Line | None = None
    metadata_version: Line | None = None
    # Other distributions whose RECORD claims the same file ("name version").
    also_claimed_by: tuple[Line, ...] = ()
    soname: Line | None = None
    embedded_version: Line | None = None
    # Where embedded_version was read: "string" (in the file), "file name", "soname".
    version_source: Line | None = None
    # The copy the dynamic loader would give torch for this SONAME, why (RPATH,
    # LD_LIBRARY_PATH, RUNPATH, ld.so.cache, default path, torch preload) and its version.
    loader_pick: Line | None = None
    loader_pick_why: Line | None = None
    loader_pick_version: Line | None = None
    # Where the process of `snapshot --pid N` had this SONAME mapped from (" (deleted)"
    # when the file was replaced since): what a running trainer really loaded.
    mapped: Line | None = None
    # Why the file could not be read (not an ELF, a link out of site-packages, ...).
    error: Line | None = None


class Unfit(Model):
    """A compiled extension that cannot load, from its files (probe/target/fit.py): the
    libraries the loader will not find, the versions and symbols its libraries lack."""

    path: Line
    dist: Line | None = None
    # DT_NEEDED names the loader finds nowhere ("libX.so (needed by lib/libY.so)" deeper).
    missing: tuple[Line, ...] = Field(default=(), max_length=64)
    # Version needs a library found does not define ("GLIBCXX_3.4.32 (libstdc++.so.6)").
    versions: tuple[Line, ...] = Field(default=(), max_length=64)
    # Undefined symbols no object in its scope exports (the first 20; symbol_count all).
    symbols: tuple[Line, ...] = Field(default=(), max_length=20)
    symbol_count: int = 0
    # Whose exports they were looked for in ("torch 2.13.0+cpu"), when it needs torch's.
    symbols_from: Line | None = None


class GpuArchs(Model):
    """The sm archs in a loadable extension's fatbin (probe/target/fatbin.py): 86 is sm_86."""

    path: Line
    dist: Line | None = None
    # Archs with a cubin (runs on the same major, minor at least its own).
    cubins: tuple[int, ...] = Field(default=(), max_length=1000)
    # Archs with PTX (JIT-compiled on any GPU at least its arch).
    ptx: tuple[int, ...] = Field(default=(), max_length=1000)


class Fit(Model):
    """The fit check: how many extensions that take torch's or CUDA's symbols were looked
    at, those that cannot load, and the GPU archs of those that carry a fatbin."""

    checked: int = 0
    broken: tuple[Unfit, ...] = Field(default=(), max_length=2048)
    archs: Annotated[tuple[GpuArchs, ...], Since(5), Field(max_length=2048)] = ()


class Accelerator(Model):
    present: bool = False
    driver: str | None = None
    gpus: tuple[str, ...] = ()
    count: int = 0
    nvcc: str | None = None
    source: str | None = None


class Repo(Model):
    path: str
    head: str | None = None
    branch: str | None = None
    dirty: bool = False
    diff_sha256: str | None = None
    untracked: int = 0
    remote: str | None = None
    # Why a live repo was not measured (see FileDigest.error). Never written.
    error: Line | None = Field(default=None, exclude=True)


# A sha256 as hex: it names a blob in the content store, so nothing else (no path) may pass.
Sha256 = Annotated[str, StringConstraints(pattern="^[0-9a-f]{64}$")]


class NcclConf(Model):
    """An NCCL config file (/etc/nccl.conf, ~/.nccl.conf or $NCCL_CONF_FILE): its sha256
    and the NCCL_* keys it sets."""

    path: Line
    sha256: Sha256 | None = None
    keys: dict[str, Line] = Field(default_factory=dict, max_length=64)
    error: Line | None = None


class NetPlugin(Model):
    """A libnccl-net*.so on the loader's path (NCCL's network plugin)."""

    name: Line
    path: Line
    sha256: Sha256 | None = None


class Container(Model):
    """The container the environment runs in, as its runtime says from inside."""

    runtime: Line
    image: Line | None = None
    digest: Line | None = None
    # The container's id: one per node, never compared.
    id: Line | None = None


class HostLayer(Model):
    """The host under the venv (probe/target/hostlayer.py): what every environment on the
    node shares and NCCL reads before its first collective. The kernel and glibc are the
    interpreter's markers and libc; the driver and GPU models the accelerator's."""

    # NVIDIA GPUs on the PCI bus as "10de:DEVICE" ids, one per GPU (sysfs).
    gpu_devices: tuple[Line, ...] = Field(default=(), max_length=64)
    nccl_conf: tuple[NcclConf, ...] = Field(default=(), max_length=2)
    net_plugins: tuple[NetPlugin, ...] = Field(default=(), max_length=64)
    # The plugin NCCL would load (NCCL_NET_PLUGIN, else libnccl-net.so); None: none found.
    net_plugin: Line | None = None
    # nvidia_peermem loaded (GPUDirect RDMA); None: /sys/module not readable.
    peermem: bool | None = None
    infiniband: tuple[Line, ...] = Field(default=(), max_length=64)
    ofed: Line | None = None
    container: Container | None = None


# Permission bits as os.stat gives them (st_mode & 0o7777): a number, not true (0o001) or
# "0755" (decimal 755, 0o1363), which a lax int would make of a forged file's text.
FileMode = Annotated[StrictInt, Field(ge=0, le=0o7777)]


class Compiler(Model):
    """The C++ compiler torch inductor calls ($CXX, else g++) and the first line of
    its --version."""

    name: Line
    path: Line | None = None
    version: Line | None = None
    error: Line | None = None


class TritonKey(Model):
    """triton's version and the sha256 of its triton_key(), computed from the same
    files without importing triton."""

    version: VersionText
    digest: Sha256 | None = None
    files: int = 0
    error: Line | None = None


class CompileKey(Model):
    """What torch.compile's cache keys are made of, beyond torch, Python and the
    variables (recorded in their own sections)."""

    cxx: Compiler | None = None
    triton: TritonKey | None = None
    # Each GPU's compute capability ("9.0"); () without one.
    capabilities: tuple[Line, ...] = ()


class FileDigest(Model):
    path: str
    sha256: Sha256 | None = None
    size: int | None = None
    # The work tree (or the --root) the file lay in, and its path there: the same file is
    # compared and restored by content wherever the checkout lives now (another checkout, a
    # container). None in snapshots taken before it was recorded, or outside any work tree.
    root: str | None = None
    rel: str | None = None
    # A live file read somewhere else than ``path`` (its checkout moved): where. Never written.
    read_from: str | None = Field(default=None, exclude=True)
    # Why a live file has no hash (e.g. outside the paths a snapshot may name). Never written:
    # a saved snapshot's files all hashed, or the snapshot command failed.
    error: Line | None = Field(default=None, exclude=True)
    # Permission bits (st_mode & 0o7777): a restored script keeps its executable bit.
    mode: Annotated[FileMode | None, Since(1)] = None


class CacheArchive(Model):
    """A cache kept in the content store (``snapshot --keep-cache``): a gzip tarball."""

    sha256: Sha256  # of the archive, its name in the store
    files: int  # regular files in it, and their bytes: what a restore must find extracted
    bytes: int
    compressed: int


class CacheBuild(Model):
    """Who built some of an inductor cache's FX graph entries, as the entries say
    (probe/target/compilekey.py): torch's version and git hash, the hashes the entries'
    keys hold of torch's sources (torch_key) and of the system (device, triton), the
    compiler inductor's config named, the GPU, and the sha256 of triton's key."""

    torch: VersionText | None = None
    git_version: Line | None = None
    torch_key: Line | None = None
    system: Line | None = None
    cxx: Line | None = None
    device: Line | None = None
    triton: Line | None = None
    entries: int = 0


class Cache(Model):
    kind: str
    path: str
    exists: bool
    readable: bool = True
    bytes: int = 0
    files: int = 0
    newest_mtime: float | None = None
    archive: CacheArchive | None = None
    # The file system the folder lies on (/proc/self/mountinfo's type: ext4, nfs4, ...).
    fs: Annotated[Line | None, Since(4)] = None
    # Who built its FX graph entries (an inductor cache); () when it holds none.
    builds: Annotated[tuple[CacheBuild, ...], Since(4), Field(max_length=20)] = ()
    # Why a live cache was not walked (see FileDigest.error). Never written.
    error: Line | None = Field(default=None, exclude=True)


class Snapshot(Model):
    schema_version: Annotated[StrictInt, Field(ge=1)] = SCHEMA_VERSION  # not true, not 1.0
    # The minor version of the fields this file may hold (0: written before it was recorded).
    schema_minor: Annotated[StrictInt, Since(1), Field(ge=0)] = SCHEMA_MINOR
    name: Line
    created: datetime
    host: Line
    user: Line
    envguard_version: str
    command: tuple[str, ...] = ()
    via: str | None = None
    note: str | None = None
    metrics: dict[str, MetricValue] = Field(default_factory=dict)
    interpreter: Interpreter
    packages: tuple[Package, ...] = ()
    torch: TorchBuild | None = None
    libraries: Annotated[tuple[Library, ...], Since(2)] = ()
    accelerator: Accelerator = Accelerator.model_construct()
    # The host under the venv; None: not recorded (a snapshot before minor 7).
    host_layer: Annotated[HostLayer | None, Since(7)] = None
    repos: tuple[Repo, ...] = ()
    files: tuple[FileDigest, ...] = ()
    caches: tuple[Cache, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    # Each recorded variable the measuring process set, changed or unset after it started
    # (the Python API in a training script: torch.compile sets TORCHINDUCTOR_CACHE_DIR, cv2
    # prepends to LD_LIBRARY_PATH), with its value at that start, redacted as env's are
    # (None: not set then). diff compares the start values: a relaunch starts from them.
    # None: not told (a remote probe, no /proc, a snapshot before minor 8).
    env_at_start: Annotated[dict[str, str | None] | None, Since(8)] = None
    warnings: tuple[str, ...] = ()
    # Paths claimed by two distributions with different bytes; None: not checked.
    clashes: Annotated[tuple[Clash, ...] | None, Since(2), Field(max_length=1000)] = None
    # Files that run (.py, .pth, .so) at the top of site-packages that no RECORD claims.
    unowned: Annotated[tuple[Line, ...] | None, Since(2), Field(max_length=200)] = None
    # Compiled extensions that cannot load; None: not checked (an older snapshot).
    fit: Annotated[Fit | None, Since(3)] = None
    # torch.compile's key ingredients; None: not recorded (a snapshot before minor 3).
    compile: Annotated[CompileKey | None, Since(4)] = None
    # HMAC-SHA256 of the rest under this user's key (snapshots/signing.py); None: unsigned.
    signature: Annotated[Line | None, Since(6), Field(max_length=256)] = None

    @field_serializer("schema_minor")
    def _written_now(self, minor: int) -> int:
        # Whatever was read, a file written by this envguard holds every field it knows.
        return SCHEMA_MINOR

    @field_validator("env")
    @classmethod
    def _no_secret_values(cls, env: dict[str, str]) -> dict[str, str]:
        # A snapshot from a file or a forged report may hold a secret in clear: it is never
        # kept, shown or compared as such (the probe stores a digest; so does this).
        from envguard.redact import redact_env

        return redact_env(env)

    @field_validator("env_at_start")
    @classmethod
    def _start_redacted(cls, start: dict[str, str | None] | None) -> dict[str, str | None] | None:
        # As env: no secret in clear, whatever a file says (and names of one line each).
        from envguard.snapshots.checks import start_values

        return None if start is None else start_values(start)

    @model_validator(mode="after")
    def _one_entry_per_package(self) -> Snapshot:
        # Two entries for one importable package would become two conflicting pins.
        seen: set[str] = set()
        for p in self.packages:
            if not p.shadowed:
                if p.name in seen:
                    raise ValueError(f"package {p.name!r} is listed twice (neither shadowed)")
                seen.add(p.name)
        return self

    def package_map(self) -> dict[str, Package]:
        """Packages by canonical name, the one the interpreter imports (not shadowed)."""
        return {p.name: p for p in self.packages if not p.shadowed}
