"""envguard protect: pip and uv in this venv install through `envguard guard`.

Written into a protected venv's site-packages by `envguard protect`, with a .pth line that
imports it at every start of the venv's Python, and removed by `envguard protect --off`.

At start it only puts a finder on sys.meta_path and returns: nothing is read, nothing else
is imported. The finder answers for one module, pip's command base class (however pip was
started: `pip`, `pip3.11`, `python -m pip`, `python -m pip.__main__`, runpy, `python -W
ignore -m pip`, a script calling pip's main); once pip has defined it, the finder wraps
``Command.main``, which pip calls to run a command it parsed itself. The command pip is
about to run is the decision: the run() of `install` and `uninstall` (once pip has parsed
their options: `pip install --help` only prints) is handed to `envguard guard`, every other
command (`pip help install`, `pip show install`, `pip download install`) runs as it would
have. Under `python -S` no .pth runs: the venv's pip.conf pins the GPU stack.

The uv shim protect writes into bin/ runs uv_main() below: the uv commands that change the
venv go to the guard, or are refused when no guard can preview them.

What the guard runs itself carries ENVGUARD_GUARD_TOKEN: its pid and a nonce held in a file
that guard wrote and removes; the token counts only while that guard runs above this
process, so exporting it by hand lets nothing through. Standard library only, Python 3.8.
"""

import os
import sys

# Filled in by `envguard protect` when it writes this file into the venv.
VENV = ""
ENVGUARD = ["python3", "-m", "envguard"]

# The module that defines pip's Command (pip 10 onwards) and the commands that change the
# environment.
_WATCHED = "pip._internal.cli.base_command"
_CHANGING = ("install", "uninstall")
TOKEN = "ENVGUARD_GUARD_TOKEN"
# Processes above this one looked at, at most.
_ANCESTORS = 64


class Finder:
    """On sys.meta_path: asked about every import, it answers for pip's command base only,
    with the spec the other finders give, whose module is armed once it has run."""

    def find_spec(self, name, path=None, target=None):  # type: (str, object, object) -> object
        if name != _WATCHED:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if find is None or type(finder).__name__ == "Finder":
                continue
            spec = find(name, path, target)
            if spec is not None:
                loader = getattr(spec, "loader", None)
                run = getattr(loader, "exec_module", None)
                if run is None:
                    _stop("pip's command module has no loader envguard can watch")

                def exec_module(module, run=run):  # type: (object, object) -> None
                    run(module)  # type: ignore[operator]
                    if getattr(module, "__name__", None) == _WATCHED:
                        arm(module)

                # A path finder's loader is this module's own; a zip's (pip run from a
                # wheel, as ensurepip and virtualenv do) loads its other modules too: only
                # this one is armed.
                loader.exec_module = exec_module  # type: ignore[union-attr]
                return spec
        return None


def arm(module):  # type: (object) -> None
    """Wrap the ``main`` of pip's Command class in ``module``."""
    command = getattr(module, "Command", None)
    main = getattr(command, "main", None)
    if main is None:
        _stop("this pip's Command has no main() for envguard to watch")

    def guarded_main(self, args, main=main):  # type: (object, list[str], object) -> object
        name = getattr(self, "name", None)
        if name in _CHANGING and not inside_guard():
            # pip parses the options first (`pip install --help` prints and ends there);
            # the command's run() is the install itself: that is handed over, unless pip's
            # own options say it changes nothing (`--dry-run`, however it was spelled).
            original = self.run  # type: ignore[attr-defined]

            def run(options, parsed, original=original):  # type: (object, object, object) -> int
                if getattr(options, "dry_run", False) is True:
                    return original(options, parsed)  # type: ignore[operator,no-any-return]
                hand_over(["python", "-m", "pip", str(name), *args])
                return 2

            self.run = run  # type: ignore[attr-defined]
        return main(self, args)  # type: ignore[operator]

    command.main = guarded_main  # type: ignore[union-attr]


def hand_over(installer):  # type: (list[str]) -> None
    """Replace this process with `envguard guard` of ``installer``."""
    command = [*ENVGUARD, "guard", "--venv", VENV, "--", *installer]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(command[0], command)
    except OSError as exc:
        _stop("cannot run envguard (%s)" % exc)


def _stop(why):  # type: (str) -> None
    sys.stderr.write("envguard protect: %s; stopped (envguard protect --off removes it)\n" % why)
    raise SystemExit(2)


def inside_guard():  # type: () -> bool
    """Started by a running `envguard guard` (its dry run, its install): the token names
    its pid and a nonce, the guard's file holds that pid, and the guard is above us."""
    pid, _, nonce = os.environ.get(TOKEN, "").partition(":")
    if not (pid.isascii() and pid.isdigit() and len(nonce) == 32):
        return False
    if not (nonce.isascii() and nonce.isalnum()):
        return False
    try:
        fd = os.open(
            os.path.join(token_folder(), "guard-" + nonce),
            os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0),
        )
        try:
            held = os.read(fd, 32) if os.fstat(fd).st_uid == os.getuid() else b""
        finally:
            os.close(fd)
    except OSError:
        return False
    return held == pid.encode() and _above(int(pid))


def token_folder():  # type: () -> str
    """Where a guard keeps its token (guard/nesting.py writes it): the user's own."""
    return os.path.join(os.environ.get("TMPDIR") or "/tmp", "envguard-%d" % os.getuid())


def _above(pid):  # type: (int) -> bool
    """``pid`` runs, above this process where /proc says who is."""
    if not os.path.isdir("/proc/self"):
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True
    here = os.getppid()
    for _ in range(_ANCESTORS):
        if here == pid:
            return True
        if here <= 1:
            return False
        try:
            with open("/proc/%d/stat" % here, "rb") as fh:
                here = int(fh.read(4096).rpartition(b")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


# uv's options that take a value (as `--name value`): never read as a command's word.
_UV_VALUED = frozenset(
    [
        "--cache-dir",
        "--color",
        "--allow-insecure-host",
        "--directory",
        "--project",
        "--config-file",
        "--python-preference",
        "--python",
        "-p",
        "--with",
        "--with-editable",
        "--with-requirements",
        "--extra",
        "--group",
        "--only-group",
        "--no-group",
        "--package",
        "--env-file",
        "--index",
        "--default-index",
        "--index-url",
        "-i",
        "--extra-index-url",
        "--find-links",
        "-f",
        "--exclude-newer",
        "--resolution",
        "--prerelease",
        "--link-mode",
        "--reinstall-package",
        "--upgrade-package",
        "-P",
        "--refresh-package",
        "--no-binary-package",
        "--no-build-package",
        "--keyring-provider",
        "--index-strategy",
        "--python-platform",
        "--config-setting",
        "-C",
        "--no-extra",
        "--prompt",
        "--seed-package",
        "--fork-strategy",
        "--exclude-newer-package",
        "--no-install-package",
        "--torch-backend",
    ]
)
# `uv run` options that choose what its sync installs: the guarded sync gets them.
_RUN_SELECTION = frozenset(["--extra", "--group", "--only-group", "--no-group", "--package"])
_RUN_SELECTION_FLAGS = frozenset(
    [
        "--all-extras",
        "--no-dev",
        "--only-dev",
        "--all-groups",
        "--no-default-groups",
        "--frozen",
        "--locked",
        "--offline",
        "--no-config",
        "--all-packages",
        "--active",
    ]
)
_TRUE = ("1", "true", "t", "yes", "y", "on")


def _split(args):  # type: (list[str]) -> tuple[list[str], list[str]]
    """(the options before the first word, the rest): values of valued options skipped."""
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--":
        i += 2 if args[i] in _UV_VALUED else 1
    return args[:i], args[i:]


def _value(options, names):  # type: (list[str], tuple[str, ...]) -> str | None
    found = None
    for n, word in enumerate(options):
        key, eq, value = word.partition("=")
        if key in names:
            found = value if eq else (options[n + 1] if n + 1 < len(options) else None)
    return found


def _same(path, venv):  # type: (str, str) -> bool
    try:
        return os.path.samefile(path, venv)
    except OSError:
        return False


def _project_venvs(start, environ):  # type: (str, dict[str, str]) -> list[str]
    """The environments a uv project command started in ``start`` would sync or make:
    each enclosing project's .venv (a workspace's root too) and UV_PROJECT_ENVIRONMENT."""
    found = []
    here = os.path.abspath(start)
    for _ in range(_ANCESTORS):
        if os.path.isfile(os.path.join(here, "pyproject.toml")):
            found.append(os.path.join(here, ".venv"))
            named = environ.get("UV_PROJECT_ENVIRONMENT")
            if named:
                found.append(os.path.join(here, named))
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    return found


def uv_route(args, cwd, environ):  # type: (list[str], str, dict[str, str]) -> tuple[str, list[str]]
    """What the shim does with `uv ARGS` in the protected venv VENV: ("uv", args) to run
    uv as asked, ("guard", argv) to run the guard first, ("refuse", [why])."""
    before, rest = _split(args)
    word, after = (rest[0], rest[1:]) if rest else ("", [])
    guarded = [*ENVGUARD, "guard", "--venv", VENV, "--", "uv"]
    # A dry run changes nothing: uv runs it as asked (the guard would refuse it).
    dry = "--dry-run" in after
    if word in ("add", "remove", "sync"):
        return ("uv", args) if dry and word == "sync" else ("guard", [*guarded, *args])
    if word == "pip":
        sub = _split(after)[1][:1]
        if sub and sub[0] in ("install", "uninstall", "sync") and not dry:
            return "guard", [*guarded, *args]
        return "uv", args
    options, _ = _split(after)
    options = before + options
    start = _value(options, ("--directory", "--project")) or cwd
    start = os.path.join(cwd, start)
    if word == "venv":
        named = [w for w in _split(after)[1] if w != "--"][:1]
        targets = [os.path.join(start, named[0])] if named else _project_venvs(start, environ)
        if not named:
            targets.append(os.path.join(start, ".venv"))
        if any(_same(t, VENV) for t in targets):
            return "refuse", [
                "`uv venv` would replace the protected venv %s (its packages and protection);"
                " run `envguard protect --off` first if that is meant" % VENV
            ]
        return "uv", args
    if word != "run":
        return "uv", args
    withs = ("--with", "--with-editable", "--with-requirements")
    if any(w.partition("=")[0] in withs for w in options):
        return "refuse", [
            "`uv run --with` installs beside the protected venv %s, unguarded; install into it"
            " with `uv pip install` (guarded), then `uv run`" % VENV
        ]
    if "--no-sync" in options or "--no-project" in options or "--script" in options:
        return "uv", args
    if environ.get("UV_NO_SYNC", "").strip().lower() in _TRUE:
        return "uv", args
    venvs = _project_venvs(start, environ)
    active = "--active" in options or environ.get("UV_ACTIVE", "").lower() in _TRUE
    if active and environ.get("VIRTUAL_ENV"):
        venvs.append(environ["VIRTUAL_ENV"])
    if not any(_same(v, VENV) for v in venvs):
        return "uv", args
    sync = ["sync", "--inexact"]
    for n, w in enumerate(options):
        key = w.partition("=")[0]
        if key in _RUN_SELECTION:
            sync += [w] if "=" in w else options[n : n + 2]
        elif w in _RUN_SELECTION_FLAGS:
            sync.append(w)
    return "sync", [start, *guarded, *sync]


def uv_main(real):  # type: (str) -> None
    """The uv shim: route sys.argv[1:] as uv_route() says; ``real`` is uv itself."""
    args = sys.argv[1:]
    if inside_guard():
        os.execv(real, [real, *args])
    how, argv = uv_route(args, os.getcwd(), dict(os.environ))
    if how == "refuse":
        sys.stderr.write("envguard protect: refused: %s\n" % argv[0])
        raise SystemExit(2)
    if how == "uv":
        os.execv(real, [real, *args])
    if how == "guard":
        os.execv(argv[0], argv)
    import subprocess

    # `uv run` syncs the venv first: the guard previews and runs that sync (in the
    # project's folder), then the run goes on with nothing left to sync.
    code = subprocess.call(argv[1:], cwd=argv[0])
    if code:
        raise SystemExit(code)
    before, rest = _split(args)
    os.execv(real, [real, *before, "run", "--no-sync", *rest[1:]])


# Armed where protect wrote it (imported by its .pth line); as envguard's own module
# (envguard.guard.hook) it arms nothing.
if __name__ == "_envguard_protect" and not any(type(f).__name__ == "Finder" for f in sys.meta_path):
    sys.meta_path.insert(0, Finder())  # type: ignore[arg-type]
