"""The device process term: how far a GPU process's kernel times sit from another's.

Each worker is a fresh Python process of the torch under test that times small device calls
with GPU events behind a spin lead (torch.cuda._sleep, the kernel opbench's device mode leads
with), 256 calls a sample; the driver asks for samples line by line, as `opbench ab` does.
Designs, interleaved in rounds (each a fresh pair of workers, A and B):

  alone : A times every kind and exits, then B does: one live context at a time
  pair  : A and B alive at once, taking turns sample by sample (A B, B A, ...), as in ab
  eager : pair, both loading every kernel at start (CUDA_MODULE_LOADING=EAGER; on HIP
          HIP_ENABLE_DEFERRED_LOADING=0)
  conn1 : alone, one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1; on HIP
          GPU_MAX_HW_QUEUES=1)
Each design sets both runtimes' variables: each runtime reads its own and ignores the other's.

A round's term for a kind is ln(median B / median A). The table's figure is its sd over the
rounds (%), what pairing cannot cancel; beside it in brackets, a pair's sd within a round.
Kinds: one small kernel (mul on 1024 f16, on the current stream and three others), rms_norm
[1, 1024], a KV-cache row copy, a GEMV [1, 1024] x [1024, 3072], a large add (~70 us), and
the small mul's 256 calls captured once as a CUDA graph (hipGraph on ROCm) and replayed.
It runs on CUDA and ROCm builds alike (torch.cuda is HIP's there); it has run on an H100.

    python3 scripts/process_term.py [ROUNDS] [DESIGN,...]   # 3 rounds of alone,pair: ~1.5 min

Evidence and what it found: docs/experiments/process-term/README.md, docs/method.md.
"""
import math
import os
import statistics as st
import subprocess
import sys
import time

import helptext

CALLS = 256
LEAD_MS = 15.0  # Python's enqueue of 256 calls must end in half of it


def lead_cycles(cycles_per_ms):
    """The spin's length in the sleep kernel's own clock cycles for a lead of LEAD_MS: that
    clock is measured, never assumed (an H100's runs at ~1.98 GHz, gfx11's wall_clock64 at
    ~100 MHz, where a fixed count would spin 20 times longer)."""
    return max(1, int(LEAD_MS * cycles_per_ms))
KINDS = ["mul", "mul@s1", "mul@s2", "mul@s3", "rmsnorm", "kvrow", "gemv", "bigadd", "graph"]


def worker():
    import torch

    dev = "cuda"
    torch.manual_seed(0)
    h = torch.randn(1, 1024, device=dev, dtype=torch.float16)
    w = torch.randn(1024, device=dev, dtype=torch.float16)
    cache = torch.zeros(1, 8, 2048, 128, device=dev, dtype=torch.float16)
    k = torch.randn(1, 8, 128, device=dev, dtype=torch.float16)
    wq = torch.randn(3072, 1024, device=dev, dtype=torch.float16) * 0.02
    big = torch.randn(32 << 20, device=dev, dtype=torch.float16)
    big2 = torch.randn(32 << 20, device=dev, dtype=torch.float16)
    out = torch.empty_like(h)
    calls = {
        "mul": lambda: torch.mul(h, w, out=out),
        "rmsnorm": lambda: torch.nn.functional.rms_norm(h, (1024,), w, 1e-6),
        "kvrow": lambda: cache[:, :, 1000].copy_(k),
        "gemv": lambda: torch.nn.functional.linear(h, wq),
        "bigadd": lambda: torch.add(big, big2, out=big),
    }
    for f in calls.values():
        for _ in range(20):
            f()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            calls["mul"]()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        for _ in range(CALLS):
            calls["mul"]()
    g.replay()
    torch.cuda.synchronize()

    streams = {f"@s{i}": torch.cuda.Stream() for i in (1, 2, 3)}
    # the sleep kernel's clock, from a spin of 10^6 cycles timed by events
    a0, b0 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)
    a0.record()
    torch.cuda._sleep(1_000_000)
    b0.record()
    b0.synchronize()
    cycles = lead_cycles(1_000_000 / max(a0.elapsed_time(b0), 1e-3))

    def sample(kind):
        if "@" in kind:
            kind, at = kind.split("@")
            with torch.cuda.stream(streams["@" + at]):
                return sample(kind)
        torch.cuda.synchronize()
        torch.cuda._sleep(cycles)
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        t0 = time.perf_counter()
        if kind == "graph":
            g.replay()
        else:
            f = calls[kind]
            for _ in range(CALLS):
                f()
        host_ms = (time.perf_counter() - t0) * 1e3
        b.record()
        b.synchronize()
        # the lead must still run when the last call is enqueued, or the events time the host
        covered = host_ms < 0.5 * LEAD_MS
        return a.elapsed_time(b) * 1e3 / CALLS, covered

    print("ready", flush=True)
    for line in sys.stdin:
        kind = line.strip()
        if kind == "q":
            break
        us, covered = sample(kind)
        print(f"{us:.5f} {int(covered)}", flush=True)


class Worker:
    """A fresh worker process (`process_term.py worker`) under `env`."""

    def __init__(self, env):
        self.p = subprocess.Popen([sys.executable, __file__, "worker"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env={**os.environ, **env})
        line = self.p.stdout.readline().strip()
        assert line == "ready", f"worker said {line!r}"

    def ask(self, kind):
        self.p.stdin.write(kind + "\n")
        self.p.stdin.flush()
        for _ in range(3):
            us, covered = self.p.stdout.readline().split()
            if covered == "1":
                return float(us)
            print("uncovered sample, asked again", flush=True)
            self.p.stdin.write(kind + "\n")
            self.p.stdin.flush()
        raise SystemExit("3 samples' enqueue outlasted half their lead: lengthen LEAD_MS")

    def stop(self):
        self.p.stdin.write("q\n")
        self.p.stdin.flush()
        self.p.wait()


PAIRS = 8


def round_alone(start, env):
    """A's samples, A exits; then B's: the pairs' log ratios per kind, and A's samples."""
    sides = []
    for _ in range(2):
        w = start(env)
        sides.append({k: [w.ask(k) for _ in range(PAIRS)] for k in KINDS})
        w.stop()
    a, b = sides
    return {k: [math.log(y / x) for x, y in zip(a[k], b[k])] for k in KINDS}, a


def round_pair(start, env):
    """A and B alive at once, taking turns: the pairs' log ratios per kind, and A's samples."""
    a, b = start(env), start(env)
    logs, base = {}, {}
    for k in KINDS:
        xs, ys = [], []
        for i in range(PAIRS):
            if i % 2:
                ys.append(b.ask(k)); xs.append(a.ask(k))
            else:
                xs.append(a.ask(k)); ys.append(b.ask(k))
        logs[k] = [math.log(y / x) for x, y in zip(xs, ys)]
        base[k] = xs
    a.stop(); b.stop()
    return logs, base


DESIGNS = {
    "alone": (round_alone, {}),
    "pair": (round_pair, {}),
    "eager": (round_pair, {"CUDA_MODULE_LOADING": "EAGER", "HIP_ENABLE_DEFERRED_LOADING": "0"}),
    "conn1": (round_alone, {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "GPU_MAX_HW_QUEUES": "1"}),
}


def probe(rounds, designs, start=Worker, say=print):
    """Per design and kind: the round terms (%, ln B/A), a pair's sd within each round (%),
    and A's median time per call (us) over the rounds."""
    terms = {d: {k: [] for k in KINDS} for d in designs}
    within = {d: {k: [] for k in KINDS} for d in designs}
    us = {k: [] for k in KINDS}
    t0 = time.time()
    for r in range(rounds):
        for d in designs:
            f, env = DESIGNS[d]
            logs, base = f(start, env)
            for k in KINDS:
                terms[d][k].append(100 * st.median(logs[k]))
                within[d][k].append(100 * st.stdev(logs[k]))
                us[k].append(st.median(base[k]))
            say(f"round {r} {d:6s} " + " ".join(f"{k} {terms[d][k][-1]:+.2f}%" for k in KINDS)
                + f"  ({time.time() - t0:.0f} s)")
    return terms, within, us


def table(terms, within, us):
    """The probe's table: per design, each kind's process term (sd over rounds, %)."""
    designs = list(terms)
    rounds = len(next(iter(terms[designs[0]].values())))
    out = [f"process term: sd over {rounds} rounds of ln(B/A) per kind, % "
           "(in brackets: a pair's sd within a round, median)",
           f"{'design':8s}" + "".join(f"{k:>16s}" for k in KINDS),
           f"{'us/call':8s}" + "".join(f"{st.median(us[k]):16.3f}" for k in KINDS)]
    for d in designs:
        out.append(f"{d:8s}" + "".join(
            f"{st.pstdev(terms[d][k]) if rounds > 1 else float('nan'):8.2f} [{st.median(within[d][k]):5.2f}]"
            for k in KINDS))
    return "\n".join(out)


def main():
    helptext.answer(__doc__)
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    designs = sys.argv[2].split(",") if len(sys.argv) > 2 else ["alone", "pair"]
    unknown = [d for d in designs if d not in DESIGNS]
    if rounds < 2 or unknown:
        sys.stderr.write(f"process_term.py: expected ROUNDS >= 2 and designs of {', '.join(DESIGNS)}\n")
        sys.exit(2)
    terms, within, us = probe(rounds, designs, say=lambda s: print(s, flush=True))
    print("\n" + table(terms, within, us))


if __name__ == "__main__":
    if sys.argv[1:] == ["worker"]:
        worker()
    else:
        main()
