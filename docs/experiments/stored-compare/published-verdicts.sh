#!/usr/bin/env bash
# the published runs' verdicts as golden.rs's every_published_run_keeps_its_verdicts lists them
bin=$(realpath "${1:?the opbench executable}")
cd "$(dirname "$0")/../../.."
runs=$(ls -d results/*/ | sed 's:/$::' | sort)
first() { grep -m1 -E "^($1)" | tr -d '\n'; }
for r in $runs; do out=$($bin predict $r --batch 1 2>&1); rc=$?; echo "predict $r: $(echo "$out" | first 'answer:|opbench:') | exit $rc"; done
for a in $runs; do for b in $runs; do [ "$a" = "$b" ] && continue; out=$($bin compare $a $b 2>&1); rc=$?; echo "compare $a $b: $(echo "$out" | first '\*\*Verdict|opbench:') | exit $rc"; done; done
out=$($bin history results 2>&1); rc=$?; echo "history: $(echo "$out" | first '\*\*Verdict|opbench:') | exit $rc"
