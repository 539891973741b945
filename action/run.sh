#!/usr/bin/env bash
# The action's one step (action.yml): inputs arrive as INPUT_* variables, never spliced into
# this script's text, and each becomes one argv word of `envguard check`. envguard writes the
# annotations, the job summary ($GITHUB_STEP_SUMMARY) and the outputs ($GITHUB_OUTPUT).
set -euo pipefail
set -f  # inputs are split on spaces and commas, never globbed

if [ -n "${ENVGUARD:-}" ]; then
  read -r -a cmd <<<"$ENVGUARD"   # tests point this at a local envguard
else
  cmd=(uvx --quiet --from "${GITHUB_ACTION_PATH:?}" envguard)
fi

# Options as --name=value (a value can never be taken for an option), the snapshot last
# after "--" (a value starting with "-" is a file name, never an option such as --via).
args=(check --format=github "--fail-on=${INPUT_FAIL_ON:-warning}")
[ -n "${INPUT_LOCK:-}" ] && args+=("--lock=$INPUT_LOCK")
[ -n "${INPUT_PYTHON:-}" ] && args+=("--python=$INPUT_PYTHON")
extras="${INPUT_EXTRAS:-}"
groups="${INPUT_GROUPS:-}"
for extra in ${extras//,/ }; do args+=("--extra=$extra"); done
for group in ${groups//,/ }; do args+=("--group=$group"); done
[ "${INPUT_NO_DEFAULT_GROUPS:-false}" = "true" ] && args+=(--no-default-groups)
args+=(--)
[ -n "${INPUT_SNAPSHOT:-}" ] && args+=("$INPUT_SNAPSHOT")

# The outputs are set before envguard runs: when it cannot run the check (bad input, exit 2)
# a step reading them finds "unknown", never nothing; when it runs the check, the values it
# appends come later and win (GitHub keeps an output's last value).
if [ -n "${GITHUB_OUTPUT:-}" ]; then
  printf 'drift=unknown\nmax-severity=\n' >>"$GITHUB_OUTPUT"
fi

exec "${cmd[@]}" "${args[@]}"
