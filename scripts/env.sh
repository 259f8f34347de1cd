# Sourced by scripts/bench and scripts/test: make libtorch visible to the build.
#
# Runs scripts/setup (which reuses your active torch install or our cached venv), puts that
# python first on PATH and sets LIBTORCH_USE_PYTORCH=1 for torch-sys. Binaries get an rpath
# to that libtorch at link time, so no LD_LIBRARY_PATH is needed to run them.
_opbench_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_opbench_py="$("$_opbench_root/scripts/setup")" || return 1 2>/dev/null || exit 1
_opbench_bin="$(dirname "$_opbench_py")"
export PATH="$_opbench_bin:$PATH"
export LIBTORCH_USE_PYTORCH=1
# torch-sys runs `python` when VIRTUAL_ENV is set and `python3` otherwise: both resolve to
# the same interpreter now that its folder leads PATH.
unset _opbench_py _opbench_bin
