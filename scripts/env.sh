# Sourced by scripts that run cargo themselves (scripts/test-gpu): export what the build
# needs, as scripts/run.py computes it (`run.py env`): the Python's folder first on PATH,
# LIBTORCH_USE_PYTORCH=1, the version-check bypass and C++20 where this torch needs them,
# and OPBENCH_TORCH, OPBENCH_TCH and OPBENCH_WS (the cargo workspace for this torch's tch).
# Run rather than sourced (`bash scripts/env.sh --help`): this text, nothing computed.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case "${1:-}" in -h | --help) sed -n '1,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
fi
_opbench_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_opbench_env="$("$(command -v python3 || command -v python)" "$_opbench_root/scripts/run.py" env)" || return 1 2>/dev/null || exit 1
eval "$_opbench_env"
unset _opbench_env
