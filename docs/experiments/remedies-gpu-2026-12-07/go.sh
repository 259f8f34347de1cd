#!/usr/bin/env bash
# Issue 78 on one GPU lease (no cargo there). Run from the repo root of the device copy:
#   bash devbin/g/go78.sh "$OUT" PART
#   PART graphs: every op crate and the decode crate at B = 1, 8 (decode profile, f16,
#     pipelined and graph), the floor and ceilings, then the peer at B = 1, 8 (graphs
#     without compile: step_cudagraph, generate_cudagraph_from_l; torch.compile's beside),
#     then predict --profile transformers at B = 1 and 8: what would help, graphs rows
#     predicted beside measured.                                           ~330 s (capped)
#   PART knob: a B = 1 price run, then scripts/bench --knobs TORCH_BLAS_PREFER_CUBLASLT
#     --budget ${KNOB_BUDGET:-30} --price it (the README's knobs command): the pairs'
#     table with the linear family, the priced interval and measured/derived.  ~330 s (capped)
#   PART both: graphs, then the knob priced by the graphs' run (B = 1, 8; one call).
#   PART cpu: the same stages on the CPU with a tiny grid (to test this script).
# Each stage runs under `timeout`; whatever exists is tarred into $OUT/runs-PART.tgz, and
# the printout is in $OUT/PART.txt.
set -uo pipefail
out=${1:?OUT}; part=${2:?PART (graphs, knob, both or cpu)}
here="$(cd "$(dirname "$0")" && pwd)"
work=$(mktemp -d)
mkdir -p "$work/tree" "$work/bin" "$out"
xz -dc "$here/tree.tar.xz" | tar x -C "$work/tree"
for f in "$here"/bin/*.xz; do
  xz -dc "$f" >"$work/bin/$(basename "$f" .xz)"; chmod +x "$work/bin/$(basename "$f" .xz)"
done
ls -l --time-style=+%FT%T "$work/bin" | tail -n +2 | awk '{print "bin:", $6, $7}'
torch_lib=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')/lib
export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPBENCH_WS="$work/tree" OPBENCH_TORCH_PYTHON=$(command -v python3) OPBENCH_PYTHON=$(command -v python3)
export OPBENCH_PROFILE=${OPBENCH_PROFILE:-decode} OPBENCH_DTYPE=${OPBENCH_DTYPE:-f16}
export OPBENCH_DEVICE=${OPBENCH_DEVICE:-gpu} OPBENCH_MODEL=qwen3-0.6b
export OPBENCH_SAMPLES=${OPBENCH_SAMPLES:-10} OPBENCH_MEASURE_MS=${OPBENCH_MEASURE_MS:-100}
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
bin="$work/bin"; runs="$work/runs"; mkdir -p "$runs"
log="$out/$part.txt"
t0=$(date +%s)
say() { echo "go.sh [$(( $(date +%s) - t0 )) s] $*" | tee -a "$log"; }
# seconds left before DEADLINE (default 570 s of the call), less RESERVE; at least 5
left() { local l=$(( t0 + ${DEADLINE:-570} - ${1:-0} - $(date +%s) )); echo $(( l > 5 ? l : 5 )); }
cap() { local l; l=$(left "${2:-0}"); echo $(( $1 < l ? $1 : l )); }
# price RUN FILTER BATCHES SECS: the op crates' cases of FILTER, then the peer (capped)
price() {
  local run=$1 filt=$2 batches=$3 secs=$4 b
  for b in floor linear rmsnorm rope sdpa kvcache eltwise decode; do
    OPBENCH_OUT="$work" OPBENCH_RUN="$run" timeout "$(cap "$secs" 200)" "$bin/bench-$b" --bench "$filt" \
      >"$runs/$run-$b.log" 2>&1 || say "bench $b: exit $?"
  done
  say "op crates done"
  ( cd "$work/tree" && timeout "$(cap "$secs" 120)" "$bin/opbench" peer "$work/runs/$run" --batches "$batches" \
      --deadline-s "$(( secs * 2 / 3 ))" >"$runs/$run-peer.log" 2>&1 ) || say "peer: exit $?"
  say "peer done"; grep -E "step_cudagraph|generate_cudagraph|generate_graph_from_l" "$work/runs/$run/results.csv" \
    | cut -d, -f1-12 | tee -a "$log"
}
predict() {
  local run=$1 b=$2; shift 2
  timeout 60 "$bin/opbench" predict "$work/runs/$run" --batch "$b" --profile transformers "$@" 2>&1 \
    | sed -n '/^answer/,/^  [a-z]/p;/what would help/,$p' | tee -a "$log"
}
case $part in
  graphs|cpu)
    if [ "$part" = cpu ]; then
      export OPBENCH_DEVICE=cpu OPBENCH_DTYPE=f32 OPBENCH_PROFILE=quick OPBENCH_MODEL=qwen3-0.6b
      export OPBENCH_MODES=pipelined OPBENCH_SAMPLES=10 OPBENCH_MEASURE_MS=20
      price g "/qwen3-0.6b/decode/b1/|^floor/|^ceiling/" 1 60
      predict g 1
    else
      export OPBENCH_MODES=pipelined,graph
      price g "/qwen3-0.6b/decode/b(1|8)/|^floor/|^ceiling/" 1,8 150
      predict g 1; predict g 8
    fi ;;
  knob|both)
    if [ "$part" = both ]; then
      export OPBENCH_MODES=pipelined,graph
      price g "/qwen3-0.6b/decode/b(1|8)/|^floor/|^ceiling/" 1,8 120
      predict g 1; predict g 8; pr=g
      tar czf "$out/runs-graphs.tgz" -C "$work" runs
    else
      export OPBENCH_MODES=pipelined,device
      price p "/qwen3-0.6b/decode/b1/|^floor/|^ceiling/" 1 90; pr=p
    fi
    ( cd "$work/tree" && OPBENCH_BIN="$bin" OPBENCH_OUT="$work" OPBENCH_RUN=k timeout "$(cap 200 10)" \
        python3 scripts/run.py bench --knobs TORCH_BLAS_PREFER_CUBLASLT --budget "${KNOB_BUDGET:-30}" \
        --price "$work/runs/$pr" 2>&1 | tail -40 | tee -a "$log" ) ;;
  *) echo "go.sh: PART $part: expected graphs, knob, both or cpu" >&2; exit 2 ;;
esac
say "all done"
tar czf "$out/runs-$part.tgz" -C "$work" runs
ls -l "$out"
