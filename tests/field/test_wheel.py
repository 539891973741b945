"""envguard's own wheel, built as a release is (uv build, hatchling from the registry): it
ships the package a command needs and not the checkout-only modules (dev.py writes into
the source tree; testing.py builds the tests' wheels)."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import envguard
from field.corpus import UV, uv_env

SRC = Path(envguard.__file__).parent
ROOT = SRC.parent.parent
CHECKOUT_ONLY = {"envguard/dev.py", "envguard/testing.py"}


def test_the_wheel_ships_every_module_but_the_checkout_only_ones(
    registry: None, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"  # a copy: the build writes nothing into the checkout
    shutil.copytree(
        ROOT,
        tree,
        ignore=shutil.ignore_patterns(".git", ".venv*", "__pycache__", "*.egg-info", "dist"),
    )
    done = subprocess.run(
        [UV, "build", "--wheel", "--out-dir", str(tmp_path / "dist"), str(tree)],
        env=uv_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "dist").glob("envguard_ml-*.whl")
    shipped = {n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("envguard/")}
    source = {
        str(p.relative_to(SRC.parent)) for p in SRC.rglob("*") if p.suffix in (".py", ".typed")
    }
    assert not shipped & CHECKOUT_ONLY
    assert source - shipped == CHECKOUT_ONLY  # everything else a command imports is there
    assert "envguard/py.typed" in shipped
