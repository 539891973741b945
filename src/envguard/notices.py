"""Notes a command says once to the person running it (stderr, as ``note: ...``), not
errors: a snapshot written by a newer envguard, read as far as this one knows.

The library collects them (:func:`said`); the CLI prints each as it is said (:func:`tell`).
"""

from __future__ import annotations

from collections.abc import Callable

_said: dict[str, None] = {}
_listeners: list[Callable[[str], None]] = []


def say(text: str) -> None:
    """Note ``text``, once per process."""
    if text in _said:
        return
    _said[text] = None
    for listener in _listeners:
        listener(text)


def said() -> list[str]:
    """Every note said so far in this process, in order."""
    return list(_said)


def tell(listener: Callable[[str], None]) -> None:
    """Call ``listener`` with each note from now on."""
    _listeners.append(listener)
