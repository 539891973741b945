"""Tiny, valid wheels and package indexes for hermetic tests and offline demos.

Used by envguard's own tests, bench/ and examples/seed-story: `uv pip install --offline
--no-index --find-links DIR` takes these. A checkout's module, importable from an editable
install and left out of the wheel (pyproject.toml); nothing the wheel ships imports it.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def dist_name(name: str) -> str:
    return name.replace("-", "_").replace(".", "_")


def make_wheel(
    dest: Path,
    name: str,
    version: str,
    *,
    files: Mapping[str, str | bytes] | None = None,
    requires: Iterable[str] = (),
    scripts: Mapping[str, str] | None = None,
    salt: str = "",
) -> Path:
    """A valid py3-none-any wheel written with zipfile, RECORD hashes included.

    ``salt`` changes the package's bytes but not its version: "a rebuilt wheel".
    """
    dest.mkdir(parents=True, exist_ok=True)
    dist = dist_name(name)
    info = f"{dist}-{version}.dist-info"
    module = dist.lower()
    contents: dict[str, bytes] = {}
    for path, data in (files or {f"{module}/__init__.py": f"VERSION = {version!r}\n"}).items():
        contents[path] = data.encode() if isinstance(data, str) else data
    if salt:
        contents[f"{module}/_build.py"] = f"SALT = {salt!r}\n".encode()
    # Shaped like the field's: a folded License field holding a line of only spaces (a
    # continuation, not the end of the headers) before Requires-Dist, and a description
    # whose text looks like headers (never read as them).
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += ["License: Apache License", "        Version 2.0", "        ", "        END"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    body = "\n\nA test package.\n\nName: not-this\nRequires-Dist: not-a-dependency\n"
    contents[f"{info}/METADATA"] = ("\n".join(meta) + body).encode()
    contents[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: envguard-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    if scripts:
        lines = ["[console_scripts]", *(f"{k} = {v}" for k, v in scripts.items())]
        contents[f"{info}/entry_points.txt"] = ("\n".join(lines) + "\n").encode()
    record = [f"{path},{_record_hash(data)},{len(data)}" for path, data in contents.items()]
    record.append(f"{info}/RECORD,,")
    contents[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = dest / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, data in contents.items():
            zf.writestr(zipfile.ZipInfo(path, date_time=(2024, 1, 1, 0, 0, 0)), data)
    return wheel


def make_torch_wheel(dest: Path, version: str, cuda: str | None, *, salt: str = "") -> Path:
    """A fake torch whose version.py reads like the real one and whose import fails loudly."""
    version_py = (
        "from typing import Optional\n\n"
        "__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip']\n"
        f"__version__ = {version!r}\n"
        "debug = False\n"
        f"cuda: Optional[str] = {cuda!r}\n"
        "git_version = '0123456789abcdef0123456789abcdef01234567'\n"
        "hip: Optional[str] = None\n"
    )
    return make_wheel(
        dest,
        "torch",
        version,
        files={
            "torch/__init__.py": "raise ImportError('envguard must never import torch')\n",
            "torch/version.py": version_py,
        },
        salt=salt,
    )


def make_simple_index(root: Path, variants: Mapping[str, Iterable[Path]]) -> str:
    """A PEP 503 index per variant (``root/cu128/torch/index.html``); returns its file:// base."""
    for variant, wheels in variants.items():
        by_project: dict[str, list[Path]] = {}
        for wheel in wheels:
            project = wheel.name.split("-")[0].replace("_", "-").lower()
            by_project.setdefault(project, []).append(wheel)
        for project, files in by_project.items():
            folder = root / variant / project
            folder.mkdir(parents=True, exist_ok=True)
            links = "".join(f'<a href="{w.as_uri()}">{w.name}</a>\n' for w in files)
            (folder / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
    return root.as_uri()


def install_many(site: Path, *, files: int, per_dist: int = 100, prefix: str = "gen") -> int:
    """``files`` installed files written straight into ``site`` as distributions of
    ``per_dist`` modules each, 20 to a folder (METADATA, WHEEL, INSTALLER and a RECORD with
    true hashes and sizes, written in the order an installer writes them): a venv of any
    size without an installer, for measuring how cost grows and for the bad input of a
    100,000-file venv. Returns the number of distributions written."""
    wheel = "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    count = 0
    for start in range(0, files, per_dist):
        name = f"{prefix}{count:05d}"
        rows = []
        for i in range(start, min(files, start + per_dist)):
            rel = f"{name}/m{(i - start) // 20:03d}/mod{i}.py"
            data = f"VALUE = {i}\n".encode()
            (site / rel).parent.mkdir(parents=True, exist_ok=True)
            (site / rel).write_bytes(data)
            rows.append(f"{rel},{_record_hash(data)},{len(data)}")
        info = site / f"{name}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n\n")
        (info / "WHEEL").write_text(wheel)
        (info / "INSTALLER").write_text("pip\n")
        rows += [f"{info.name}/{m},," for m in ("METADATA", "WHEEL", "INSTALLER", "RECORD")]
        (info / "RECORD").write_text("\n".join(rows) + "\n")
        count += 1
    return count
