#!/usr/bin/env python3
"""Is the host's slow state shared across vCPUs, and does the scheduler move the measuring
thread? (docs/findings.md, item 9; Linux only, no torch.)

    python3 scripts/host_probe.py [SECONDS]

1. Four processes pinned to different vCPUs time the same pure-Python loop back to back;
   per 10-ms window each one's median pass over its own median, and how the windows where
   one ran slow (> 1.15×) line up with the others' (and their correlation).
2. One unpinned process does the same, recording the vCPU of every pass and the thread's
   migrations (`se.nr_migrations` in /proc/thread-self/sched).
"""
import ctypes
import multiprocessing as mp
import os
import statistics
import sys
import time

import helptext

SLOW = 1.15
WINDOW = 0.01


def work():
    h, seen = 0x811C9DC5, {}
    for i in range(300):
        h = ((h ^ i) * 16777619) & 0xFFFFFFFF
        seen[h & 511] = i
    return h


def pinned(cpu, q, t_end):
    os.sched_setaffinity(0, {cpu})
    out = []
    while time.time() < t_end:
        t0 = time.perf_counter_ns()
        work()
        out.append((time.time(), time.perf_counter_ns() - t0))
    q.put((cpu, out))


def corr(xa, xb):
    ma, mb = statistics.mean(xa), statistics.mean(xb)
    num = sum((x - ma) * (y - mb) for x, y in zip(xa, xb))
    den = (sum((x - ma) ** 2 for x in xa) * sum((y - mb) ** 2 for y in xb)) ** 0.5
    return num / den if den else float("nan")


def across_vcpus(seconds):
    n = os.cpu_count()
    cpus = sorted({0, 1, n // 2, n - 1})
    q = mp.Queue()
    t_end = time.time() + seconds + 0.5
    ps = [mp.Process(target=pinned, args=(c, q, t_end)) for c in cpus]
    for p in ps:
        p.start()
    res = dict(q.get() for _ in ps)
    for p in ps:
        p.join()
    t0 = min(v[0][0] for v in res.values()) + 0.5
    series = {}
    for c, v in res.items():
        med = statistics.median(x for _, x in v)
        win = {}
        for t, x in v:
            if t >= t0:
                win.setdefault(int((t - t0) / WINDOW), []).append(x)
        series[c] = {k: statistics.median(xs) / med for k, xs in win.items()}
        print(f"vCPU {c}: {len(v)} passes, median {med / 1e3:.1f} µs")
    keys = sorted(set.intersection(*(set(s) for s in series.values())))
    for a in cpus:
        slow = [k for k in keys if series[a][k] > SLOW]
        line = f"vCPU {a}: {len(slow)} of {len(keys)} windows slow"
        for b in cpus:
            if b != a:
                both = sum(1 for k in slow if series[b][k] > SLOW)
                r = corr([series[a][k] for k in keys], [series[b][k] for k in keys])
                line += f" | also on {b}: {both}, corr {r:.2f}"
        print(line)
    runs, cur = [], 0
    for k in keys:
        if series[cpus[0]][k] > SLOW:
            cur += 1
        elif cur:
            runs.append(cur)
            cur = 0
    print(f"vCPU {cpus[0]}: {len(runs)} slow runs, the longest (in 10-ms windows): {sorted(runs)[-10:]}")


def migrations():
    with open("/proc/thread-self/sched") as f:
        for line in f:
            if line.startswith("se.nr_migrations"):
                return int(line.split(":")[1])
    return None


def unpinned(seconds):
    libc = ctypes.CDLL(None)
    m0, out = migrations(), []
    t_end = time.time() + seconds
    while time.time() < t_end:
        c0 = libc.sched_getcpu()
        t0 = time.perf_counter_ns()
        work()
        out.append((c0, libc.sched_getcpu(), time.perf_counter_ns() - t0))
    moved = sum(1 for a, b in zip(out, out[1:]) if a[1] != b[0]) + sum(1 for a in out if a[0] != a[1])
    med = statistics.median(x for *_, x in out)
    slow = sum(1 for *_, x in out if x > SLOW * med) / len(out)
    print(f"unpinned: {len(out)} passes, migrations {migrations() - m0}, vCPU changes {moved}, "
          f"passes over {SLOW}× the median {100 * slow:.0f}%")


if __name__ == "__main__":
    helptext.answer(__doc__)
    if not sys.platform.startswith("linux"):
        sys.exit("host_probe: Linux only (sched_setaffinity, /proc/thread-self/sched)")
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 20
    across_vcpus(secs)
    unpinned(secs / 2)
