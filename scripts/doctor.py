"""The torch side of `opbench doctor`: what this Python's torch is and what it can run.

    python scripts/doctor.py [--device cpu|gpu|all] [--gpu N]

Prints one JSON object on stdout (`opbench doctor` reads it and prints the screen):
- `torch`: Python, torch version and build (cpu, cuda, rocm with its HIP version);
- `gpu`: the device torch sees (name, arch as torch reports it, memory,
  HSA_OVERRIDE_GFX_VERSION), or why none;
- `sdpa`: each SDPA backend tried on a tiny decode problem (q of one token, GQA): ran and
  matched the math path, or not, with torch's reason;
- `blas`: the library asked for (TORCH_BLAS_PREFER_*) and the one in effect;
- `graph`: a torch.cuda.CUDAGraph captured, replayed and checked against eager;
- `tracer`: kineto and whether it records GPU activity; `triton`: importable or not;
- `knobs`: each knob of knobs/<backend>.toml, whether it applies to this arch and why;
- `smoke`: each op of a Qwen3 decode step run once under torch.profiler: where its output
  lives, the kernels it launched, and the host syncs and copies to the host it made.

`--checks`: torch, the GPU, BLAS, Triton, the knobs, SDPA and graph capture only: what
analysis::stack reads for what would help (scripts/bench writes it as a run's stack.json).

Nothing here times anything. Exit 0 whatever it finds (`opbench doctor` judges); 2 on
bad arguments.
"""
import argparse
import json
import os
import platform
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SYNC_CALLS = ("Synchronize", "hipMemcpyWithStream")
BLOCKING_COPIES = ("cudaMemcpy", "hipMemcpy", "cuMemcpyDtoH_v2")


def torch_facts(torch):
    build = "rocm" if getattr(torch.version, "hip", None) else "cuda" if torch.version.cuda else "cpu"
    return {
        "python": sys.executable,
        "python_version": platform.python_version(),
        "version": torch.__version__,
        "build": build,
        "hip": getattr(torch.version, "hip", None),
        "cuda": torch.version.cuda,
        "dir": os.path.dirname(torch.__file__),
        "os": platform.system(),
    }


def gpu_facts(torch, index):
    if not torch.cuda.is_available():
        why = "torch is a CPU build" if not (torch.version.cuda or getattr(torch.version, "hip", None)) \
            else "torch.cuda.is_available() is False (no driver or no supported GPU)"
        return {"available": False, "why": why, "count": 0}
    n = torch.cuda.device_count()
    if index >= n:
        return {"available": False, "why": f"GPU {index} asked for, {n} visible", "count": n}
    p = torch.cuda.get_device_properties(index)
    # gcnArchName is the arch on ROCm; CUDA builds answer it with the name
    hip = getattr(torch.version, "hip", None)
    arch = (getattr(p, "gcnArchName", None) if hip else None) or f"sm_{p.major}{p.minor}"
    return {
        "available": True,
        "count": n,
        "index": index,
        "name": p.name,
        "arch": arch,
        "memory_bytes": p.total_memory,
        "hsa_override": os.environ.get("HSA_OVERRIDE_GFX_VERSION"),
    }


def sdpa_backends(torch, dev, dtype):
    """Each backend on one decode token: q [1, 16, 1, 128] against a cache of 64, GQA 16/8."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    g = torch.Generator(device="cpu").manual_seed(0)
    q = torch.randn(1, 16, 1, 128, generator=g).to(dev, dtype)
    k = torch.randn(1, 8, 64, 128, generator=g).to(dev, dtype)
    v = torch.randn(1, 8, 64, 128, generator=g).to(dev, dtype)
    ke, ve = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    ref = F.scaled_dot_product_attention(q.double(), ke.double(), ve.double())
    out = []
    names = ["MATH", "EFFICIENT_ATTENTION", "FLASH_ATTENTION", "CUDNN_ATTENTION"]
    for name in names:
        b = getattr(SDPBackend, name, None)
        row = {"backend": name.lower().replace("_attention", ""), "ran": False, "reason": None}
        if b is None:
            row["reason"] = "not in this torch"
            out.append(row)
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with sdpa_kernel([b]):
                    y = F.scaled_dot_product_attention(q, ke, ve)
                err = (y.double() - ref).abs().max().item()
                row["ran"] = err < 2e-2
                row["reason"] = None if row["ran"] else f"max error {err:.3g} against float64"
            except RuntimeError as e:
                said = [str(w.message).split("\n")[0] for w in caught]
                row["reason"] = "; ".join(said) or str(e).split("\n")[0]
        out.append(row)
    return out


def blas(torch):
    asked = {k: os.environ[k] for k in ("TORCH_BLAS_PREFER_HIPBLASLT", "TORCH_BLAS_PREFER_CUBLASLT")
             if k in os.environ}
    try:
        in_effect = str(torch.backends.cuda.preferred_blas_library()).split(".")[-1].lower()
    except (AttributeError, RuntimeError) as e:
        in_effect = f"unknown ({e})"
    return {"asked": asked or None, "in_effect": in_effect}


def graph(torch, dev):
    try:
        x = torch.randn(64, 64, device=dev)
        w = torch.randn(64, 64, device=dev)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                y = x @ w + 1.0
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = x @ w + 1.0
        x.copy_(torch.randn(64, 64, device=dev))
        g.replay()
        torch.cuda.synchronize()
        err = (y - (x @ w + 1.0)).abs().max().item()
        if err > 1e-3:
            return {"ok": False, "why": f"replay differs from eager by {err:.3g}"}
        return {"ok": True, "why": None}
    except Exception as e:  # noqa: BLE001 - any failure of capture is the answer
        return {"ok": False, "why": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}


def tracer(torch):
    from torch.profiler import ProfilerActivity, supported_activities

    acts = supported_activities()
    return {
        "kineto": bool(torch.autograd.kineto_available()),
        "gpu_activity": ProfilerActivity.CUDA in acts,
    }


def transformers():
    """HF transformers, which the peer needs for generate()'s number (--profile transformers)."""
    try:
        import transformers as t

        return {"importable": True, "version": t.__version__, "why": None}
    except Exception as e:  # noqa: BLE001 - whatever stops the import is the reason
        return {"importable": False, "version": None, "why": f"{type(e).__name__}: {e}".splitlines()[0]}


def triton():
    try:
        import triton as t

        return {"importable": True, "version": t.__version__, "why": None}
    except Exception as e:  # noqa: BLE001 - whatever stops the import is the reason
        return {"importable": False, "version": None, "why": f"{type(e).__name__}: {e}".splitlines()[0]}


def knob_facts(backend, arch):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import knobs

        ks = knobs.load(ROOT / "knobs" / f"{backend}.toml")
    except (ImportError, SystemExit) as e:
        return {"file": f"knobs/{backend}.toml", "error": str(e), "knobs": []}
    # what `scripts/bench --knobs` would pair here: the one decision, knobs.can_act
    cpus = knobs.side_cpus(os.environ)
    rows = []
    for k in ks:
        acts, skipped = knobs.can_act(k, arch, cpus)
        why = "; ".join(w for _, w in skipped) if not acts else None
        rows.append({"name": k["name"], "applies": bool(acts), "why": why})
    return {"file": f"knobs/{backend}.toml", "error": None, "knobs": rows}


class Qwen3Step:
    """One decode step's ops at Qwen3-0.6B's shapes (hidden 1024, 16/8 heads of 128, FFN
    3072), batch 1, a cache of 128, as HF transformers' eager path calls them."""

    def __init__(self, torch, dev, dtype):
        self.t, self.dev, self.dtype = torch, dev, dtype
        g = torch.Generator(device="cpu").manual_seed(0)

        def w(*shape):
            return (torch.randn(*shape, generator=g) * 0.02).to(dev, dtype)

        h, nq, nk, d, f, vocab, self.L = 1024, 16, 8, 128, 3072, 151936, 128
        self.h, self.nq, self.nk, self.d = h, nq, nk, d
        self.emb, self.norm = w(vocab, h), torch.ones(h, device=dev, dtype=dtype)
        self.q, self.k, self.v, self.o = w(nq * d, h), w(nk * d, h), w(nk * d, h), w(h, nq * d)
        self.gate, self.up, self.down = w(f, h), w(f, h), w(h, f)
        self.kc = torch.zeros(1, nk, 256, d, device=dev, dtype=dtype)
        self.cos = torch.ones(1, 1, 1, d, device=dev, dtype=dtype)
        self.sin = torch.zeros(1, 1, 1, d, device=dev, dtype=dtype)
        self.tok = torch.tensor([[1]], device=dev)
        self.pos = torch.tensor([self.L], device=dev)
        self.x = w(1, 1, h)

    def ops(self):
        t, F = self.t, self.t.nn.functional

        def rms(x):
            v = x.float().pow(2).mean(-1, keepdim=True)
            return self.norm * (x.float() * t.rsqrt(v + 1e-6)).to(x.dtype)

        def rope(x):
            x1, x2 = x[..., : self.d // 2], x[..., self.d // 2:]
            return x * self.cos + t.cat((-x2, x1), dim=-1) * self.sin

        q = F.linear(self.x, self.q).view(1, 1, self.nq, self.d).transpose(1, 2)
        k = F.linear(self.x, self.k).view(1, 1, self.nk, self.d).transpose(1, 2)
        kv = self.kc[:, :, : self.L + 1].repeat_interleave(2, 1)
        return [
            ("embedding", lambda: F.embedding(self.tok, self.emb)),
            ("rmsnorm", lambda: rms(self.x)),
            ("q_proj", lambda: F.linear(self.x, self.q)),
            ("rope", lambda: rope(q)),
            ("kv_cache append", lambda: self.kc.index_copy_(2, self.pos, k)),
            ("sdpa", lambda: F.scaled_dot_product_attention(q, kv, kv)),
            ("o_proj", lambda: F.linear(q.transpose(1, 2).reshape(1, 1, -1), self.o)),
            ("residual add", lambda: self.x + self.x),
            ("gate_up + silu", lambda: F.silu(F.linear(self.x, self.gate)) * F.linear(self.x, self.up)),
            ("down_proj", lambda: F.linear(t.zeros(1, 1, 3072, device=self.dev, dtype=self.dtype), self.down)),
            ("lm_head", lambda: F.linear(self.x, self.emb)),
            ("sample (argmax .item)", lambda: F.linear(self.x, self.emb).argmax(-1).item()),
        ]


def smoke(torch, dev, dtype):
    """Each op once under the profiler: output device, kernels, syncs, copies to host."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    step = Qwen3Step(torch, dev, dtype)
    acts = [ProfilerActivity.CPU]
    gpu = dev.type != "cpu"
    if gpu and ProfilerActivity.CUDA in torch.profiler.supported_activities():
        acts.append(ProfilerActivity.CUDA)
    rows = []
    for name, f in step.ops():
        row = {"op": name, "ran_on": None, "kernels": [], "syncs": [], "to_host": 0, "error": None}
        try:
            out = f()  # once untraced: first-call work (library loads, tuning) stays out
            if gpu:
                torch.cuda.synchronize()
            with profile(activities=acts) as prof:
                out = f()
                if gpu:
                    torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - an op that fails is this row's finding
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            rows.append(row)
            continue
        row["ran_on"] = out.device.type if hasattr(out, "device") else "host"
        kernels, syncs = [], []
        for e in prof.events():
            n = e.name
            if not gpu and n.startswith("aten::") and e.cpu_parent is None:
                kernels.append(n)
            elif e.device_type == DeviceType.CUDA:
                if "Memcpy DtoH" in n or "DeviceToHost" in n:
                    row["to_host"] += 1
                elif not n.startswith("Memcpy") and not n.startswith("Memset"):
                    kernels.append(n)
            elif (any(s in n for s in SYNC_CALLS) or n in BLOCKING_COPIES) and "cudaDeviceSynchronize" not in n:
                syncs.append(n)
        # the profiler's own synchronize above is not the op's
        row["kernels"] = sorted(set(kernels))
        row["syncs"] = sorted(set(syncs))
        rows.append(row)
    return {"device": str(dev), "dtype": str(dtype).replace("torch.", ""),
            "traced": len(acts) > 1, "ops": rows}


def main(argv):
    ap = argparse.ArgumentParser(prog="doctor.py", description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cpu", "gpu", "all"), default="all")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="torch and the GPU only (scripts/bench's check)")
    ap.add_argument("--checks", action="store_true",
                    help="what the remedies need only (Triton, graph capture, SDPA backends, knobs): a run's stack.json")
    a = ap.parse_args(argv)
    t0 = time.monotonic()
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"error": f"import torch failed: {type(e).__name__}: {e}"}))
        return 0
    out = {"torch": torch_facts(torch), "error": None}
    g = gpu_facts(torch, a.gpu)
    out["gpu"] = g
    if a.quick:
        print(json.dumps(out))
        return 0
    out["blas"] = blas(torch)
    out["triton"] = triton()
    backend = out["torch"]["build"] if g["available"] else "cpu"
    out["knobs"] = knob_facts(backend, g.get("arch"))
    use_gpu = g["available"] and a.device != "cpu"
    dev = torch.device("cuda", a.gpu) if use_gpu else torch.device("cpu")
    dtype = torch.float16 if use_gpu else torch.float32
    out["sdpa"] = sdpa_backends(torch, dev, dtype)
    out["graph"] = graph(torch, dev) if use_gpu else {"ok": False, "why": "no GPU"}
    out["transformers"] = transformers()
    if a.checks:
        print(json.dumps(out))
        return 0
    out["tracer"] = tracer(torch)
    out["smoke"] = smoke(torch, dev, dtype)
    out["seconds"] = round(time.monotonic() - t0, 1)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
