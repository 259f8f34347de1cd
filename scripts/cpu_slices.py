#!/usr/bin/env python3
"""The CPUs of N comparisons run at once, one on each of GPUs 0..N-1 (scripts/calibrate-ab-gpu
with CAL_GPUS=N): a line each, as `taskset -c` reads it. Each GPU gets whole cores (a core's
hyperthreads stay together), from the CPUs the OS says are near it (its PCI device's
local_cpulist; all this process's CPUs where none says), shared out evenly among the GPUs
near the same CPUs. Linux (sysfs). Exit 2 with a line where the cores are too few.

    python3 cpu_slices.py N"""
import os, subprocess, sys

import helptext


def parse(text):
    out = set()
    for part in text.strip().split(","):
        if part:
            a, _, b = part.partition("-")
            out.update(range(int(a), int(b or a) + 1))
    return out


def fmt(cpus):
    return ",".join(map(str, sorted(cpus)))


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def siblings(c):
    """CPU c's core: itself and its hyperthreads."""
    sib = read(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list")
    return parse(sib) if sib else {c}


def cores(cpus, sib):
    """The CPUs grouped by core (`sib`: a CPU's core), in order of their first CPU."""
    seen, out = set(), []
    for c in sorted(cpus):
        if c not in seen:
            core = sib(c) & set(cpus)
            seen |= core
            out.append(sorted(core))
    return out


def share(homes, sib):
    """Each GPU's CPUs: the cores of its home (its nearby CPUs) split evenly among the GPUs
    of that home, in GPU order. ValueError where a home has fewer cores than GPUs."""
    slices = [None] * len(homes)
    for home in sorted(set(homes), key=min):
        gpus = [i for i, h in enumerate(homes) if h == home]
        mine = cores(home, sib)
        if len(mine) < len(gpus):
            raise ValueError(f"{len(mine)} cores near GPUs {gpus}, fewer than the GPUs")
        per = len(mine) // len(gpus)
        for k, g in enumerate(gpus):
            slices[g] = sorted(c for core in mine[k * per:(k + 1) * per] for c in core)
    return slices


def near(n, allowed):
    """Each GPU's nearby CPUs (its PCI device's local_cpulist), or all allowed ones."""
    try:
        ids = subprocess.run(["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader"],
                             capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        ids = []
    out = []
    for i in range(n):
        local = None
        if i < len(ids):
            dom, _, rest = ids[i].lower().partition(":")
            local = read(f"/sys/bus/pci/devices/{dom[-4:]}:{rest}/local_cpulist")
        out.append(frozenset(parse(local) & allowed) if local else frozenset(allowed))
    return out


def main():
    helptext.answer(__doc__)
    if len(sys.argv) != 2 or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1:
        print("cpu_slices.py: usage: cpu_slices.py N (N comparisons, one a GPU)", file=sys.stderr)
        sys.exit(2)
    n = int(sys.argv[1])
    allowed = set(os.sched_getaffinity(0))
    try:
        slices = share(near(n, allowed), siblings)
    except ValueError as e:
        print(f"cpu_slices.py: {e}", file=sys.stderr)
        sys.exit(2)
    print("\n".join(fmt(s) for s in slices))


if __name__ == "__main__":
    main()
