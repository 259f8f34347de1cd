#!/usr/bin/env python3
"""Cross-check opbench's device-side timings against PyTorch's own CUDA/HIP events.

Usage:
    python3 scripts/crosscheck.py RUN_DIR [--ops linear,sdpa] [--tolerance 0.05] [--out FILE]

For every `device`-mode row of RUN_DIR/results.csv (status ok) of the chosen ops, this
rebuilds the same op at the same shape and dtype in PyTorch, queues n back-to-back calls
behind `torch.cuda._sleep` (so host launch gaps are hidden, as opbench does), times them
with `torch.cuda.Event`, and compares the median per call with opbench's median. Exit code
0 when every case agrees within the tolerance, 1 otherwise, 2 on bad input.

Needs a GPU and the PyTorch build the run was made with (CUDA or ROCm: `torch.cuda` is
both). It shares no code with opbench: the op is built from the row's dims alone.
"""

import argparse
import csv
import math
import statistics
import sys
from pathlib import Path


def parse_dims(dims):
    return {k: int(v) for k, v in (kv.split("=") for kv in dims.split())}


def build(torch, row):
    """A zero-argument callable running the row's op, or None when it cannot be rebuilt."""
    F = torch.nn.functional
    dt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[row["dtype"]]
    dev = "cuda"
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
    # host enqueue time per call, and device time per call, roughly
    import time
    t0 = time.perf_counter()
    for _ in range(20):
        fn()
    host_ns = (time.perf_counter() - t0) * 1e9 / 20
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
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        torch.cuda._sleep(int(max(50_000, 2.0 * host_ns * n) * cycles_per_ns))
        start.record()
        for _ in range(n):
            fn()
        stop.record()
        stop.synchronize()
        out.append(start.elapsed_time(stop) * 1e6 / n)
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run")
    ap.add_argument("--ops", default="linear,sdpa")
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--out")
    args = ap.parse_args()
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
    lines = ["| op | variant | site | batch | kv_len | dims | opbench ns | torch ns | ratio |",
             "|---|---|---|---|---|---|---|---|---|"]
    ratios = []
    for r in rows:
        fn = build(torch, r)
        if fn is None:
            continue
        torch_ns = device_time_ns(torch, fn)
        ours = float(r["median_ns"])
        ratio = ours / torch_ns
        ratios.append(ratio)
        lines.append(f"| {r['op']} | {r['variant']} | {r['site']} | {r['batch']} | {r['kv_len']} | "
                     f"{r['dims']} | {ours:.0f} | {torch_ns:.0f} | {ratio:.3f} |")
        del fn
        torch.cuda.empty_cache()
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
