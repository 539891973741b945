"""Secret redaction: one place for every string that leaves envguard or a target.

Standard library only and Python 3.8 syntax: the probe payload ships this module to the
target interpreter as ``envguard_probe.redact``, so secrets are removed on the far side
before anything crosses the wire, and the host uses the same rules for what it records.
"""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

from .reading import WORD_CHARS, Regex

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Match, Optional, Pattern

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
    "PASS",
    "PWD",
    "CRED",
    "ACCESS",
)
# Shell variables that hold the working directory, not a password.
_NOT_SECRET = ("PWD", "OLDPWD")
REDACTED = "<redacted>"

# The forms only a text that may hold a secret is searched for are kept as text and compiled
# when first used: compiling them all was a cost of every probe's imports, and most probes
# redact no secret at all.
_COMPILED: Dict[str, Pattern[str]] = {}


def _compiled(text: str) -> Pattern[str]:
    found = _COMPILED.get(text)
    if found is None:
        import re

        found = _COMPILED[text] = re.compile(text)
    return found


# Greedy up to the last "@" of the authority: a password may itself contain "@".
# A match starts only where a run of scheme characters starts (``lead``: what precedes its
# first letter), never inside one: that read the run to its end from every place in it.
_URL_USERINFO = Regex(
    r"(?<![A-Za-z0-9+.-])(?P<lead>[0-9+.-]*)(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)"
    r"(?P<userinfo>[^/\s?#]*)@"
)
_BARE_USERINFO = r"(?<![\w:@.-])[^\s:/@]+:[^\s/@]+@(?=[\w.\[-])"
# Query parameters that carry credentials (?token=..., S3's X-Amz-Signature=...).
_SECRET_QUERY = (
    r"(?i)(?P<key>[?&#][^=&#\s]*(?:token|key|secret|passw|signature|sig|credential|auth)"
    r"[^=&#\s]*=)[^&#\s]*"
)


# Known token shapes, wherever they appear in free text (a note, an error line).
_TOKEN_SHAPES = (
    # Distinctive prefixes match anywhere, also glued to other text ("1.0\x1b[2Jghp_...");
    # "sk-" only at a word start, or "task-..." words would match.
    # "-" as well as "_": a token used as a package name is shown PEP 503-normalised.
    r"(?:gh[pousr][_-][A-Za-z0-9]{20,}|github[_-]pat[_-][A-Za-z0-9_-]{20,}"  # GitHub
    r"|hf[_-][A-Za-z0-9]{20,}"  # Hugging Face
    r"|\bsk-(?:[A-Za-z]+-)?[A-Za-z0-9_-]{20,}"  # OpenAI and lookalikes
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key ids
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
    r"|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"  # JWT
    r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab personal access tokens
    r"|AIza[0-9A-Za-z_-]{35}"  # Google API keys
    r"|npm_[A-Za-z0-9]{36})"  # npm access tokens
)
# NAME=value or NAME: value inside one word, where NAME names a secret (api_key=..., X-Api-Key:...)
# A match starts only where a run of name characters starts (NAME from its first letter): one
# starting inside a run read it to its end each time, and a far side's 64 KiB line without a
# "=" took seconds.
_PAIR = r"(?<![A-Za-z0-9_.-])[0-9.-]*(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)[=:](?P<value>[^\s,;&]*)"
# _PAIR up to its value, and what ends a value (redact_text finds each value's end once).
_PAIR_NAME = _PAIR[: _PAIR.index("(?P<value>")]
_VALUE_END = r"[\s,;&]"


# Every text that holds a secret form above holds one of these: most text (a drift message,
# a version) holds none and is returned as it is, at the cost of one search.
_MAYBE_SECRET = Regex(
    # Case-insensitive words spelled out by hand: re.IGNORECASE makes this search much
    # slower, and it runs for every change of a 100,000-package drift. A superset of what
    # the forms above match (ssh for sshpass, tok for token, any word starting with "-"
    # but the "->" of a version change), never a subset; the Kelvin sign and the long s
    # fold to k and s, as re.IGNORECASE would have them.
    r"[=@]|:\S|(?:^|\s)-(?!>)|[Ss\u017f][Ss\u017f][Hh]|[Bb][Ee][Aa][Rr]|[Bb][Aa][Ss\u017f][Ii][Cc]|[Tt][Oo][Kk\u212a]"
    r"|gh[pousr][_-]|github[_-]pat[_-]|hf[_-]|sk-|AKIA|ASIA|xox[abposr]-|eyJ|glpat-|AIza|npm_"
)


# "password: hunter2", a far side's prompt or echoed setting: a secret word, then the rest of
# its word and ":", then a space (a superset of the labels redact_text hides the next word
# after). A search of its own, in the case-folded text (the Kelvin sign and the long s fold
# as above) and only where there is a ":": as one more branch of the pattern above, or with
# re.IGNORECASE, it made the search of every text slower.
_LABEL = r"(?:pas|pwd|key|tok|sec|cred|auth|priv|cook|sess|sig|acces)\S*[ \t]*:\s"


# A name as uv and pip quote it in their messages (an extra, a group, a project): names are
# not secrets, and one followed by ":" is what a message is about, not a "password:" label.
# Secrets inside backticks (a token's shape, URL credentials, NAME=value) are still hidden.
_QUOTED_NAME = r"`[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?`:?\Z"


# A word starting so is a path (an absolute or a relative one spelled as such): one followed
# by ":" is what an error line is about ("/data/keys/good.json: not a snapshot"), not a
# secret's label, unless its file's own name is a secret's ("/run/secrets/db_password:").
# A bare "secret/db:" is still taken for a label.
_PATHS = ("/", "./", "../", "~/")


# What a text redact_text() leaves as it is may be made of, told without re (_plain): a
# probe redacts the values of the variables it records at every run (a count, a level, a
# path or a list of paths), and re's import is 8 ms of its CPU.
_PLAIN = WORD_CHARS + "/.+:,;-"
_NAME_CHARS = WORD_CHARS + ".-"
# What each token shape of _TOKEN_SHAPES begins with.
_TOKEN_STARTS = (
    *("gh", "github", "hf_", "hf-", "sk-", "AKIA", "ASIA", "xox", "eyJ", "glpat-", "AIza"),
    "npm_",
)


def _plain(text: str) -> bool:
    """True only where redact_text() returns ``text`` as it is: one word of _PLAIN's
    characters (no whitespace, "=", "@", "?", "&" or "#": no label, pair, URL credentials
    or query), not an option, holding no token shape's start, and no name a secret's
    before a ":" (_PAIR's NAME:value). False sends it through the patterns."""
    if text.strip(_PLAIN) or text.startswith("-") or any(t in text for t in _TOKEN_STARTS):
        return False
    at = text.find(":")
    while at >= 0:
        start = at
        while start and text[start - 1] in _NAME_CHARS:
            start -= 1
        name = text[start:at].lstrip("0123456789.-")  # _PAIR's [0-9.-]* before its NAME
        if name and is_secret_name(name):
            return False
        at = text.find(":", at + 1)
    return True


def redact_text(text: str) -> str:
    """Free text (a note, an error line) with every secret form above hidden."""
    return text if _plain(text) else _redacted(text)


def _redacted(text: str) -> str:
    """redact_text() by the patterns."""
    if not _MAYBE_SECRET.search(text) and not (
        ":" in text and _compiled(_LABEL).search(text.casefold())
    ):
        return text
    import re

    words = re.split(r"(\s+)", text)  # words at even places, the whitespace between kept
    words[::2] = redact_argv(words[::2])
    for at in range(2, len(words), 2):  # "Password: hunter2": the value is the next word
        label = words[at - 2]
        if _compiled(_QUOTED_NAME).match(label):
            continue  # "Group `auth-tokens`: ...": a name a tool quotes, not a secret's label
        if label.startswith(_PATHS) and not is_secret_name(label[:-1].rpartition("/")[2]):
            continue  # "/data/keys/good.json: not a snapshot": what an error is about
        if words[at] and label.endswith(":") and is_secret_name(label[:-1]):
            words[at] = REDACTED
        elif words[at] and label in (":", "=") and at >= 4 and is_secret_name(words[at - 4]):
            words[at] = REDACTED  # "password = hunter2" (an ini file), "password : hunter2"
    text = "".join(words)
    text = _compiled(_TOKEN_SHAPES).sub(REDACTED, text)

    if "=" not in text and ":" not in text:
        return text
    # Overlapping on purpose: in --header=X-Api-Key:v the secret name is inside a value.
    # A value is _PAIR's [^\s,;&]* run from its start: each run's end is found once, not
    # once a pair in it ("a:a:a:...", 256 KiB of it, took minutes).
    out, pos, start = [], 0, 0
    run_end = -1
    while True:
        match = _compiled(_PAIR_NAME).search(text, start)
        if match is None:
            break
        begin = start = match.end()
        if begin >= run_end:
            found = _compiled(_VALUE_END).search(text, begin)
            run_end = found.start() if found is not None else len(text)
        value = text[begin:run_end]
        if value and value != REDACTED and is_secret_name(match.group("name")):
            if begin >= pos:
                out.append(text[pos:begin] + REDACTED)
                pos = run_end
            start = run_end
    return "".join(out) + text[pos:]


def redact_env(env: Dict[str, str]) -> Dict[str, str]:
    """Environment variables, sorted: a secret-named value as its digest (kept when it is one
    already), token shapes in the others redacted. Idempotent."""
    out = {}
    for name, value in sorted(env.items()):
        if is_secret_name(name):
            out[name] = value if _compiled(_DIGEST).match(value) else secret_digest(name, value)
        else:
            out[name] = redact_text(value)
    return out


_DIGEST = r"<redacted(?::[0-9a-f]{8})?>\Z"


def is_secret_name(name: str) -> bool:
    """True for a variable or option name that holds a secret (``HF_TOKEN``, ``--password``)."""
    upper = name.upper().lstrip("-")
    if upper in _NOT_SECRET:
        return False
    words = _words(upper)
    # TOK as the last word (SGLANG_HF_TOK), never tok_s (tokens/s) or TOKENIZERS_PARALLELISM.
    last_tok = bool(words) and words[-1] in ("TOK", "TOKS")
    return (
        last_tok
        or any(w.endswith("TOKEN") for w in words)
        or any(word in upper for word in SECRET_WORDS if word != "TOKEN")
    )


# Every ASCII character but A-Z and 0-9, as a blank (_words).
_NOT_WORD = {c: " " for c in range(128) if not (65 <= c <= 90 or 48 <= c <= 57)}


def _words(upper: str) -> List[str]:
    """``[w for w in re.split(r"[^A-Z0-9]+", upper) if w]``, without re (the probe reads
    every variable's name at every run, and re's import is 8 ms of its CPU)."""
    if upper.isascii():
        return upper.translate(_NOT_WORD).split()
    return "".join(c if "A" <= c <= "Z" or "0" <= c <= "9" else " " for c in upper).split()


def redact_url(url: str) -> str:
    """Remove credentials from every URL in ``url``; an ssh user name alone is kept."""

    def _strip(match: Match[str]) -> str:
        scheme, userinfo = match.group("scheme"), match.group("userinfo")
        if "ssh" in scheme.lower() and ":" not in userinfo:
            return match.group(0)
        return match.group("lead") + scheme

    url = _URL_USERINFO.sub(_strip, url)
    if "@" in url and ":" in url:  # a proxy written without a scheme: user:password@host
        url = _compiled(_BARE_USERINFO).sub("", url)
    return (
        _compiled(_SECRET_QUERY).sub(lambda m: m.group("key") + REDACTED, url)
        if "=" in url
        else url
    )


_PASSWORD_COMMANDS = ("sshpass", "mysql", "mysqldump", "mysqladmin", "mariadb")


def _takes_password(previous: str) -> bool:
    """``previous`` is a program whose -p is always a password."""
    word = previous.strip("'\"")  # a quoted command line inside an error message
    return word.endswith(_PASSWORD_COMMANDS)


def _password_like(value: str) -> bool:
    """The value of another program's -p that may be a password: not a port, not a path."""
    return bool(value) and not value.isdigit() and "/" not in value and value[0] not in ".~-"


def _user_option(arg: str, previous: str) -> Optional[str]:
    """curl's user:password (``-u a:b``, ``-ua:b``, ``--user=a:b``, ``--user a:b``) with the
    password hidden, or None when ``arg`` is none of them."""
    if previous in ("-u", "--user") and ":" in arg:
        value, head = arg, ""
    elif arg.startswith("--user=") and ":" in arg:
        value, head = arg[len("--user=") :], "--user="
    elif arg.startswith("-u") and not arg.startswith("--") and ":" in arg[2:]:
        value, head = arg[2:], "-u"
    else:
        return None
    return head + value.split(":", 1)[0] + ":" + REDACTED


def _following(argv: List[str], index: int) -> str:
    return argv[index + 1] if index + 1 < len(argv) else ""


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
        if arg.startswith("-p") and len(arg) > 2 and _takes_password(previous):
            out.append("-p" + REDACTED)  # sshpass -pPASSWORD, mysql -pPASSWORD
            previous = arg
            continue
        user = _user_option(arg, previous)  # curl -u user:PASSWORD, --user=..., -uuser:...
        if user is not None:
            out.append(user)
            previous = arg
            continue
        # -p PASSWORD (sshpass always; otherwise not ssh's -p PORT nor mkdir -p PATH), an
        # HTTP "Authorization: Bearer TOKEN" header
        if (
            arg == "-p"
            and (_takes_password(previous) or _password_like(_following(argv, len(out))))
        ) or arg.strip("'\"").lower() in (
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
        elif sep and arg.startswith("-") and "=" in _value:
            # docker's --env=HF_TOKEN=x, -e=API_KEY=x: the NAME inside the value is a secret's
            out.append(name + "=" + redact_argv([_value])[0])
        else:
            # A token by its shape wherever it stands (--note "key ghp_...", run=AKIA...).
            out.append(_compiled(_TOKEN_SHAPES).sub(REDACTED, redact_url(arg)))
    return out


def redact_metrics(metrics: Dict[str, Any]) -> Dict[str, Any]:
    """Metrics fit to record and show: a secret-named key keeps its name, not its value."""
    out: Dict[str, Any] = {}
    for key in sorted(metrics):
        value = metrics[key]
        if is_secret_name(key):
            value = REDACTED
        elif isinstance(value, str):
            value = redact_text(value)
        out[key] = value
    return out


def secret_digest(name: str, value: str) -> str:
    """A short, name-salted hash so two redacted values can be compared, never recovered."""
    import hashlib  # here: most probes hold no secret, and _hashlib is slow to load

    text = name + "\0" + value
    try:
        data = text.encode("utf-8", "surrogateescape")  # a value read from non-UTF-8 bytes
    except UnicodeEncodeError:  # another lone surrogate (a forged report's "\ud800")
        data = text.encode("utf-8", "surrogatepass")
    digest = hashlib.sha256(data).hexdigest()
    return REDACTED[:-1] + ":" + digest[:8] + ">"
