"""scripts/bench's plan: the lines `crate,case-key,seconds,skipped` that the bench binaries
write in list mode with OPBENCH_PLAN_FILE set (crates/harness/src/plan.rs), read, summed and
compared (what the quick profile leaves out). Standard library only; imports nothing of ours."""
import sys
from collections import Counter, defaultdict


def read_plan(path):
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.strip().split(",")
            if len(parts) != 4:
                continue
            krate, key, secs, skip = parts
            rows.append((krate, key, float(secs), skip == "1"))
    return rows


def hms(s):
    s = int(round(s))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def summary(path, executions=1, startup=0.0):
    rows = read_plan(path)
    per = defaultdict(lambda: [0, 0.0, 0])
    for krate, _, secs, skip in rows:
        p = per[krate]
        p[0] += 1
        p[1] += secs
        p[2] += skip
    total = (sum(p[1] for p in per.values()) + startup) * executions
    n = len(rows)
    parts = ", ".join(f"{k} {p[0]}" for k, p in sorted(per.items()))
    print(f"bench: plan: {n} cases ({parts})", file=sys.stderr)
    skipped = sum(p[2] for p in per.values())
    if skipped:
        print(
            f"bench: {skipped} cases have calls estimated over the cap (OPBENCH_CALL_CAP_MS) and "
            "will be `skipped` rows",
            file=sys.stderr,
        )
    times = f" × {executions} executions" if executions > 1 else ""
    print(
        f"bench: estimated wall time {hms(total)}{times} (budgets, and this machine's "
        "matmul and copy rates from a quick probe)",
        file=sys.stderr,
    )
    return n, int(round(total))


def describe(key):
    # op/variant/site/model/phase/b<batch>/q<q>[/kv<kv>]/dtype/device/mode
    f = key.split("/")
    return {
        "op": f[0],
        "model": f[3],
        "phase": f[4],
        "batch": f[5][1:],
        "dtype": f[-3],
        "mode": f[-1],
    }


def leaves_out(full, smaller):
    small = {r[1] for r in read_plan(smaller)}
    everything = read_plan(full)
    missing = [r for r in everything if r[1] not in small]
    secs = sum(r[2] for r in missing)
    print(
        f"bench: the quick profile leaves out {len(missing)} of {len(everything)} cases "
        f"(~{hms(secs)}):",
        file=sys.stderr,
    )
    kept = [describe(k) for k in small]
    gone = [describe(r[1]) for r in missing]
    for field in ["phase", "batch", "dtype", "model", "mode"]:
        have = {d[field] for d in kept}
        lost = Counter(d[field] for d in gone if d[field] not in have)
        if lost:
            vals = ", ".join(sorted(lost, key=lambda v: (len(v), v)))
            print(f"bench:   every {field} {vals}", file=sys.stderr)
    partly = Counter(d["op"] for d in gone)
    print(
        "bench:   cases per op: "
        + ", ".join(f"{op} {n}" for op, n in sorted(partly.items())),
        file=sys.stderr,
    )


if __name__ == "__main__":
    print(__doc__)  # a module of scripts/bench's: nothing to run
