"""The probe's target-side helpers, installed in-process as the payload installs them."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from factories import load_target, make_dist_info, real_report

script = load_target()


def test_fingerprint_ignores_what_installers_write_differently() -> None:
    info = "demo-1.0.dist-info"
    base = f"demo/__init__.py,sha256=AAA,10\n{info}/METADATA,sha256=BBB,20\n"
    pip_style = base + (
        "demo/__pycache__/__init__.cpython-311.pyc,sha256=CCC,30\n"
        "../../../bin/demo,sha256=DDD,40\n"
        f"{info}/INSTALLER,sha256=EEE,4\n"
        f"{info}/REQUESTED,sha256=FFF,0\n"
        f"{info}/direct_url.json,sha256=GGG,50\n"
        f"{info}/RECORD,,\n"
    )
    uv_style = f"{info}/METADATA,sha256=BBB,20\n../../bin/demo,sha256=XXX,41\ndemo/__init__.py,sha256=AAA,10\n"
    assert script.record_fingerprint(pip_style, info) == script.record_fingerprint(uv_style, info)
    changed = base.replace("AAA", "ZZZ")
    assert script.record_fingerprint(changed, info) != script.record_fingerprint(base, info)


def test_redact_url_removes_credentials_but_keeps_ssh_user() -> None:
    assert script.redact_url("https://user:s3cret@host/simple") == "https://host/simple"
    assert script.redact_url("https://ghp_token@github.com/o/r.git") == "https://github.com/o/r.git"
    assert script.redact_url("git+ssh://git@github.com/o/r") == "git+ssh://git@github.com/o/r"
    assert "pw" not in script.redact_url("ssh://git:pw@host/r")
    assert script.redact_url("no url here") == "no url here"


def test_env_capture_keeps_training_vars_and_redacts_secrets() -> None:
    env = {
        "NCCL_DEBUG": "INFO",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "HF_TOKEN": "hf_supersecretvalue",
        "WANDB_API_KEY": "0123456789abcdef",
        "HF_ENDPOINT": "https://me:pw@hub.example",
        "HOME": "/root",
        "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
    }
    out = script.capture_env(env)
    assert out["NCCL_DEBUG"] == "INFO"
    assert out["LD_LIBRARY_PATH"] == "/usr/local/cuda/lib64"
    assert "HOME" not in out
    assert out["HF_TOKEN"].startswith("<redacted:") and "supersecret" not in out["HF_TOKEN"]
    assert "0123456789abcdef" not in out["WANDB_API_KEY"]
    assert out["HF_ENDPOINT"] == "https://hub.example"
    # the same value gives the same digest, a different one another
    again = script.capture_env({"HF_TOKEN": "hf_supersecretvalue"})["HF_TOKEN"]
    # what loads code or changes how Python runs it, beside the library path
    changed = {
        "LD_AUDIT": "/tmp/audit.so",
        "PYTHONHOME": "/opt/py",
        "PYTHONOPTIMIZE": "2",
        "PYTHONWARNINGS": "error",
        "PYTHONPYCACHEPREFIX": "/tmp/pyc",
    }
    assert script.capture_env({**changed, "PYTHONUNBUFFERED": "1"}) == changed
    other = script.capture_env({"HF_TOKEN": "hf_other"})["HF_TOKEN"]
    assert again == out["HF_TOKEN"] != other


def test_walk_tree_counts_files_and_never_follows_symlinks(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "one").write_bytes(b"x" * 10)
    (root / "a" / "b" / "two").write_bytes(b"y" * 5)
    (root / "a" / "loop").symlink_to(root)  # a loop a follower would never leave
    outside = tmp_path / "big"
    outside.write_bytes(b"z" * 1000)
    (root / "link").symlink_to(outside)
    result = script.walk_tree(str(root))
    assert result["exists"] and result["readable"]
    assert (result["bytes"], result["files"]) == (15, 2)
    assert result["newest_mtime"] is not None


def test_walk_tree_missing_and_unreadable(tmp_path: Path) -> None:
    assert script.walk_tree(str(tmp_path / "nope"))["exists"] is False
    locked = tmp_path / "locked"
    (locked / "sub").mkdir(parents=True)
    (locked / "f").write_text("data")
    (locked / "sub").chmod(0)
    try:
        result = script.walk_tree(str(locked))
        if os.geteuid() != 0:  # root reads everything
            assert result["unreadable_dirs"] == 1
        assert result["files"] == 1
    finally:
        (locked / "sub").chmod(0o755)


def test_scan_packages_survives_broken_and_duplicate_metadata(tmp_path: Path) -> None:
    site1, site2 = tmp_path / "site1", tmp_path / "site2"
    make_dist_info(
        site1, "Good_Pkg", "1.0", requested=True, record="good_pkg/__init__.py,sha256=A,1\n"
    )
    make_dist_info(site2, "good-pkg", "0.9")
    make_dist_info(site1, "nometa", "1.0", metadata="")
    broken = site1 / "broken-2.0.dist-info"
    broken.mkdir()  # no METADATA at all: version from the directory name
    (site1 / "bad_url-1.0.dist-info").mkdir()
    (site1 / "bad_url-1.0.dist-info" / "METADATA").write_text("Name: bad-url\nVersion: 1.0\n\n")
    (site1 / "bad_url-1.0.dist-info" / "direct_url.json").write_text("{not json")
    warnings: list[str] = []
    found = script.scan_packages([str(site1), str(site2)], warnings)
    by = {(p["name"], p["location"]): p for p in found}
    good = by[("good-pkg", str(site1))]
    assert good["display_name"] == "Good_Pkg" and good["requested"] and not good["shadowed"]
    assert good["fingerprint"] is not None
    assert by[("good-pkg", str(site2))]["shadowed"] is True
    assert by[("broken", str(site1))]["version"] == "2.0"
    assert by[("nometa", str(site1))]["version"] == "1.0"
    assert any("shadowed" in w for w in warnings)
    assert any("direct_url.json is not valid JSON" in w for w in warnings)
    assert any("metadata unreadable" in w for w in warnings)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "__version__ = '2.11.0+cu128'\ndebug = False\ncuda: Optional[str] = '12.8'\n"
            "git_version = 'abc'\nhip: Optional[str] = None\n",
            {
                "version": "2.11.0+cu128",
                "cuda": "12.8",
                "git_version": "abc",
                "hip": None,
                "debug": False,
            },
        ),
        ("this is not python (", {"version": "2.0", "cuda": None}),
    ],
)
def test_torch_build_parses_version_py(
    tmp_path: Path, source: str, expected: dict[str, object]
) -> None:
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "version.py").write_text(source)
    pkg = {"name": "torch", "version": "2.0", "location": str(tmp_path), "shadowed": False}
    warnings: list[str] = []
    build = script.torch_build([pkg], warnings)
    assert build is not None
    assert {k: build[k] for k in expected} == expected


# A version.py line as the pattern may read it: a name (one the probe reads, one that begins
# with it, another), blanks, an annotation, "=", a value, and what else may stand there.
_BLANKS = st.text(alphabet=" \t", max_size=3)
_LINE = st.builds(
    "".join,
    st.tuples(
        st.sampled_from(["__version__", "debug", "cuda", "git_version", "hip", "cuda_x", "cudaé",
                         "hip1", "de", "x", "_", "", " cuda", "\u0663"]),
        _BLANKS,
        st.sampled_from(["", ":", ": Optional[str] ", ":x=", ":\t", "::"]),
        _BLANKS,
        st.sampled_from(["=", "", "==", ":="]),
        _BLANKS,
        st.text(alphabet=" \t'\"x1Noé\r=:#\x0b\u2028", max_size=6),
        _BLANKS,
    ),
)  # fmt: skip


@settings(max_examples=3000, deadline=None)
@given(st.lists(_LINE, max_size=6), st.sampled_from(["\n", "\r\n", "\n\n"]))
def test_version_py_lines_are_read_as_the_pattern_reads_them(lines: list[str], end: str) -> None:
    """The probe reads torch/version.py without re (its import is 8 ms of every probe): it
    finds what the one pattern finds, for the names it keeps."""
    source = end.join(lines)
    keys = script._TORCH_KEYS
    by_pattern = [(n, v) for n, v in re.findall(script._ASSIGN.pattern, source) if n in keys]
    assert script.assigned(source) == by_pattern


def test_the_probe_writes_its_report_as_json_dumps_does() -> None:
    """The report's text is json.dumps' own, written without importing json."""
    report = real_report()
    odd = {"k": ["\udcff", "\u202e", "\x00", 1e300, -0.0, 2**70, True, None, {}, []], "": {"1": 2}}
    for value in (report, odd, [], "text", 5):
        assert script.dump_json(value) == json.dumps(value)
    looped: list[object] = []
    looped.append(looped)
    with pytest.raises(ValueError, match="Circular reference"):
        script.dump_json(looped)
    with pytest.raises(TypeError, match="not JSON serializable"):
        script.dump_json({"a": object()})


def test_accelerator_parses_nvidia_smi_and_nvcc() -> None:
    smi = "NVIDIA H200, 570.86.15\nNVIDIA H200, 570.86.15\n"
    nvcc = "Cuda compilation tools, release 12.8, V12.8.93\n"
    acc = script.accelerator(smi, nvcc)
    assert acc["present"] and acc["count"] == 2 and acc["driver"] == "570.86.15"
    assert acc["gpus"] == ["NVIDIA H200", "NVIDIA H200"] and acc["nvcc"] == "12.8.93"


def test_without_nvidia_smi_the_driver_is_read_from_the_kernel_module(tmp_path: Path) -> None:
    """A fake /proc: the module's version line, as a node without nvidia-smi has it."""
    version = tmp_path / "driver" / "nvidia" / "version"
    version.parent.mkdir(parents=True)
    version.write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    )
    acc = script.accelerator(None, None, str(tmp_path))
    assert acc["driver"] == "550.54.15" and acc["source"] == "/proc/driver/nvidia/version"
    assert script.accelerator(None, None, str(tmp_path / "none"))["driver"] is None


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://user:p@ss@host/x", "https://host/x"),
        ("https://h/simple?token=abc&x=1", "https://h/simple?token=<redacted>&x=1"),
        ("https://b.s3/k.whl?X-Amz-Signature=abc", "https://b.s3/k.whl?X-Amz-Signature=<redacted>"),
    ],
)
def test_redact_url_edge_cases(url: str, expected: str) -> None:
    assert script.redact_url(url) == expected


def test_redact_argv_hides_secret_options_and_assignments() -> None:
    argv = [
        "envguard",
        "snapshot",
        "--via",
        "env HF_TOKEN=hf_x ssh gpu01",
        "--token",
        "abc",
        "--password=xyz",
        "--metric",
        "tok_s=21500",
        "WANDB_API_KEY=k",
    ]
    out = script.redact_argv(argv)
    text = " ".join(out)
    assert "hf_x" not in text and "abc" not in text and "xyz" not in text and "=k" not in text
    assert "ssh gpu01" in text and "tok_s=21500" in text


def test_damaged_dist_info_is_a_warning_never_a_hang(tmp_path: Path) -> None:
    """METADATA as a FIFO or a link to /dev/zero, direct_url.json nested 100,000 deep."""
    site = tmp_path / "site"
    fifo = make_dist_info(site, "fifo-meta", "1.0")
    (fifo / "METADATA").unlink()
    os.mkfifo(fifo / "METADATA")
    zero = make_dist_info(site, "zero-meta", "1.0")
    (zero / "METADATA").unlink()
    (zero / "METADATA").symlink_to("/dev/zero")
    make_dist_info(site, "deep-url", "1.0", direct_url="[" * 100_000 + "]" * 100_000)
    warnings: list[str] = []
    found = {p["name"]: p for p in script.scan_packages([str(site)], warnings)}
    assert set(found) == {"fifo-meta", "zero-meta", "deep-url"}  # names from the folder
    assert found["deep-url"]["direct_url"] is None
    assert sum("metadata unreadable (not a regular file)" in w for w in warnings) == 2
    assert any("direct_url.json is not valid JSON" in w for w in warnings)


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_headers_end_at_the_first_empty_line_not_at_a_folded_blank_one(
    tmp_path: Path, newline: str
) -> None:
    """Real METADATA folds its License text over lines of only spaces: Requires-Dist after
    them still counts (62 of 168 real packages lost theirs), the description never does,
    and a header block longer than one read (or split across two) is read whole."""
    from factories import load_target

    target = load_target()
    license_text = ["License: MIT", "        ", "        Permission is hereby granted", "    "]
    filler = [f"Classifier: Topic :: Thing {i}" for i in range(2000)]  # past one 16 KB read
    lines = ["Metadata-Version: 2.1", "Name: sglang", "Version: 0.5.23", *license_text,
             *filler, "Requires-Dist: torch==2.14.1", "Requires-Dist: numpy; extra == 'x'"]  # fmt: skip
    body = ["", "# sglang", "", "Requires-Dist: not-a-dependency", "Name: not-this"]
    path = tmp_path / "METADATA"
    path.write_bytes(newline.join(lines + body).encode())
    requires: list[str] = []
    found = target.metadata_headers(str(path), requires)
    assert found == {"Name": "sglang", "Version": "0.5.23"}
    assert requires == ["torch==2.14.1", "numpy; extra == 'x'"]


def test_a_venv_of_debians_python_is_read_where_pip_installs(tmp_path: Path) -> None:
    """Debian's and Ubuntu's /usr/bin/python3 default to the posix_local scheme
    (<venv>/local/lib/.../dist-packages): its venvs once read as empty."""
    import subprocess
    import sys

    system = Path("/usr/bin/python3")
    if not system.exists():
        pytest.skip("no /usr/bin/python3 on this machine")
    schemes = subprocess.run(
        [str(system), "-I", "-c", "import sysconfig; print(sysconfig.get_scheme_names())"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    if "posix_local" not in schemes:
        pytest.skip("/usr/bin/python3 is not Debian's build here")
    venv = tmp_path / "venv"
    subprocess.run([str(system), "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = venv.glob("lib/python3*/site-packages")
    from factories import make_dist_info

    make_dist_info(site, "alpha", "1.0")
    out = subprocess.run(
        [sys.executable, "-m", "envguard", "snapshot", "--python", str(venv), "--out", "-"],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    ).stdout  # fmt: skip
    import json

    doc = json.loads(out)
    assert [p["name"] for p in doc["packages"]] == ["alpha"]
    assert doc["interpreter"]["site_packages"] == [str(site)]
