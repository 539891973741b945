"""The pure drift engine: properties and default severities."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from envguard.compare.engine import diff
from envguard.compare.models import Severity
from envguard.compare.policy import Policy, policy_from_table
from envguard.snapshots.models import Cache, FileDigest, Repo, Snapshot, Source, TorchBuild
from factories import interpreter, package, snapshot

NAMES = st.sampled_from(
    [
        "torch",
        "numpy",
        "transformers",
        "sglang",
        "wandb",
        "nvidia-nccl-cu12",
        "datasets",
        "boto3",
        "triton",
        "safetensors",
    ]
)
VERSIONS = st.sampled_from(["1.0", "1.1", "2.0", "2.0+cu128", "2.0+cu130", "0.9"])
PACKAGE_SETS = st.dictionaries(NAMES, VERSIONS, max_size=8)


def snap_from(pkgs: dict[str, str]) -> object:
    return snapshot([package(n, v) for n, v in pkgs.items()])


@given(PACKAGE_SETS)
def test_diff_of_a_snapshot_with_itself_is_empty(pkgs: dict[str, str]) -> None:
    s = snap_from(pkgs)
    assert diff(s, s).changes == ()  # type: ignore[arg-type]


@given(PACKAGE_SETS, PACKAGE_SETS)
def test_one_sided_packages_reported_exactly_once(a: dict[str, str], b: dict[str, str]) -> None:
    drift = diff(snap_from(a), snap_from(b))  # type: ignore[arg-type]
    for name in a.keys() ^ b.keys():
        hits = [c for c in drift.changes if c.section == "packages" and c.name == name]
        assert len(hits) == 1
        assert hits[0].kind == ("removed" if name in a else "added")


SWAP = {
    "added": "removed",
    "removed": "added",
    "upgraded": "downgraded",
    "downgraded": "upgraded",
    "variant_changed": "variant_changed",
    "content_changed": "content_changed",
}


@given(PACKAGE_SETS, PACKAGE_SETS)
def test_swapping_sides_mirrors_kinds(a: dict[str, str], b: dict[str, str]) -> None:
    forward = {(c.name, c.kind) for c in diff(snap_from(a), snap_from(b)).changes}  # type: ignore[arg-type]
    backward = {(c.name, c.kind) for c in diff(snap_from(b), snap_from(a)).changes}  # type: ignore[arg-type]
    assert {(n, SWAP[k]) for n, k in forward} == backward


def kinds(drift: object) -> dict[tuple[str, str], Severity]:
    return {(c.name, c.kind): c.severity for c in drift.changes}  # type: ignore[attr-defined]


def test_seed_story_severities() -> None:
    good = snapshot(
        [
            package("torch", "2.11.0+cu128"),
            package("transformers", "4.46.0"),
            package("wandb", "0.18.0"),
        ],
        torch=TorchBuild(version="2.11.0+cu128", cuda="12.8", nccl="2.21.5"),
        caches=(
            Cache(
                kind="inductor", path="/tmp/torchinductor_root", exists=True, bytes=10_000, files=40
            ),
        ),
        files=(FileDigest(path="/code/model.py", sha256="a" * 64, size=10),),
        repos=(Repo(path="/code", head="1" * 40, branch="main"),),
        metrics={"tok_s": 21500},
    )
    bad = snapshot(
        [
            package("torch", "2.11.0+cu130"),
            package("transformers", "4.47.0"),
            package("sglang", "0.4.0"),
            package("flashinfer-python", "0.2.0"),
            package("orjson", "3.10.0"),
        ],
        torch=TorchBuild(version="2.11.0+cu130", cuda="13.0", nccl="2.27.0"),
        caches=(Cache(kind="inductor", path="/tmp/torchinductor_root", exists=False),),
        files=(FileDigest(path="/code/model.py", sha256="b" * 64, size=12),),
        repos=(Repo(path="/code", head="2" * 40, branch="main", dirty=True, diff_sha256="c"),),
        env={"NCCL_DEBUG": "INFO"},
    )
    drift = diff(good, bad)
    found = kinds(drift)
    assert found[("torch", "variant_changed")] is Severity.critical
    assert found[("cuda", "cuda")] is Severity.critical
    assert found[("nccl", "nccl")] is Severity.critical
    assert found[("sglang", "added")] is Severity.critical
    assert found[("flashinfer-python", "added")] is Severity.critical
    assert found[("orjson", "added")] is Severity.warning
    assert found[("transformers", "upgraded")] is Severity.warning
    assert found[("wandb", "removed")] is Severity.warning
    assert found[("/tmp/torchinductor_root", "cold")] is Severity.warning
    assert found[("/code/model.py", "changed")] is Severity.critical
    assert found[("/code", "head_moved")] is Severity.critical
    assert found[("/code", "dirty")] is Severity.warning
    assert found[("NCCL_DEBUG", "added")] is Severity.warning
    assert drift.changes[0].severity is Severity.critical
    assert drift.metrics == {"tok_s": 21500}
    severities = [c.severity.rank for c in drift.changes]
    assert severities == sorted(severities, reverse=True)


def test_warnings_the_good_snapshot_did_not_give_are_notes_not_changes() -> None:
    said = ("a: folder unreadable", "b: no RECORD; content fingerprint unknown")
    good = snapshot([], warnings=(said[0],))
    now = snapshot([], warnings=said)
    drift = diff(good, now)
    assert drift.changes == () and drift.notes == (f"new warning: {said[1]}",)
    assert diff(now, good).notes == ()  # a warning gone is no note
    # the same caveat with other numbers is no news (a fresh cache at both: a CI runner)
    unread = "{} bytecode files were not compared with their source"
    before = snapshot([], warnings=(unread.format(3351),))
    assert diff(before, snapshot([], warnings=(unread.format(168),))).notes == ()
    # nor one naming the venv's own path where the other names its (a copy elsewhere)
    here, there = (
        snapshot([], interpreter=interpreter(prefix=p), warnings=(f"{p}/bin/dpkg is a symlink",))
        for p in ("/opt/a", "/opt/b")
    )
    assert diff(here, there).notes == ()
    many = snapshot([], warnings=tuple(f"w{chr(97 + i)}" for i in range(13)))
    assert diff(good, many).notes[-1] == "and 3 more new warnings"
    assert len(diff(good, many).notes) == 11


def test_what_a_launcher_an_installer_or_a_umask_changes_is_info() -> None:
    """torchrun's run id, uv run's depth, an installer's cache folder, a tracked file made
    group-writable: said, never a failed gate; a lost executable bit and a training
    variable still are."""

    def side(modes: dict[str, int], env: dict[str, str]) -> Snapshot:
        digests = (FileDigest(path=p, sha256="a" * 64, size=1, mode=m) for p, m in modes.items())
        return snapshot([], files=tuple(digests), env=env)

    good = side(
        {"/code/run.sh": 0o755, "/code/model.py": 0o644, "/code/a": 0o644, "/code/b": 0o755},
        {"TORCHELASTIC_RUN_ID": "a1", "UV_RUN_RECURSION_DEPTH": "1", "NCCL_ALGO": "Ring"},
    )
    now = side(
        {"/code/run.sh": 0o644, "/code/model.py": 0o664, "/code/a": 0o666, "/code/b": 0o4755},
        {"TORCHELASTIC_RUN_ID": "b2", "PIP_FIND_LINKS": "/opt/wheels", "NCCL_ALGO": "Tree"},
    )
    found = kinds(diff(good, now))
    assert found[("TORCHELASTIC_RUN_ID", "changed")] is Severity.info
    assert found[("UV_RUN_RECURSION_DEPTH", "removed")] is Severity.info
    assert found[("PIP_FIND_LINKS", "added")] is Severity.info
    assert found[("/code/model.py", "mode")] is Severity.info
    assert found[("/code/run.sh", "mode")] is Severity.warning
    # anyone may write it now; setuid: warnings
    assert found[("/code/a", "mode")] is found[("/code/b", "mode")] is Severity.warning
    assert found[("NCCL_ALGO", "changed")] is Severity.warning


def test_a_variable_a_sides_own_process_changed_is_compared_where_it_started() -> None:
    """The API inside a training script records what torch.compile and cv2 set in its
    process, with each variable's value where that process started (env_at_start). A
    relaunch starts from those values and sets the rest again: only they are compared."""
    good = snapshot(
        [],
        env={"TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_u", "NCCL_ALGO": "Ring",
             "LD_LIBRARY_PATH": "/v/cv2/../../lib64:/opt/cuda/lib64"},
        env_at_start={"TORCHINDUCTOR_CACHE_DIR": None, "PYTHONPATH": "/srv/good",
                      "LD_LIBRARY_PATH": "/opt/cuda/lib64"},
    )  # fmt: skip
    shell = snapshot([], env={"LD_LIBRARY_PATH": "/opt/cuda/lib64", "PYTHONPATH": "/srv/good"})
    drift = diff(good, shell)
    found = kinds(drift)
    said = {c.name: c.message for c in drift.changes}
    # torch set it from nothing; cv2 prepended to what the shell still has: info, and why
    assert found[("TORCHINDUCTOR_CACHE_DIR", "removed")] is Severity.info
    assert found[("LD_LIBRARY_PATH", "changed")] is Severity.info
    assert "the snapshot's run changed it itself after it started" in said["LD_LIBRARY_PATH"]
    # the script unset PYTHONPATH after Python had read it: the shell's is the same start
    assert found[("PYTHONPATH", "added")] is Severity.info
    assert found[("NCCL_ALGO", "removed")] is Severity.warning
    assert "process" not in said["NCCL_ALGO"]
    # what the processes started from differs: drift, said with both starts
    other = snapshot([], env={"PYTHONPATH": "/tmp/attacker"})
    drift = diff(good, other)
    assert kinds(drift)[("PYTHONPATH", "added")] is Severity.warning
    assert kinds(drift)[("LD_LIBRARY_PATH", "removed")] is Severity.warning
    assert (
        "where each process started: /opt/cuda/lib64 -> not set"
        in {c.name: c.message for c in drift.changes}["LD_LIBRARY_PATH"]
    )
    # a forged start cannot hide a loader the shell sets: the start is compared too
    forged = snapshot([], env={}, env_at_start={"LD_PRELOAD": None})
    evil = snapshot([], env={"LD_PRELOAD": "/tmp/evil.so"})
    assert kinds(diff(forged, evil))[("LD_PRELOAD", "added")] is Severity.warning
    # both processes changed it after alike starts, differently (a notebook): drift
    later = snapshot([], env={"TORCHINDUCTOR_CACHE_DIR": "/data/ic"},
                     env_at_start={"TORCHINDUCTOR_CACHE_DIR": None})  # fmt: skip
    assert kinds(diff(good, later))[("TORCHINDUCTOR_CACHE_DIR", "changed")] is Severity.warning
    # a launcher that set it, then ran envguard's command line: its child started with it.
    # Alike as measured is no drift, whatever each process started from.
    launcher = snapshot([], env={"NCCL_ALGO": "Ring"}, env_at_start={"NCCL_ALGO": None})
    child = snapshot([], env={"NCCL_ALGO": "Ring"}, env_at_start={})
    assert diff(launcher, child).changes == ()
    # no side told (older snapshots, --via): as before
    before = kinds(diff(snapshot([], env={"TORCHINDUCTOR_CACHE_DIR": "/t"}), snapshot([])))
    assert before[("TORCHINDUCTOR_CACHE_DIR", "removed")] is Severity.warning


def test_interpreter_source_content_and_info_changes() -> None:
    fp = "f" * 64
    good = snapshot(
        [
            package("numpy", "1.26.4", fingerprint=fp),
            package("flash-attn", "2.6.3", fingerprint=fp),
            package("mylib", "0.1", source=Source(kind="index")),
        ]
    )
    bad = snapshot(
        [
            package("numpy", "1.26.4", fingerprint="e" * 64, installer="pip"),
            package("flash-attn", "2.6.3", fingerprint="e" * 64),
            package("mylib", "0.1", source=Source(kind="editable", url="file:///x", path="/x")),
        ],
        interpreter=interpreter("3.12.1", prefix="/other"),
    )
    found = kinds(diff(good, bad))
    assert found[("python", "version")] is Severity.critical
    assert found[("prefix", "prefix")] is Severity.info
    assert found[("numpy", "content_changed")] is Severity.warning
    assert found[("flash-attn", "content_changed")] is Severity.critical
    assert found[("numpy", "installer_changed")] is Severity.info
    assert found[("mylib", "source_changed")] is Severity.warning
    patch = diff(good, snapshot(good.packages, interpreter=interpreter("3.11.9")))
    assert kinds(patch)[("python", "version")] is Severity.warning


def test_caches_shrunk_grown_and_redacted_env() -> None:
    def cache(n: int) -> Cache:
        return Cache(kind="triton", path="/c", exists=True, bytes=n, files=max(n // 100, 1))

    assert (
        kinds(diff(snapshot(caches=(cache(1000),)), snapshot(caches=(cache(400),))))[
            ("/c", "shrunk")
        ]
        is Severity.warning
    )
    assert (
        kinds(diff(snapshot(caches=(cache(1000),)), snapshot(caches=(cache(2000),))))[
            ("/c", "grown")
        ]
        is Severity.info
    )
    drift = diff(
        snapshot(env={"HF_TOKEN": "<redacted:aaaa1111>"}),
        snapshot(env={"HF_TOKEN": "<redacted:bbbb2222>"}),
    )
    (change,) = drift.changes
    assert change.kind == "changed" and "values redacted" in change.message


def test_policy_overrides_ignore_and_extra_critical() -> None:
    policy = policy_from_table(
        {
            "critical-packages": ["My_Kernels"],
            "ignore-packages": ["wandb"],
            "ignore-sections": ["env"],
            "severity": {"caches.cold": "critical"},
            "fail-on": "critical",
        },
        where="pyproject.toml",
    )
    good = snapshot(
        [package("wandb", "1"), package("my-kernels", "1")],
        caches=(Cache(kind="inductor", path="/c", exists=True, bytes=5, files=1),),
    )
    bad = snapshot(
        [package("wandb", "2"), package("my-kernels", "2")],
        env={"X_Y": "1"},
        caches=(Cache(kind="inductor", path="/c", exists=False),),
    )
    found = kinds(diff(good, bad, policy))
    assert found == {
        ("my-kernels", "upgraded"): Severity.critical,
        ("/c", "cold"): Severity.critical,
    }
    assert policy.fail_on is Severity.critical
    assert Policy().fail_on is Severity.warning


def test_a_folder_recorded_as_two_caches_is_one_cache_in_the_drift() -> None:
    """A file from an older envguard holds the inductor cache's folder a second time, as
    the `--cache` folder that named it: one cache went cold, one change, one verdict word."""
    path = "/tmp/torchinductor_root"
    warm = {"exists": True, "bytes": 1 << 30, "files": 20000}
    good = snapshot(
        metrics={"tok_s": 21500},
        caches=(Cache(kind="inductor", path=path, **warm), Cache(kind="user", path=path, **warm)),
    )
    cold = {"exists": False}
    bad = snapshot(
        caches=(Cache(kind="inductor", path=path, **cold), Cache(kind="user", path=path, **cold))
    )
    drift = diff(good, bad)
    (change,) = [c for c in drift.changes if c.section == "caches"]
    assert change.kind == "cold" and change.message.startswith(f"inductor cache {path} is cold")
    assert "inductor cache cold" in drift.verdict and "user cache cold" not in str(drift.verdict)
