"""A rebuild Plan as a standalone bash script, for review and running by hand."""

from __future__ import annotations

import shlex
from pathlib import Path

from envguard.recovery.plan import Plan, Step, SwapStep, VerifyStep, safe_label


def verify_argv(p: Plan, step: VerifyStep) -> list[str]:
    """The `envguard diff` that checks what the verify step checks."""
    only = [arg for section in step.sections for arg in ("--only", section)]
    return [
        *p.envguard,
        "diff",
        step.snapshot,
        "--python",
        step.python,
        *only,
        "--fail-on",
        "warning",
    ]


def step_command(p: Plan, step: Step) -> str:
    """One step as the command a person would type (a swap as the two renames it does)."""
    if isinstance(step, SwapStep):
        return (
            f"mv {shlex.quote(step.build)} {shlex.quote(step.venv)} (the old venv kept as a backup)"
        )
    if isinstance(step, VerifyStep):
        return shlex.join(verify_argv(p, step))
    unset = [arg for var in step.unset_env for arg in ("-u", var)]
    return shlex.join(["env", *unset, *step.argv] if unset else step.argv)


def shell_script(p: Plan) -> str:
    """The same steps as `rebuild --execute`: each one rendered from the plan's own objects."""
    q = shlex.quote
    out = [
        "#!/usr/bin/env bash",
        f"# envguard rebuild plan for snapshot {safe_label(p.snapshot)}",
        "set -euo pipefail",
        "",
    ]
    dirs = sorted({str(Path(f.path).parent) for f in p.files})
    out += [f"mkdir -p {q(d)}" for d in dirs]
    out.append(f"trap {q('rm -rf ' + ' '.join(q(d) for d in dirs))} EXIT")
    for f in p.files:
        # Requirement lines were validated: no newline can end the here-document early.
        out += [f"cat > {q(f.path)} <<'ENVGUARD_EOF'", f.content.rstrip("\n"), "ENVGUARD_EOF"]
    out.append("")
    for i, step in enumerate(p.steps, 1):
        out.append(f"# {i}. {step.purpose}")
        if isinstance(step, SwapStep):
            backup = q(f"{step.venv}.envguard-backup-") + '"$(date -u +%Y%m%d-%H%M%S)"'
            out.append(f"if [ -e {q(step.venv)} ]; then mv {q(step.venv)} {backup}; fi")
            out.append(f"mv {q(step.build)} {q(step.venv)}")
        else:
            out.append(step_command(p, step))
    return "\n".join(out) + "\n"
