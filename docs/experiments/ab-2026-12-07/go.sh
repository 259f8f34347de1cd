#!/usr/bin/env bash
# Issue 79 on one GPU lease: the calibration grid (f16, decode, B = 1, 8, 64) in
# pipelined, graph and device (the launch measure) modes, through opbench ab.
# Run from the repo root of the device copy:  bash devbin/79/go.sh "$OUT" PART
#   PART a: a1 (A/A at 180 s), l500 (the launch plant: +500 ns a stream-launched call),
#           d1 (device +1%), d3 (device +3%), at 90 s                  ~470 s
#   PART b: a2 (A/A at 180 s), l500b, d1b (again, 90 s), p5 (host +5%) and the knob
#           CUDA_DEVICE_MAX_CONNECTIONS=1 (60 s each)                 ~500 s
#   PART c: a3 (A/A at 180 s, in a lease of its own), the knob CUDA_SCALE_LAUNCH_QUEUES=4x
#           (60 s)                                                    ~250 s
#   PART cpu: a tiny A/A on the CPU (OPBENCH_DEVICE=cpu), to test this script
# Each comparison prints its wall time, budget, exit and verdict lines; the run
# directories are tarred into $OUT (one tarball a part). BUDGET_A/BUDGET_D/BUDGET_S
# override the budgets (A/A, device +1%, the rest).
set -uo pipefail
out=${1:?OUT}; part=${2:?PART (a, b, c or cpu)}
here="$(cd "$(dirname "$0")" && pwd)"
work=$(mktemp -d)
mkdir -p "$work/tree" "$work/bin" "$out"
xz -dc "$here/tree.tar.xz" | tar x -C "$work/tree"
for f in "$here"/bin/*.xz; do
  xz -dc "$f" > "$work/bin/$(basename "$f" .xz)"; chmod +x "$work/bin/$(basename "$f" .xz)"
done
ls -l --time-style=+%FT%T "$work/bin" | tail -n +2 | awk '{print "bin:", $6, $7}'
torch_lib=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')/lib
export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPBENCH_WS="$work/tree" OPBENCH_TORCH_PYTHON=$(command -v python3)
export OPBENCH_DTYPE=f16 OPBENCH_MODES=${OPBENCH_MODES:-pipelined,graph,device}
export OPBENCH_DEVICE=${OPBENCH_DEVICE:-gpu}
ba=${BUDGET_A:-180}; bd=${BUDGET_D:-90}; bs=${BUDGET_S:-60}
runs="$work/runs"; mkdir -p "$runs"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
# one NAME through scripts/calibrate-ab (plants by name), then its lines
plant() {
  local name=$1 budget=$2 s rc
  s=$(date +%s)
  (cd "$work/tree" && scripts/calibrate-ab "$work/bin" "$runs" "$budget" "$name" >/dev/null)
  rc=$(sed -n "s/^calibrate-ab: $name exit \([0-9]*\).*/\1/p" "$runs/exits.txt" | tail -1)
  lines "$name" "$budget" "$(( $(date +%s) - s ))" "$rc"
}
# a knob on the candidate, the same build on both sides
knob() {
  local name=$1 setting=$2 budget=$3 s rc bins=()
  for b in linear rmsnorm rope kvcache sdpa; do bins+=("$work/bin/bench-$b"); done
  s=$(date +%s)
  "$work/bin/opbench" ab --base "${bins[@]}" --cand "${bins[@]}" --cand-env "$setting" \
    --filter "${CAL_FILTER:-/decode/b(1|8|64)/q1(/kv1025)?/}" --budget "$budget" --out "$runs" \
    --run "$name" --base-name unset --cand-name "$setting" >"$runs/$name.md" 2>"$runs/$name.log"
  rc=$?
  lines "$name" "$budget" "$(( $(date +%s) - s ))" "$rc"
}
lines() {
  local name=$1 budget=$2 took=$3 rc=$4 md="$runs/$1.md"
  [[ -f $md ]] || md="$runs/runs/$1-compare.md"
  echo "== $name: took $took s, budget $budget s ($(( took * 100 / budget ))%), exit $rc"
  grep -m1 "opbench ab: estimate\|too short" "$runs/$name.log" 2>/dev/null
  grep -E "^\*\*Verdict|^- |^Cases:|^\| all |^\| (host-bound|device|stream-launched)" "$md" 2>/dev/null | head -20
  python3 - "$runs" "$name" <<'PY' 2>/dev/null
import csv, glob, sys
p = glob.glob(f"{sys.argv[1]}/**/{sys.argv[2]}-ab.csv", recursive=True)
rows = [r for r in csv.DictReader(open(p[0])) if r["level"] == "case"] if p else []
for kind in ("device", "stream-launched device", "host-bound"):
    k = [r for r in rows if r["kind"] == kind]
    if k:
        n = {v: sum(r["verdict"] == v for r in k) for v in ("same", "slower", "faster", "ambiguous")}
        print(f"   cases {kind}: {len(k)} {n}")
PY
}
case $part in
  a) plant a1 "$ba"; plant l500 "$bd"; plant d1 "$bd"; plant d3 "$bd" ;;
  b) plant a2 "$ba"; plant l500b "$bd"; plant d1b "$bd"; plant p5 "$bs"
     knob k_cdmc "CUDA_DEVICE_MAX_CONNECTIONS=1" "$bs" ;;
  c) plant a3 "$ba"; knob k_slq "CUDA_SCALE_LAUNCH_QUEUES=4x" "$bs" ;;
  cpu) export OPBENCH_DEVICE=cpu OPBENCH_DTYPE=f32 OPBENCH_MODES=pipelined
       CAL_FILTER='rmsnorm/.*/decode/b1/' CAL_BENCHES=rmsnorm
       export CAL_FILTER CAL_BENCHES
       plant a1 "${BUDGET_A:-30}"; knob k_cpu "OMP_NUM_THREADS=1" "${BUDGET_S:-40}" ;;
  *) echo "go.sh: PART $part: expected a, b, c or cpu" >&2; exit 2 ;;
esac
tar czf "$out/runs-$part.tgz" -C "$runs" .
ls -l "$out"
