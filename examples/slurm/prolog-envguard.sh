#!/bin/bash
# Slurm Prolog: before a job starts on this node, check its training environment against
# a known-good snapshot; on drift, drain the node with the drift as the reason and fail
# the prolog, so Slurm requeues the job onto another node.
#
# slurm.conf:  Prolog=/etc/slurm/prolog.d/envguard.sh
# Settings, in /etc/slurm/envguard.conf (sourced; root-owned), or ENVGUARD_PROLOG_CONF:
#   ENVGUARD=/opt/envguard/bin/envguard        # a root-owned install
#   ENVGUARD_SNAPSHOT=/shared/envguard/good.json
#   ENVGUARD_PYTHON=/shared/venvs/train        # the venv jobs run (default: the snapshot's)
#   ENVGUARD_FAIL_ON=critical                  # the lowest severity that drains
#                                              # (default: the policy's, as for check
#                                              # and the rank gate: docs/cluster.md)
#   ENVGUARD_PROJECT=/shared/envguard/policy   # root-owned; its pyproject.toml's
#                                              # [tool.envguard] is the policy
#   ENVGUARD_MAINT_RESERVATION=envguard-maint  # jobs in it are not checked: the repair path
#
# Set SchedulerParameters=nohold_on_prolog_fail in slurm.conf: without it Slurm requeues
# the job of a failed prolog held, and it never moves to another node (node-health.md).
#
# The prolog runs as SlurmdUser (root) on every job start: envguard check reads the venv
# through its distribution cache, a few hundred milliseconds on a venv of 300 packages.
# Periodic checks between jobs belong to NHC (envguard.nhc beside this file).
#
# Tested against Slurm 22.05.8 on one node: see tests/examples/test_scheduler_hooks.py.

CONF="${ENVGUARD_PROLOG_CONF:-/etc/slurm/envguard.conf}"
if [[ -r "$CONF" ]]; then
    # shellcheck source=/dev/null
    . "$CONF"
fi
ENVGUARD="${ENVGUARD:-envguard}"
[[ -n "$ENVGUARD_SNAPSHOT" ]] || exit 0  # not configured: nothing to check

# The maintenance path: a repair run through srun inside the maintenance reservation
# reaches the drifted node (node-health.md). The reservation from Slurm's environment,
# else from the job itself.
MAINT="${ENVGUARD_MAINT_RESERVATION:-envguard-maint}"
RESV="${SLURM_JOB_RESERVATION:-}"
if [[ -z "$RESV" && -n "${SLURM_JOB_ID:-}" ]]; then
    RESV=$(scontrol show job -o "$SLURM_JOB_ID" 2> /dev/null | tr ' ' '\n' | sed -n 's/^Reservation=//p')
fi
[[ -n "$RESV" && "$RESV" == "$MAINT" ]] && exit 0

ARGS=( check "$ENVGUARD_SNAPSHOT" --format table )
[[ -n "$ENVGUARD_FAIL_ON" ]] && ARGS+=( --fail-on "$ENVGUARD_FAIL_ON" )
[[ -n "$ENVGUARD_PYTHON" ]] && ARGS+=( --python "$ENVGUARD_PYTHON" )
OUT=$(cd "${ENVGUARD_PROJECT:-/}" && NO_COLOR=1 COLUMNS=200 "$ENVGUARD" "${ARGS[@]}" 2>&1 < /dev/null)
RC=$?
[[ $RC -eq 0 ]] && exit 0

# One short line for `sinfo -R`: envguard's verdict (or its error), plain characters only.
LINE="${OUT%%$'\n'*}"
LINE="${LINE#error: }"
LINE="${LINE//[^A-Za-z0-9 ._:+>\/,()=-]/}"
if [[ $RC -eq 1 ]]; then
    REASON="envguard: ${LINE:0:100}"
else
    REASON="envguard: cannot check: ${LINE:0:80}"
fi
scontrol update NodeName="${SLURMD_NODENAME:-$(hostname -s)}" State=DRAIN Reason="$REASON"
echo "$REASON" >&2
exit 1
