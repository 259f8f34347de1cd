# Sourced by scripts/bench, scripts/test and scripts/test-torch: make libtorch visible to
# the build and pick the workspace that matches its version.
#
# Runs scripts/setup (which reuses your active torch install or our cached venv), puts that
# python first on PATH and sets LIBTORCH_USE_PYTORCH=1 for torch-sys. Then reads torch's
# version and asks scripts/torch-workspace which tch to build with: OPBENCH_WS is the cargo
# workspace to run cargo in (the repository for torch 2.11, a generated one under
# target/torch-ws/ for other versions), OPBENCH_TCH the tch release. Binaries get an rpath
# to that libtorch at link time, so no LD_LIBRARY_PATH is needed to run them.
_opbench_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_opbench_py="$("$_opbench_root/scripts/setup")" || return 1 2>/dev/null || exit 1
_opbench_bin="$(dirname "$_opbench_py")"
export PATH="$_opbench_bin:$PATH"
export LIBTORCH_USE_PYTORCH=1
# torch-sys runs `python` when VIRTUAL_ENV is set and `python3` otherwise: both resolve to
# the same interpreter now that its folder leads PATH.
OPBENCH_TORCH="$("$_opbench_py" -c 'import torch; print(torch.__version__)')" || return 1 2>/dev/null || exit 1
read -r OPBENCH_TCH _opbench_match OPBENCH_WS < <("$_opbench_root/scripts/torch-workspace" "$OPBENCH_TORCH") || true
if [ -z "${OPBENCH_WS:-}" ]; then
  echo "env.sh: no tch for torch $OPBENCH_TORCH (see above)" >&2
  return 2 2>/dev/null || exit 2
fi
# torch 2.15's headers refuse C++17 ("C++20 or later compatible compiler is required");
# torch-sys and atenx ask for C++17, and cc-rs lets CXXFLAGS have the last word
_opbench_torch_dir="$("$_opbench_py" -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
if grep -qs "C++20 or later" "$_opbench_torch_dir/include/ATen/ATen.h"; then
  case "${CXXFLAGS:-}" in
    *std=c++2*) ;;
    *) export CXXFLAGS="${CXXFLAGS:+$CXXFLAGS }-std=c++20" ;;
  esac
fi
if [ "$_opbench_match" != exact ]; then
  # torch-sys refuses a libtorch it was not generated for unless told
  export LIBTORCH_BYPASS_VERSION_CHECK=1
fi
echo "env.sh: torch $OPBENCH_TORCH, tch $OPBENCH_TCH ($_opbench_match), workspace $OPBENCH_WS" >&2
export OPBENCH_TORCH OPBENCH_TCH OPBENCH_WS
unset _opbench_py _opbench_bin _opbench_match _opbench_torch_dir
