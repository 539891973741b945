"""Secret redaction: one place for every string that leaves envguard or a target.

Standard library only and Python 3.8 syntax: the probe payload ships this module to the
target interpreter as ``envguard_probe.redact``, so secrets are removed on the far side
before anything crosses the wire, and the host uses the same rules for what it records.
"""

# ruff: noqa: UP006, UP035
from __future__ import annotations

import hashlib
import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Match

SECRET_WORDS = (
    "TOKEN",
    "KEY",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
    "PRIVATE",
    "COOKIE",
    "SESSION",
    "SIGNATURE",
)
REDACTED = "<redacted>"

# Greedy up to the last "@" of the authority: a password may itself contain "@".
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s?#]*)@")
_BARE_USERINFO = re.compile(r"(?<![\w/:@.-])[^\s:/@]+:[^\s/@]+@(?=[\w.\[-])")
# Query parameters that carry credentials (?token=..., S3's X-Amz-Signature=...).
_SECRET_QUERY = re.compile(
    r"(?P<key>[?&#][^=&#\s]*(?:token|key|secret|passw|signature|sig|credential|auth)"
    r"[^=&#\s]*=)[^&#\s]*",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    """True for a variable or option name that holds a secret (``HF_TOKEN``, ``--password``)."""
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS)


def redact_url(url: str) -> str:
    """Remove credentials from every URL in ``url``; an ssh user name alone is kept."""

    def _strip(match: Match[str]) -> str:
        scheme, userinfo = match.group("scheme"), match.group("userinfo")
        if "ssh" in scheme.lower() and ":" not in userinfo:
            return match.group(0)
        return scheme

    url = _URL_USERINFO.sub(_strip, url)
    if "@" in url and ":" in url:  # a proxy written without a scheme: user:password@host
        url = _BARE_USERINFO.sub("", url)
    return _SECRET_QUERY.sub(lambda m: m.group("key") + REDACTED, url) if "=" in url else url


def redact_argv(argv: List[str]) -> List[str]:
    """A command line fit to record: URL credentials, NAME=secret and --secret VALUE hidden."""
    out: List[str] = []
    hide_next = False
    previous = ""
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            previous = arg
            continue
        # sshpass -p PASSWORD, an HTTP "Authorization: Bearer TOKEN" header
        if (previous.endswith("sshpass") and arg == "-p") or arg.strip("'\"").lower() in (
            "bearer",
            "basic",
            "token",
        ):
            out.append(arg)
            hide_next = True
            previous = arg
            continue
        previous = arg
        if " " in arg:  # a quoted command line inside one argument (--via, --then)
            out.append(" ".join(redact_argv(arg.split(" "))))
            continue
        name, sep, _value = arg.partition("=")
        bare = name.lstrip("-")
        if sep and bare and is_secret_name(bare.replace("-", "_")):
            out.append(name + "=" + REDACTED)
        elif arg.startswith("-") and not sep and is_secret_name(bare.replace("-", "_")):
            out.append(arg)
            hide_next = True
        else:
            out.append(redact_url(arg))
    return out


def secret_digest(name: str, value: str) -> str:
    """A short, name-salted hash so two redacted values can be compared, never recovered."""
    digest = hashlib.sha256((name + "\0" + value).encode("utf-8", "surrogateescape")).hexdigest()
    return REDACTED[:-1] + ":" + digest[:8] + ">"
