"""The pure planner: requirement lines by source, torch index routing, argv-only steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from envguard.recovery.plan import (
    PlanError,
    PlanOptions,
    RunStep,
    Sources,
    plan,
    requirement,
    torch_variant,
)
from envguard.render.shell import shell_script
from envguard.snapshots.models import Source, TorchBuild
from factories import interpreter, package, snapshot


def options(tmp_path: Path, **kw: object) -> PlanOptions:
    return PlanOptions(
        venv=tmp_path / ".venv",
        snapshot_ref="good.json",
        uv="uv",
        build=tmp_path / ".venv.build",
        workdir=tmp_path / "plan",
        **kw,
    )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("source", "line"),
    [
        (Source(), "demo==1.0+cu128"),
        (
            Source(
                kind="vcs",
                url="https://github.com/o/demo",
                vcs="git",
                commit="a" * 40,
                subdirectory="pkg",
            ),
            f"demo @ git+https://github.com/o/demo@{'a' * 40}#subdirectory=pkg",
        ),
        (
            Source(
                kind="url",
                url="https://files.example/demo-1.0-py3-none-any.whl",
                archive_hash="sha256=" + "b" * 64,
            ),
            f"demo @ https://files.example/demo-1.0-py3-none-any.whl#sha256={'b' * 64}",
        ),
        (Source(kind="dir", path="/src/my demo"), "demo @ file:///src/my%20demo"),
        (Source(kind="editable", path="/src/demo"), "-e file:///src/demo"),
    ],
)
def test_requirement_by_source(source: Source, line: str) -> None:
    assert requirement(package("demo", "1.0+cu128", source=source), "x", []) == line


def test_http_url_is_allowed_with_a_warning() -> None:
    warnings: list[str] = []
    requirement(
        package("d", "1", source=Source(kind="url", url="http://mirror/d-1.whl")), "x", warnings
    )
    assert warnings and "plain http" in warnings[0]


def test_torch_variants_route_to_their_index_only(tmp_path: Path) -> None:
    snap = snapshot(
        [
            package("torch", "2.11.0+cu128"),
            package("torchvision", "0.26.0+cu128"),
            package("torchaudio", "2.11.0+cpu"),
            package("numpy", "1.26.4"),
            package("triton", "3.5.0"),
        ]
    )
    p = plan(snap, options(tmp_path))
    steps = {s.kind: s for s in p.steps}
    # The variants first, from their own index; then one sync of every pin keeps them.
    assert [s.kind for s in p.steps] == ["venv", "install", "install", "sync", "verify", "swap"]
    installs = [s for s in p.steps if s.kind == "install"]
    assert [s.argv[s.argv.index("--index-url") + 1] for s in installs] == [
        "https://download.pytorch.org/whl/cpu",
        "https://download.pytorch.org/whl/cu128",
    ]
    assert all("--no-deps" in s.argv for s in installs)
    files = {Path(f.path).name: f.content for f in p.files}
    assert (
        "numpy==1.26.4" in files["requirements.txt"]
        and "triton==3.5.0" in files["requirements.txt"]
    )
    assert "torch==2.11.0+cu128" in files["requirements.txt"]
    assert "numpy" not in files["torch-cu128.txt"] + files["torch-cpu.txt"]
    assert "torch==2.11.0+cu128\ntorchvision==0.26.0+cu128" in files["torch-cu128.txt"]
    assert steps["venv"].argv == (
        "uv",
        "venv",
        "--relocatable",
        "--allow-existing",
        "--python",
        "3.11.7",
        str(tmp_path / ".venv.build"),
    )
    assert all(isinstance(a, str) for s in p.steps if isinstance(s, RunStep) for a in s.argv)


def test_unlabelled_torch_with_non_default_cuda_goes_to_its_index() -> None:
    snap = snapshot([package("torch", "2.7.1")], torch=TorchBuild(version="2.7.1", cuda="11.8"))
    assert torch_variant(snap.packages[0], snap) == "cu118"
    default = snapshot([package("torch", "2.7.1")], torch=TorchBuild(version="2.7.1", cuda="12.6"))
    assert torch_variant(default.packages[0], default) is None


def test_in_place_and_user_index_options(tmp_path: Path) -> None:
    snap = snapshot([package("numpy", "1.26.4")])
    p = plan(
        snap,
        options(
            tmp_path,
            in_place=True,
            sources=Sources(
                index_url="https://mirror/simple",
                extra_index_urls=("https://extra/simple",),
                find_links=("/wh",),
                offline=True,
            ),
        ),
    )
    assert [s.kind for s in p.steps] == ["sync", "verify"]
    sync = p.steps[0].argv
    assert sync[sync.index("--index-url") + 1] == "https://mirror/simple"
    assert "--offline" in sync and "/wh" in sync and p.build is None


def test_python_version_and_implementation_are_validated(tmp_path: Path) -> None:
    bad = snapshot([package("numpy", "1")], interpreter=interpreter("3.11; rm -rf /"))
    with pytest.raises(PlanError, match="is not a Python version"):
        plan(bad, options(tmp_path))
    pypy = snapshot([], interpreter=interpreter("3.10.14", implementation="pypy"))
    assert plan(pypy, options(tmp_path)).python == "pypy@3.10.14"


def test_shell_script_quotes_every_path(tmp_path: Path) -> None:
    odd = tmp_path / "it's a venv"
    p = plan(
        snapshot([package("numpy", "1.26.4")]),
        PlanOptions(
            venv=odd,
            snapshot_ref="good.json",
            uv="uv",
            build=tmp_path / "b",
            workdir=tmp_path / "w",
        ),
    )
    script = shell_script(p)
    assert "'" + str(odd).replace("'", "'\"'\"'") + "'" in script
    assert "<<'ENVGUARD_EOF'" in script and "numpy==1.26.4" in script


def test_shell_script_is_valid_bash(tmp_path: Path) -> None:
    import subprocess

    snap = snapshot([package("torch", "2.11.0+cu128"), package("numpy", "1.26.4")])
    script = tmp_path / "rebuild.sh"
    script.write_text(shell_script(plan(snap, options(tmp_path))))
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    text = script.read_text()
    assert "env -u UV_INDEX" in text and "--no-deps" in text  # the variant step stays pinned


@pytest.mark.parametrize(
    ("source", "line"),
    [
        (Source(), "demo==1.0"),
        (Source(kind="editable", path="/src/demo"), "-e file:///src/demo"),
        (Source(kind="dir", path="/src/demo"), "demo @ file:///src/demo"),
    ],
)
def test_a_package_found_edited_is_taken_from_its_wheel_whatever_its_source(
    tmp_path: Path, source: Source, line: str
) -> None:
    """An editable's line names no package (``-e file:///...``): it is still the one the
    from-wheels step reinstalls, in place and fresh."""
    snap = snapshot([package("demo", "1.0", source=source), package("numpy", "1.26.4")])
    for in_place in (True, False):
        p = plan(
            snap, options(tmp_path, in_place=in_place, check_paths=False, from_wheels=("demo",))
        )
        steps = [s for s in p.steps if isinstance(s, RunStep) and "--no-cache" in s.argv]
        assert len(steps) == 1, p.steps
        argv = steps[0].argv
        assert argv[argv.index("--reinstall-package") + 1] == "demo"
        wheels = next(f for f in p.files if f.path.endswith("from-wheels.txt"))
        assert line in wheels.content.splitlines() and "numpy" not in wheels.content
