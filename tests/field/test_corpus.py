"""The corpus itself: a member built from a uv cache whose unpacked entry is not its wheel
(half-written, or edited through a link) is rebuilt from the wheel, not trusted."""

from __future__ import annotations

import sys
from pathlib import Path

from field.corpus import Corpus, record_mismatches, uv, uv_env


class _Small(Corpus):
    SPECS = {"six": ("uv", ("six==1.17.0",))}


def test_a_member_from_a_poisoned_cache_is_rebuilt(field_env: Path, private_cache: Path) -> None:
    env = uv_env(private_cache)
    other = field_env / "other"
    uv("venv", "--quiet", "--python", sys.executable, str(other), env=env)
    uv(
        "pip",
        "install",
        "--quiet",
        "--python",
        str(other / "bin" / "python"),
        "six==1.17.0",
        env=env,
    )
    six = next((other / "lib").glob("python3*/site-packages")) / "six.py"
    with open(six, "a") as f:  # through uv's link: the cache's entry changes too
        f.write("# poisoned\n")

    member = _Small(field_env / "corpus", cache=private_cache)("six")
    assert member.notes == ["cache entries rebuilt: ['six']"]
    assert record_mismatches(member.site) == {}
