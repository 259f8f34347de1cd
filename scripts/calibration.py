#!/usr/bin/env python3
"""What `opbench compare` finds in calibration runs (scripts/calibrate): every count the
issue's "done when" names, from `opbench compare --format csv` and `--format families`.

    python3 scripts/calibration.py OPBENCH RUNS_DIR [BASE:CAND ...] [-- COMPARE ARGS]

RUNS_DIR holds the runs by name (a1, a2, p10, t10, d5, ...: see scripts/calibrate). Each
BASE:CAND pair is compared (default: every A/A pair, and every planted run against every
a-run). A run's planted truth is read from its name: a (none), p<pct> (host, the case's
calls), t<pct> (every torch call), d<pct> (device). Standard library only.

Per pair it prints: the verdict counts per mode; the global families (ratio, interval,
verdict); for a host plant the share of host-bound cases called slower, and the median
ratio over them against the global estimate; for a device plant the share of device
cases called slower (all, and kernels of ≥ 5 µs); for an A/A pair the false flags and the
share called `same` (device ≥ 5 µs, pipelined).
"""
import csv
import io
import itertools
import re
import statistics
import subprocess
import sys
from pathlib import Path

import helptext


def planted(name):
    """{kind: fraction} of a run name: a (none), p, t, d parts joined by _ (p10_d5)."""
    out = {}
    for part in name.split("_"):
        m = re.match(r"([aptd])(\d+(?:\.\d+)?)?", part)
        if not m:
            sys.exit(f"calibration.py: run name {name}: each part is a, p, t or d then a number")
        if m.group(1) != "a":
            out[m.group(1)] = float(m.group(2)) / 100
    return out


def compare(opbench, base, cand, fmt, extra):
    out = subprocess.run(
        [opbench, "compare", str(base), str(cand), "--format", fmt, *extra],
        capture_output=True,
        text=True,
    )
    if out.returncode not in (0, 1):
        sys.exit(f"calibration.py: compare {base} {cand}: {out.stderr.strip()}")
    return list(csv.DictReader(io.StringIO(out.stdout)))


def share(rows, verdict):
    return f"{sum(r['verdict'] == verdict for r in rows)}/{len(rows)}"


def report(opbench, runs, b, c, extra):
    plants = planted(c)
    cases = compare(opbench, runs / b, runs / c, "csv", extra)
    fams = compare(opbench, runs / b, runs / c, "families", extra)
    tested = [r for r in cases if r["verdict"] not in ("-", "")]
    what = ", ".join(f"{k} +{100 * v:g}%" for k, v in plants.items()) or "A/A"
    print(f"\n== {b} -> {c} ({what})")
    for mode in sorted({r["mode"] for r in tested}):
        rows = [r for r in tested if r["mode"] == mode]
        counts = {v: sum(r["verdict"] == v for r in rows) for v in ("slower", "faster", "same", "ambiguous")}
        print(f"  {mode}: {len(rows)} cases: {counts}")
    for f in fams:
        if f["global"] == "true":
            print(
                f"  global {f['family']}: {float(f['ratio']):.4f} "
                f"[{float(f['ratio_ci_low']):.4f}, {float(f['ratio_ci_high']):.4f}] mde ±{100 * float(f['mde']):.1f}% "
                f"-> {f['verdict']}"
            )
    flagged = [f for f in fams if f["global"] == "false" and f["verdict"] in ("slower", "faster")]
    print(f"  op families called slower/faster: {len(flagged)} of {sum(f['global'] == 'false' for f in fams)}")
    host_bound = [r for r in tested if r["mode"] != "device" and r["divided_by"] in ("host", "torch")]
    device = [r for r in tested if r["mode"] == "device"]
    big = [r for r in device if float(r["base_median_ns"] or 0) >= 5000]
    pipe = [r for r in tested if r["mode"] == "pipelined"]
    moved = lambda rows: sum(r["verdict"] in ("slower", "faster") for r in rows)
    if not any(k in plants for k in "pt"):
        print(f"  host-timed, no plant: false flags {moved(pipe)}/{len(pipe)}, same {share(pipe, 'same')}")
    else:
        med = statistics.median(float(r["ratio"]) for r in host_bound) if host_bound else float("nan")
        print(f"  host-bound cases called slower: {share(host_bound, 'slower')}; their median ratio {med:.4f}")
    if "d" not in plants:
        print(f"  device, no plant: false flags {moved(device)}/{len(device)}, same >= 5 us {share(big, 'same')}")
    else:
        print(f"  device cases called slower: {share(device, 'slower')}; >= 5 us {share(big, 'slower')}")


def main(argv):
    helptext.answer(__doc__, argv)
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    if len(argv) < 2:
        sys.exit(__doc__)
    opbench, runs = argv[0], Path(argv[1])
    pairs = [p.split(":") for p in argv[2:]]
    if not pairs:
        names = sorted(d.name for d in runs.iterdir() if (d / "results.csv").is_file())
        aa = [n for n in names if n.startswith("a")]
        pairs = [list(p) for p in itertools.combinations(aa, 2)]
        pairs += [[a, n] for n in names if planted(n) for a in aa]
    for b, c in pairs:
        report(opbench, runs, b, c, extra)


if __name__ == "__main__":
    main(sys.argv[1:])
