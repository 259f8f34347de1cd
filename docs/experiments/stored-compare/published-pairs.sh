#!/usr/bin/env bash
# every ordered pair of the published H200 runs: exit codes
bin=${1:-target/release/opbench}
runs=(results/*nvidia-h200*)
for a in "${runs[@]}"; do for b in "${runs[@]}"; do
  [ "$a" = "$b" ] && continue
  out=$($bin compare "$a" "$b" 2>&1); rc=$?
  echo "$rc $(basename $a | sed 's/.*torch2.11.0-//') -> $(basename $b | sed 's/.*torch2.11.0-//') $(echo "$out" | grep -m1 -E '^\- |slower|wholly' | cut -c1-150)"
done; done
