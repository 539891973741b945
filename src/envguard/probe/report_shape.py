"""The shape of the probe's report: the one declaration of it. probe/spec.py, the spec
report.py checks every report against, is generated from these TypedDicts
(``python -m envguard.dev regenerate``); at run time they only type the checked report
(imported for type checking: defining them took 2 ms of every command's start)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, TypedDict

if TYPE_CHECKING:  # a string below (annotations are not evaluated): an import saved
    from typing_extensions import NotRequired


# The kind of text a field holds, read by the generator (envguard.dev) into probe/spec.py.
Line = Annotated[str, "line"]  # one line of text
Text = Annotated[str, "text"]  # any text, bounded
HostName = Annotated[str, "host"]


class ReportInterpreter(TypedDict):
    version: Line
    implementation: Line
    executable: Line
    prefix: Line
    base_prefix: Line
    is_venv: bool
    os: Line
    machine: Line
    libc: Line | None
    site_packages: list[Line]
    markers: dict[Line, Line]


class ReportOnDisk(TypedDict):
    checked: int
    modified: list[Line]
    missing: list[Line]
    added: list[Line]
    clobbered: list[Line]
    more: int


class ReportClaimant(TypedDict):
    name: Line
    version: Line


class ReportClash(TypedDict):
    path: Line
    claimants: list[ReportClaimant]
    owner: Line | None


class ReportDist(TypedDict):
    name: Line
    display_name: Line
    version: Line
    location: Line
    metadata_dir: Line
    installer: Line | None
    requested: bool
    direct_url: dict[Line, Any] | None
    fingerprint: Line | None
    shadowed: bool
    requires: list[Line]
    on_disk: ReportOnDisk | None


class ReportTorch(TypedDict):
    version: Line
    cuda: Line | None
    git_version: Line | None
    hip: Line | None
    debug: bool | None


class ReportFile(TypedDict):
    path: Line
    sha256: Line | None
    size: int | None
    mode: int | None
    error: Line | None


class ReportRepo(TypedDict):
    path: Line
    # A repo the far side could not read carries only its path and the error.
    head: NotRequired[Line | None]
    branch: NotRequired[Line | None]
    dirty: NotRequired[bool]
    diff_sha256: NotRequired[Line | None]
    untracked: NotRequired[int]
    remote: NotRequired[Line | None]
    error: Line | None


class ReportCacheBuild(TypedDict):
    """Who built an inductor cache's FX graph entries (probe/target/compilekey.py)."""

    torch: Line | None
    git_version: Line | None
    torch_key: Line | None
    system: Line | None
    cxx: Line | None
    device: Line | None
    triton: Line | None
    entries: int


class ReportCache(TypedDict):
    kind: Line
    path: Line
    exists: bool
    readable: bool
    bytes: int
    files: int
    newest_mtime: float | None
    unreadable_dirs: int
    error: Line | None
    fs: Line | None
    builds: list[ReportCacheBuild]


class ReportCompiler(TypedDict):
    name: Line
    path: Line | None
    version: Line | None
    error: Line | None


class ReportTriton(TypedDict):
    version: Line
    digest: Line | None
    files: int
    error: Line | None


class ReportCompile(TypedDict):
    """What torch.compile's cache keys are made of, beyond torch and Python."""

    cxx: ReportCompiler
    triton: ReportTriton | None
    capabilities: list[Line]


class ReportAccelerator(TypedDict):
    present: bool
    driver: Line | None
    gpus: list[Line]
    count: int
    nvcc: Line | None
    source: Line | None


class ReportNcclConf(TypedDict):
    """An NCCL config file (probe/target/hostlayer.py): its hash and the NCCL_* keys."""

    path: Line
    sha256: Line | None
    keys: dict[Line, Line]
    error: Line | None


class ReportNetPlugin(TypedDict):
    name: Line
    path: Line
    sha256: Line | None


class ReportContainer(TypedDict):
    runtime: Line
    image: Line | None
    digest: Line | None
    id: Line | None


class ReportHostLayer(TypedDict):
    """The host under the venv (probe/target/hostlayer.py)."""

    gpu_devices: list[Line]
    nccl_conf: list[ReportNcclConf]
    net_plugins: list[ReportNetPlugin]
    net_plugin: Line | None
    peermem: bool | None
    infiniband: list[Line]
    ofed: Line | None
    container: ReportContainer | None


class ReportLibrary(TypedDict):
    """A GPU library file (probe/target/libs.py): what its bytes say and what loads."""

    name: Line
    path: Line
    dist: Line | None
    metadata_version: Line | None
    also_claimed_by: list[Line]
    soname: Line | None
    embedded_version: Line | None
    version_source: Line | None
    loader_pick: Line | None
    loader_pick_why: Line | None
    loader_pick_version: Line | None
    mapped: Line | None
    error: Line | None


class ReportUnfit(TypedDict):
    """A compiled extension that cannot load (probe/target/fit.py)."""

    path: Line
    dist: Line | None
    missing: list[Line]
    versions: list[Line]
    symbols: list[Line]
    symbol_count: int
    symbols_from: Line | None


class ReportArchs(TypedDict):
    """The GPU archs in an extension's fatbin (probe/target/fatbin.py)."""

    path: Line
    dist: Line | None
    cubins: list[int]
    ptx: list[int]


class ReportFit(TypedDict):
    checked: int
    broken: list[ReportUnfit]
    archs: list[ReportArchs]


class ProbeReport(TypedDict):
    """What probe/target/main.py prints."""

    probe_version: int
    host: HostName
    user: Line
    interpreter: ReportInterpreter
    packages: list[ReportDist]
    torch: ReportTorch | None
    clashes: list[ReportClash] | None
    unowned: list[Line] | None
    libraries: list[ReportLibrary]
    fit: ReportFit
    files: list[ReportFile]
    repos: list[ReportRepo]
    caches: list[ReportCache]
    env: dict[Line, Text]
    accelerator: ReportAccelerator
    host_layer: ReportHostLayer
    compile: ReportCompile
    warnings: list[Text]
