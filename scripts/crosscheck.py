#!/usr/bin/env python3
"""Cross-check opbench's device-side timings against PyTorch's own CUDA/HIP events.

Usage:
    python3 scripts/crosscheck.py RUN_DIR [--ops linear,sdpa] [--tolerance 0.05]
                                  [--allocations 3] [--out FILE]

For every `device`-mode row of RUN_DIR/results.csv (status ok) of the chosen ops, this
rebuilds the same op at the same shape and dtype in PyTorch, queues n back-to-back calls
behind `torch.cuda._sleep` (so host launch gaps are hidden, as opbench does; a chunk whose
enqueue outlasted its lead is redone with a longer one), times them with `torch.cuda.Event`,
and compares the median per call with opbench's median. Each case is built `--allocations`
times on fresh memory (earlier inputs are kept alive meanwhile): the figure is the median
over allocations, and the spread between them is reported, because where a tensor lands in
memory moves some kernels by several percent (docs/method.md, "Cross-check of device time"). Exit code 0 when
every case agrees within the tolerance, 1 otherwise, 2 on bad input.

Run it right after the opbench run, on the same machine: what the GPU does between kernels
also moves by a few percent from one process or boot to the next.

Needs a GPU and the PyTorch build the run was made with (CUDA or ROCm: `torch.cuda` is
both). It shares no code with opbench: the op is built from the row's dims alone.
"""

import argparse
import csv
import math
import statistics
import sys
import time
from pathlib import Path


def parse_dims(dims):
    return {k: int(v) for k, v in (kv.split("=") for kv in dims.split())}


def build(torch, row, dev="cuda"):
    """A zero-argument callable running the row's op, or None when it cannot be rebuilt."""
    F = torch.nn.functional
    dt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[row["dtype"]]
    d = parse_dims(row["dims"])
    if row["op"] == "linear":
        x = torch.randn(d["m"], d["k"], device=dev, dtype=dt)
        w = torch.randn(d["n"], d["k"], device=dev, dtype=dt) / math.sqrt(d["k"])
        if row["variant"] == "aten":
            return lambda: F.linear(x, w)
        return lambda: F.linear(x, w).chunk(2 if row["variant"] == "fused_gate_up" else 1, -1)
    if row["op"] == "sdpa":
        b, h, hkv = d["batch"], d["q_heads"], d["kv_heads"]
        ql, kv, hd, causal = d["q_len"], d["kv_len"], d["head_dim"], bool(d["causal"])
        q = torch.randn(b, ql, h, hd, device=dev, dtype=dt).transpose(1, 2)
        k = torch.randn(b, hkv, kv, hd, device=dev, dtype=dt)
        v = torch.randn(b, hkv, kv, hd, device=dev, dtype=dt)
        expanded = "expanded" in (row.get("note") or "")
        if expanded:
            k = k.repeat_interleave(h // hkv, dim=1).contiguous()
            v = v.repeat_interleave(h // hkv, dim=1).contiguous()
        aten = torch.ops.aten
        variant = row["variant"]
        if variant == "math":
            return lambda: aten._scaled_dot_product_attention_math(
                q, k, v, None, 0.0, causal, None, enable_gqa=True)
        if variant == "efficient":
            return lambda: aten._scaled_dot_product_efficient_attention(q, k, v, None, False, 0.0, causal)
        if variant == "flash":
            return lambda: aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal)
        if variant == "cudnn":
            return lambda: aten._scaled_dot_product_cudnn_attention(q, k, v, None, False, 0.0, causal)
        if variant == "auto":
            return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    return None


def device_time_ns(torch, fn, reps=15):
    """Median device ns per call over `reps` chunks of n calls queued behind a sleep."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    one_ns = max(start.elapsed_time(stop) * 1e6, 1.0)
    n = int(min(256, max(8, 2e6 / one_ns)))
    # cycles per ns of the sleep kernel
    start.record()
    torch.cuda._sleep(1_000_000)
    stop.record()
    stop.synchronize()
    cycles_per_ns = 1_000_000 / max(start.elapsed_time(stop) * 1e6, 1.0)
    host_ns = 20_000.0  # per call; measured on every chunk
    out = []
    for _ in range(reps):
        lead = max(50_000, 2.0 * host_ns * n)
        for _attempt in range(4):
            torch.cuda.synchronize()
            torch.cuda._sleep(int(lead * cycles_per_ns))
            t0 = time.perf_counter()
            start.record()
            for _ in range(n):
                fn()
            stop.record()
            host = (time.perf_counter() - t0) * 1e9
            stop.synchronize()
            host_ns = host / n
            if host < lead:  # the calls ran back to back behind the lead
                break
            lead = 1.5 * host
        out.append(start.elapsed_time(stop) * 1e6 / n)
    return statistics.median(out)


def timed_over_allocations(torch, row, allocations):
    """Per-allocation medians of the row's op, each built on fresh memory."""
    keep, medians = [], []
    for _ in range(allocations):
        fn = build(torch, row)
        if fn is None:
            return None
        medians.append(device_time_ns(torch, fn))
        keep.append(fn)  # its tensors stay allocated: the next build lands elsewhere
    return medians


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run")
    ap.add_argument("--ops", default="linear,sdpa")
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--allocations", type=int, default=3,
                    help="fresh input allocations per case (median over them)")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.allocations < 1:
        print("crosscheck: --allocations must be at least 1", file=sys.stderr)
        return 2
    path = Path(args.run) / "results.csv"
    if not path.is_file():
        print(f"crosscheck: {path}: missing", file=sys.stderr)
        return 2
    with path.open() as f:
        rows = list(csv.DictReader(f))
    for col in ("op", "variant", "dims", "dtype", "mode", "status", "median_ns"):
        if rows and col not in rows[0]:
            print(f"crosscheck: {path}: missing column `{col}`", file=sys.stderr)
            return 2
    ops = set(args.ops.split(","))
    rows = [r for r in rows if r["mode"] == "device" and r["status"] == "ok" and r["op"] in ops]
    if not rows:
        print(f"crosscheck: {path}: no ok device-mode rows for {sorted(ops)}", file=sys.stderr)
        return 2
    import torch
    if not torch.cuda.is_available():
        print("crosscheck: PyTorch sees no GPU", file=sys.stderr)
        return 2
    lines = [f"PyTorch {torch.__version__} on {torch.cuda.get_device_name()}; "
             f"{args.allocations} allocation(s) per case; spread = (max - min) / median over them",
             "",
             "| op | variant | site | batch | kv_len | dims | opbench ns | torch ns | spread | ratio |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    ratios = []
    for r in rows:
        medians = timed_over_allocations(torch, r, args.allocations)
        torch.cuda.empty_cache()
        if medians is None:
            continue
        torch_ns = statistics.median(medians)
        spread = (max(medians) - min(medians)) / torch_ns
        ours = float(r["median_ns"])
        ratio = ours / torch_ns
        ratios.append(ratio)
        lines.append(f"| {r['op']} | {r['variant']} | {r['site']} | {r['batch']} | {r['kv_len']} | "
                     f"{r['dims']} | {ours:.0f} | {torch_ns:.0f} | {spread:.1%} | {ratio:.3f} |")
    if not ratios:
        print(f"crosscheck: {path}: none of the rows could be rebuilt", file=sys.stderr)
        return 2
    within = sum(abs(x - 1) <= args.tolerance for x in ratios)
    lines.append("")
    lines.append(f"{within} of {len(ratios)} cases within ±{args.tolerance:.0%}; "
                 f"median ratio {statistics.median(ratios):.3f}, "
                 f"range {min(ratios):.3f}..{max(ratios):.3f}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0 if within == len(ratios) else 1


if __name__ == "__main__":
    sys.exit(main())
