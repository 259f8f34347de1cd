#!/usr/bin/env bash
# The knobs of knobs/cuda.toml on one GPU machine without cargo, priced (issue 71): run
# from the repository root with devbin/ built here (`scripts/steps-gpu --build devbin`).
#
#   run.sh OUT price               the run the knobs are priced on: every op crate and the
#                                  decode crate at B = 1 (decode profile, L = 1024, f16,
#                                  pipelined and device), the floor, and the peer at B = 1
#   run.sh OUT knobs RUN NAME...   scripts/bench --knobs NAME... --price that run
#   run.sh OUT predict             opbench predict on it with every knob's pair so far
#
# Everything lives in devbin/k/ (a warm machine keeps it between calls); each call leaves
# OUT/knobs.tgz (the runs) and its printout in OUT.
set -uo pipefail
out=${1:?OUT}; what=${2:?price, knobs or predict}; shift 2
root="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$root"
torch_lib=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')/lib
export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPBENCH_PROFILE=decode OPBENCH_DTYPE=f16 OPBENCH_DEVICE=gpu OPBENCH_MODEL=qwen3-0.6b
work="$root/devbin/k"
mkdir -p "$work"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
case "$what" in
  price)
    OPBENCH_MODES=pipelined,device STEPS_FILTER='/qwen3-0.6b/decode/b1/|^floor/|^ceiling/' \
      STEPS_PEER="--batches 1 --no-user-generate" scripts/steps-gpu devbin "$work" price 1 1
    ;;
  knobs)
    run=${1:?RUN}; shift
    OPBENCH_BIN=devbin OPBENCH_OUT="$work" OPBENCH_RUN="$run" OPBENCH_PYTHON=python3 \
      python3 scripts/run.py bench --knobs "$@" --budget "${KNOB_BUDGET:-60}" \
      --price "$work/runs/price" 2>&1 | tee "$out/$run.log"
    ;;
  predict)
    args=()
    for f in "$work"/runs/*-ab.csv; do args+=(--knob "$f"); done
    devbin/opbench predict "$work/runs/price" --batch 1 --profile transformers "${args[@]}" \
      | tee "$out/predict.txt"
    ;;
esac
tar czf "$out/knobs.tgz" -C "$work" runs
