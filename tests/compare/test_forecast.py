"""The compile cache forecast: which changed ingredient makes which cache miss (pure)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from envguard.compare.engine import diff
from envguard.compare.forecast import forecast, networked, stale
from envguard.compare.models import Change, Severity
from envguard.snapshots.models import (
    Accelerator,
    Cache,
    CacheBuild,
    CompileKey,
    Compiler,
    OnDisk,
    Snapshot,
    TorchBuild,
    TritonKey,
)
from factories import interpreter, package, snapshot

GIT = "cf30153c4c131c8164ee7798e5022d810682e2cb"
GXX = "g++ (Debian 12.2.0-14+deb12u1) 12.2.0"
INDUCTOR = "/tmp/torchinductor_me"
TRITON_DIR = "/home/me/.triton/cache"


def build(**changes: Any) -> CacheBuild:
    data: dict[str, Any] = {"torch": "2.13.0+cpu", "git_version": GIT, "cxx": "g++", "entries": 3}
    data.update(changes)
    return CacheBuild(**data)


def _cache(kind: str, path: str, files: int, fs: str, builds: tuple[CacheBuild, ...]) -> Cache:
    return Cache(
        kind=kind,
        path=path,
        exists=files > 0,
        bytes=1000 * files,
        files=files,
        fs=fs,
        builds=builds if files else (),
    )


def env(
    *,
    torch: str = "2.13.0+cpu",
    git: str = GIT,
    cxx: str = "g++",
    cxx_version: str = GXX,
    triton: str | None = None,
    triton_digest: str | None = None,
    gpus: tuple[str, ...] = (),
    caps: tuple[str, ...] = (),
    variables: dict[str, str] | None = None,
    python: str = "3.11.7",
    inductor_files: int = 24,
    triton_files: int = 0,
    builds: tuple[CacheBuild, ...] = (build(),),
    fs: str = "ext4",
    torch_modified: tuple[str, ...] = (),
) -> Snapshot:
    triton_key = None
    if triton is not None:
        triton_key = TritonKey(version=triton, digest=triton_digest or "a" * 64, files=29)
    torch_pkg = package("torch", torch).model_copy(
        update={"on_disk": OnDisk(checked=10, modified=torch_modified)}
    )
    return snapshot(
        [torch_pkg],
        interpreter=interpreter(python),
        torch=TorchBuild(version=torch, git_version=git),
        accelerator=Accelerator(present=bool(gpus), gpus=gpus, count=len(gpus)),
        compile=CompileKey(
            cxx=Compiler(name=cxx, path=f"/usr/bin/{cxx}", version=cxx_version),
            triton=triton_key,
            capabilities=caps,
        ),
        env=variables or {},
        caches=(
            _cache("inductor", INDUCTOR, inductor_files, fs, builds),
            _cache("triton", TRITON_DIR, triton_files, fs, ()),
        ),
    )


def cache_changes(e: Snapshot, a: Snapshot) -> list[Change]:
    return [c for c in diff(e, a).changes if c.section == "caches"]


def kinds(e: Snapshot, a: Snapshot) -> list[tuple[str, str]]:
    return sorted((c.kind, c.name) for c in cache_changes(e, a))


def test_an_unchanged_environment_forecasts_nothing() -> None:
    assert cache_changes(env(), env()) == []


def test_triton_upgrade_with_a_gpu_misses_every_cache_and_says_so_beside_cold() -> None:
    e = env(triton="3.7.0", gpus=("NVIDIA H100",), caps=("9.0",), triton_files=40)
    a = env(triton="3.8.0", gpus=("NVIDIA H100",), caps=("9.0",), triton_files=0)
    messages = [c.message for c in cache_changes(e, a)]
    assert (
        f"triton cache {TRITON_DIR} will miss: triton 3.7.0 -> 3.8.0 is in every kernel's key"
        in (messages)
    )
    assert any(m.startswith(f"triton cache {TRITON_DIR} is cold") for m in messages)
    assert any(
        m.startswith(f"inductor cache {INDUCTOR} will miss: triton 3.7.0 -> 3.8.0")
        for m in messages
    )


def test_triton_upgrade_without_a_gpu_leaves_the_graph_cache_alone() -> None:
    # get_system() holds triton's key only with a GPU: on CPU the FX graph cache hits.
    e, a = env(triton="3.7.0", triton_files=5), env(triton="3.8.0", triton_files=5)
    assert kinds(e, a) == [("will-miss", f"{TRITON_DIR}: triton")]


def test_triton_sources_changed_under_the_same_version() -> None:
    e = env(triton="3.8.0", triton_digest="a" * 64, triton_files=5)
    a = env(triton="3.8.0", triton_digest="b" * 64, triton_files=5)
    (change,) = cache_changes(e, a)
    assert "triton 3.8.0's sources changed (triton_key aaaaaaaaaaaa -> bbbbbbbbbbbb)" in (
        change.message
    )


def test_torch_build_compiler_and_variables_each_named() -> None:
    base = env()
    # the cache's entries were built by the torch before: stale too
    stale_too = [("stale", INDUCTOR), ("will-miss", f"{INDUCTOR}: torch")]
    assert kinds(base, env(torch="2.14.1")) == stale_too
    assert kinds(base, env(git="0" * 40)) == stale_too
    modified = env(torch_modified=("torch/_inductor/codecache.py",))
    (change,) = cache_changes(base, modified)
    assert "torch's installed files changed (torch/_inductor/codecache.py)" in change.message
    assert kinds(base, env(cxx="clang++")) == [
        ("stale", INDUCTOR),  # its entries name g++
        ("will-miss", f"{INDUCTOR}: compiler"),
    ]
    (change,) = cache_changes(base, env(cxx_version="g++ (Wrapped) 99.1.0"))
    assert change.kind == "rebuild" and change.severity == Severity.warning
    assert "will hit, then rebuild" in change.message
    chunk = env(variables={"TORCHINDUCTOR_CPP_MIN_CHUNK_SIZE": "256"})
    assert kinds(base, chunk) == [("will-miss", f"{INDUCTOR}: TORCHINDUCTOR_CPP_MIN_CHUNK_SIZE")]
    threads = env(variables={"TORCHINDUCTOR_COMPILE_THREADS": "1"})
    assert kinds(base, threads) == []
    off = env(variables={"TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"})
    (change,) = cache_changes(base, off)
    assert change.message.endswith(
        "TORCHINDUCTOR_FORCE_DISABLE_CACHES none -> 1 turns the cache off"
    )


def test_a_variable_the_good_runs_own_process_set_forecasts_no_miss() -> None:
    """A snapshot taken by the API inside the training script holds a variable the script
    set before compiling (env_at_start: not set at its start): a relaunch sets it again,
    so the shell's diff forecasts no miss (the env section says it at info)."""
    inside = env(variables={"TORCHINDUCTOR_MAX_AUTOTUNE": "1"}).model_copy(
        update={"env_at_start": {"TORCHINDUCTOR_MAX_AUTOTUNE": None}}
    )
    assert kinds(inside, env()) == []
    # started from another value: the relaunch compiles with another config
    other = env(variables={"TORCHINDUCTOR_MAX_AUTOTUNE": "0"})
    assert kinds(inside, other) == [("will-miss", f"{INDUCTOR}: TORCHINDUCTOR_MAX_AUTOTUNE")]


def test_python_minor_is_a_may_miss_and_a_patch_release_nothing() -> None:
    (change,) = cache_changes(env(), env(python="3.12.1"))
    assert change.kind == "may-miss" and change.severity == Severity.info
    assert cache_changes(env(), env(python="3.11.9")) == []


def test_device_and_capability() -> None:
    e = env(gpus=("NVIDIA A100",), caps=("8.0",), triton="3.8.0", triton_files=3)
    a = env(gpus=("NVIDIA H100",), caps=("9.0",), triton="3.8.0", triton_files=3)
    assert kinds(e, a) == [
        ("will-miss", f"{TRITON_DIR}: device"),
        ("will-miss", f"{INDUCTOR}: device"),
    ]


def test_a_cold_cache_forecasts_nothing_to_lose() -> None:
    e, a = env(inductor_files=0), env(torch="2.14.1", inductor_files=0)
    assert cache_changes(e, a) == []


def test_stale_entries_built_for_another_torch() -> None:
    e = env()
    a = env(torch="2.14.1", git="1" * 40)
    changes = {c.kind: c for c in cache_changes(e, a)}
    assert changes["stale"].message == (
        f"inductor cache {INDUCTOR} is stale: built by torch 2.13.0+cpu for another torch"
        " (2.14.1); every graph will miss"
    )
    assert changes["stale"].severity == Severity.warning
    # entries for this torch among them: not stale
    mixed = env(
        torch="2.14.1", git="1" * 40, builds=(build(), build(torch="2.14.1", git_version="1" * 40))
    )
    assert stale(mixed.caches[0], mixed) is None
    # built with another compiler only
    other = env(builds=(build(cxx="clang++"),))
    assert "built with the C++ compiler clang++; inductor now calls g++" in str(
        stale(other.caches[0], other)
    )
    # stale already in the good snapshot: said, as information
    (change,) = cache_changes(a, a)
    assert change.kind == "stale" and change.severity == Severity.info


def test_a_cache_on_a_network_file_system_is_named() -> None:
    changes = cache_changes(env(), env(fs="nfs4"))
    assert [(c.kind, c.name, c.severity) for c in changes] == [
        ("network-fs", INDUCTOR, Severity.warning)  # the triton cache is not there
    ]
    assert "is on nfs4, a network file system" in changes[0].message
    assert "known source of races" in changes[0].message
    assert all(
        c.severity == Severity.info for c in cache_changes(env(fs="lustre"), env(fs="lustre"))
    )
    assert networked("fuse.sshfs") and networked("gpfs") and not networked("ext4")
    assert not networked(None)


def test_older_snapshots_without_key_ingredients_forecast_only_what_they_hold() -> None:
    old = env().model_copy(update={"compile": None})
    assert forecast("inductor", old, env(cxx="clang++")) == []
    assert [r.ingredient for r in forecast("inductor", old, env(torch="2.14.1"))] == ["torch"]


INGREDIENTS = st.fixed_dictionaries(
    {
        "torch": st.sampled_from(["2.13.0+cpu", "2.14.1"]),
        "cxx": st.sampled_from(["g++", "clang++"]),
        "triton": st.sampled_from([None, "3.7.0", "3.8.0"]),
        "python": st.sampled_from(["3.11.7", "3.12.1"]),
        "variables": st.sampled_from([{}, {"TORCHINDUCTOR_MAX_AUTOTUNE": "1"}]),
    }
)


@given(INGREDIENTS, INGREDIENTS)
def test_the_forecast_names_exactly_the_ingredients_that_changed(
    x: dict[str, Any], y: dict[str, Any]
) -> None:
    e, a = env(**x, triton_files=1), env(**y, triton_files=1)
    named = {r.ingredient for r in forecast("inductor", e, a)}
    expected = {k for k in ("torch", "python") if x[k] != y[k]}
    if x["cxx"] != y["cxx"]:
        expected.add("compiler")
    if x["variables"] != y["variables"]:
        expected.add("TORCHINDUCTOR_MAX_AUTOTUNE")
    assert named == expected  # no GPU: triton is not in the graph key
    assert forecast("inductor", a, a) == []
