"""Variables a snapshot may not set unreviewed: those that point code loading at a folder
or a host. A snapshot is untrusted input (it may come from a pull request), and each of
these makes the next process load code someone else may have written.

The one list (HELD) and its reasons. restore writes a held variable commented out, with
its reason on the line above, and neither `restore --then` nor a bisect candidate gets it
(recovery.restore.env_file_text and run_env).

Held unless this user's envguard signed the snapshot (snapshots/signing.py: an HMAC under
a key in the user's config folder). A file's host and user fields and its owner were
weighed as proof that it is the user's own, and refused: a forged snapshot in a pull
request's checkout on a CI runner is owned by the runner's user, and host and user are
plain strings a forger copies from any log that printed them.
"""

from __future__ import annotations

import re

# (names, why): each pattern is searched in the variable's name.
HELD: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), why)
    for pattern, why in (
        (
            r"^(LD|DYLD)_|PRELOAD",
            "the dynamic loader loads libraries it names into every process",
        ),
        (
            r"^PYTHON(PATH|STARTUP|HOME|USERBASE|PLATLIBDIR|PYCACHEPREFIX)$",
            "Python imports or runs code from where it points",
        ),
        (
            r"^PYTHONWARNINGS$",
            "Python imports the module each filter's category names, at every start",
        ),
        (r"^PYTHONOPTIMIZE$", "Python runs without its asserts (and, at 2, its docstrings)"),
        (
            r"CACHE|_DIRS?$|_ROOT$|EXTENSIONS",
            "names a folder code may be loaded from (compiled kernels, generated Python, "
            "built extensions, remote modules put on sys.path)",
        ),
        (
            r"_HOST$|_PORT$|REDIS|_ADDR$|_SERVER$",
            "names a server cached artifacts (pickled, run on load) are fetched from",
        ),
        (
            r"LIBRAR|_LIB|PLUGIN|INJECTION|TOOL",
            "names a library or plugin loaded into the process",
        ),
        (r"PATH|HOME", "names a search path or home folder code or data is loaded from"),
        (r"ENDPOINT|URL", "names a server models, code or data come from or go to"),
        (
            r"TRUST_REMOTE_CODE|INSECURE_SERIALIZATION|NO_WEIGHTS_ONLY",
            "lets a library run code that comes with a model, data set or checkpoint",
        ),
    )
)


def held(name: str) -> str | None:
    """Why ``name`` from a snapshot is held for review, or None when it may be set."""
    for pattern, why in HELD:
        if pattern.search(name):
            return why
    return None
