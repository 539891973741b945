"""The house's size rule: a module is readable in one sitting. One over 800 lines has more
than one concern (recovery/bisect.py had four at 971 lines): split it where they part."""

from __future__ import annotations

from pathlib import Path

import envguard

SRC = Path(envguard.__file__).parent
LIMIT = 800


def test_no_module_over_800_lines() -> None:
    sizes = {
        str(path.relative_to(SRC.parent)): len(path.read_text(encoding="utf-8").splitlines())
        for path in SRC.rglob("*.py")
    }
    assert len(sizes) > 100, "the walk found too few modules: is SRC the package?"
    over = {name: n for name, n in sorted(sizes.items()) if n > LIMIT}
    assert not over, f"modules over {LIMIT} lines (split each by concern): {over}"
