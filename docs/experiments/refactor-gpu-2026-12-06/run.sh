#!/usr/bin/env bash
# Issue 70's refactors on a GPU (the harness's criterion front and select.rs, the peer's
# state keys from Rust): run from the repository root with devbin/ built here
# (`scripts/steps-gpu --build devbin`), on one GPU machine without cargo.
#
#   run.sh OUT
#
# 1. the op crates, the decode crate, the floor and ceilings at B = 1 and the peer at B = 1
#    (docs/experiments/knobs-2026-12-06/run.sh's `price` run), then predict on it;
# 2. an A/A of `opbench ab` in the same lease: the same binaries and the same Python on both
#    sides, the op crates at B = 1 and the peer (90 s).
# Leaves OUT/runs.tgz (the runs), OUT/predict.txt, OUT/aa.txt and the printouts.
set -uo pipefail
out=${1:?OUT}
root="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$root"
torch_lib=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')/lib
export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPBENCH_PROFILE=decode OPBENCH_DTYPE=f16 OPBENCH_DEVICE=gpu OPBENCH_MODEL=qwen3-0.6b
bash docs/experiments/knobs-2026-12-06/run.sh "$out" price > "$out/price.log" 2>&1
echo "price run: exit $?"
devbin/opbench predict devbin/k/runs/price --batch 1 --profile transformers > "$out/predict.txt" 2>&1
echo "predict: exit $?"
bins=()
for c in linear rmsnorm rope sdpa kvcache; do bins+=("devbin/bench-$c"); done
devbin/opbench ab --out devbin/k --run aa --base "${bins[@]}" --cand "${bins[@]}" \
  --base-python python3 --cand-python python3 --filter '/qwen3-0.6b/decode/b1/' \
  --budget 90 > "$out/aa.txt" 2>&1
echo "A/A: exit $?"
tar czf "$out/runs.tgz" -C devbin/k runs
