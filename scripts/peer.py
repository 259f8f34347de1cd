#!/usr/bin/env python3
"""The user's own stack as a worker of opbench's protocol: the Hugging Face transformers
decode step (eager, SDPA attention, DynamicCache), generate(), one decoder layer, the
Python-side op calls and the framework's own per-step work, for `opbench peer RUN`.

    opbench peer RUN [--batches 1,8,64] [--ctx 1024] [--device cuda|cpu]

`opbench peer` starts this as `python3 scripts/peer.py --opbench-worker --model M
--batches B --ctx L ...` and speaks crates/duet's protocol with it, one JSON object a line:
`cases` lists the sites with how they are sampled (alone, or in interleaved rounds with a
group), `prepare` builds a case and reports its error against a float64 reference, and
`sample` times N calls with its own clock and its own process counters. Rust decides the
rest: the cases, warm-up, calls a sample, rounds and their order, the tolerance, the rows.

This file is the worker: its arguments, the catalog of families, the protocol. Its parts
are in scripts/peerlib/: `clock` (a sample's clock and the host's state over it), `model`
(the HF model with random weights, its float64 check, the shared tensors and caches),
`case` (a site as built), `step` (the HF step, generate(), a layer, a static cache) and
`ops` (the op calls from Python, the dispatch floors, a static cache's parts).

Needs torch; transformers is optional (without it: the Python op rows only). Weights are
random (the model file in shapes/ gives the real config); nothing is downloaded. The
sites (docs/schema.md):
- `decode/transformers`: `step`, `step_synced`, `step_as_generate`, `generate_from_l`,
  `generate_loop` (the step and generate() taken apart, group `step`; `layer_beside`,
  layer 0's calls flat, before each `step` sample), with a static cache's `step_static`,
  `generate_static_from_l` and, on a GPU, `generate_graph_from_l` in the same rounds;
  `layers1`, `layers8` (the step with its first layers only); `layer`, `layer_flat`,
  `layer_calls`, `stack`, `stack_flat` (one decoder layer five ways, group `layers`);
  `generate`, `generate_static`, `generate_graph` (generate() from a prompt of 16);
  `cache_update`, `mask`, `module_call`, and the static cache's parts
  `cache_update_static`, `mask_static`, `sdpa_static` (on a GPU also `sdpa_static_graph`,
  its attention compiled into a graph); an MoE model's `step` and
  `step_experts_eager` only;
- the op sites as transformers calls them, variant `py-<the tch variant>`: `linear/py-aten`,
  `rmsnorm/py-hf`, `rope/py-rotate_half`, `rope/py-hf`, `sdpa/py-auto`, `kvcache/py-cat`,
  `eltwise/py-aten`, and the Python dispatch floors `floor/py-add`, `floor/py-view`,
  `floor/py-mixed`, `floor/py-blocked`.
"""

import argparse
import functools
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # peerlib, however this file is run

if __name__ == "__main__":
    import helptext  # help is text: before torch is imported

    helptext.answer(__doc__)

from peerlib.base import DTYPES, fail, key_text, load_toml, say, shapes_dir, torch
from peerlib.case import Family, alone, refused
from peerlib.clock import Timer
from peerlib.model import FAMILIES, Ctx, load_model, new_tokens
from peerlib.ops import (ELTWISE_SITES, FLOORS, STATIC_PARTS, attention_cases, eltwise_cases, floor_cases,
                         linear_cases, linear_sites, module_call_cases, module_call_key, norm_sites, rmsnorm_cases,
                         rope_cases, static_graph_cases, static_part_cases)
from peerlib.step import (STEPS, framework_cases, generate_case, generate_variants, layer_cases, layer_specs,
                          layers_cases, moe_cases, step_cases, step_specs)

WORKER_FLAG = "--opbench-worker"


PROTOCOL = 1


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(WORKER_FLAG, dest="worker", action="store_true", help="serve the protocol on stdin/stdout")
    ap.add_argument("--model", required=True, help="a model of shapes/")
    ap.add_argument("--batches", required=True, help="decode batch sizes, comma-separated")
    ap.add_argument("--ctx", type=int, required=True, help="cache length L")
    ap.add_argument("--device", choices=["cuda", "cpu"], help="default: the GPU when torch sees one")
    ap.add_argument("--only", choices=["ops", "step"], help="only the op rows, or only the step rows")
    ap.add_argument("--dtype", choices=list(DTYPES), help="default: f16 on a GPU, f32 on the CPU")
    ap.add_argument("--no-user-generate", dest="user_generate", action="store_false",
                    help="leave out generate() from a prompt and the static cache")
    ap.add_argument("--stretches", type=int, required=True, help="stretches a sample's calls are timed in")
    ap.add_argument("--control-span-ns", type=int, required=True, help="the torch control's span")
    ap.add_argument("--control-chunk", type=int, required=True, help="the torch control's calls between clock reads")
    ap.add_argument("--beside-layers", type=int, required=True,
                    help="layers a layer_beside sample makes (shapes::LAYER_REPEATS, as the decode crate's)")
    ap.add_argument("--state-keys", required=True,
                    help="the host state a sample reports, comma-separated (rundir::WORKER_STATE_KEYS)")
    a = ap.parse_args(argv)
    if not a.worker:
        fail("scripts/peer.py is opbench's worker: run `opbench peer RUN` (it starts this)")
    try:
        a.batches = [int(b) for b in a.batches.split(",")]
    except ValueError:
        fail(f"--batches: expected comma-separated whole numbers, got {a.batches}")
    if not a.batches or min(a.batches) < 1:
        fail("--batches: every batch must be at least 1")
    return a


def setup(argv):
    """The model file, the device and the HF model with random weights; `c.nothing` says
    why there are no cases (a model this worker does not build)."""
    a = parse_args(argv)
    c = Ctx()
    c.only, c.user_generate, c.batches, c.ctx, c.nothing = a.only, a.user_generate, a.batches, a.ctx, None
    c.model_name = a.model
    path = shapes_dir() / f"{c.model_name}.toml"
    if not path.is_file():
        c.nothing = f"{c.model_name} is not a model of shapes/: scripts/peer.py builds those only"
        return c
    c.cfg = cfg = load_toml(path)
    c.family = cfg.get("family", "qwen3_moe" if "num_experts" in cfg else "qwen3")
    if c.family not in FAMILIES:
        c.nothing = f"{c.model_name} is a {c.family} model: scripts/peer.py builds {', '.join(FAMILIES)} models"
        return c
    c.qk_norm = c.family in ("qwen3", "qwen3_moe")
    c.moe = "num_experts" in cfg
    if c.moe:
        c.only, c.user_generate = "step", False
        say(f"{c.model_name} is a mixture-of-experts model: its HF step only (sites step and "
            "step_experts_eager), no op, layer or generate() rows")
    dev = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dev == "cuda" and not torch.cuda.is_available():
        fail("--device cuda: torch sees no GPU")
    c.device = torch.device(dev, 0) if dev == "cuda" else torch.device("cpu")
    c.label = "cpu" if dev == "cpu" else ("hip:0" if getattr(torch.version, "hip", None) else "cuda:0")
    c.dt_name = a.dtype or ("f16" if dev == "cuda" else "f32")
    c.dtype = DTYPES[c.dt_name]
    c.timer = Timer(c.device, c.dtype, a.control_span_ns, a.control_chunk, a.stretches)
    c.beside_layers = a.beside_layers
    c.state_keys = a.state_keys.split(",")
    c.H, c.Hkv, c.D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    c.hidden, c.inter, c.vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    c.tf, c.model = load_model(c)
    say("ready")
    c.version = f"transformers {c.tf.__version__}, " if c.tf else ""
    c.note_base = f"Python {sys.version.split()[0]}, torch {torch.__version__}"
    return c


def families(c):
    """Every family of cases, in the order they are timed (a run cut short keeps the most
    needed): the dispatch floors, then batch by batch the step and generate() taken apart,
    the step by layer count, the framework's parts, one decoder layer five ways, the op
    calls, and last generate() from a prompt (the graphed one compiles for a minute)."""
    out = [Family(alone([c.floor_key(v) for v in FLOORS]), functools.partial(floor_cases, c))]
    hf = c.model is not None
    for b in c.batches:
        if hf and c.moe:
            out.append(Family(alone([c.step_key(s_, b) for s_ in ("step", "step_experts_eager")], STEPS),
                              functools.partial(moe_cases, c, b)))
            continue
        steps = hf and c.only != "ops"
        if steps:
            out.append(Family(step_specs(c, b), functools.partial(step_cases, c, b)))
            for n in sorted({1, min(8, c.cfg["num_hidden_layers"])}):
                out.append(Family(alone([c.step_key(f"layers{n}", b)], STEPS),
                                  lambda b=b, n=n: {c.step_key(f"layers{n}", b): layers_cases(c, b, n)}))
        if c.only != "step":
            out += op_families(c, b)
        for site, how, extra in generate_variants(c) if steps and c.user_generate else []:
            k = c.key("decode", "transformers", site, b, 16 + new_tokens(c))
            out.append(Family(alone([k], 1), lambda k=k, b=b, how=how, extra=extra:
                              {k: generate_case(c, b, how, extra)}))
    return out


def op_families(c, b):
    """The framework's parts, one decoder layer five ways, and the op calls from Python at
    batch `b`."""
    hf = c.model is not None
    ops = []
    if hf:
        ops += [(framework_cases, [c.step_key(s_, b) for s_ in ("cache_update", "mask")])]
    out = [Family(layer_specs(c, b), functools.partial(layer_cases, c, b))] if hf else []
    ops += [(linear_cases, [c.key("linear", "py-aten", s_, b) for s_, _, _ in linear_sites(c)]),
            (rmsnorm_cases, [c.key("rmsnorm", "py-hf", s_, b) for s_, _ in norm_sites(c, b)]),
            (rope_cases, [c.key("rope", "py-rotate_half", s_, b) for s_ in ("q", "k")]
             + ([c.key("rope", "py-hf", "cache", b)] if hf else [])),
            (attention_cases, [c.key("sdpa", "py-auto", "attn", b, c.ctx + 1)]
             + [c.key("kvcache", "py-cat", s_, b, c.ctx + 1) for s_ in ("k", "v")]),
            (eltwise_cases, [c.key("eltwise", "py-aten", s_, b) for s_ in ELTWISE_SITES]),
            (module_call_cases, [module_call_key(c, b)])]
    if hf and c.user_generate:
        ops += [(static_part_cases, [c.step_key(s_, b) for s_ in STATIC_PARTS]),
                (static_graph_cases, [c.step_key("sdpa_static_graph", b)])]
    return out + [Family(alone(keys), functools.partial(fn, c, b)) for fn, keys in ops]


def serve(c, lines, reply):
    """Answer the protocol's requests, one JSON object a line, until `quit`."""
    import re
    fams = [] if c.nothing else families(c)
    index = {key_text(k): f for f in fams for k, _ in f.specs}
    live = {}
    if c.nothing:
        say(f"{c.nothing}; no cases")
    for line in lines:
        try:
            req = json.loads(line)
            what = req["req"]
        except (ValueError, KeyError, TypeError) as e:
            reply({"reply": "error", "message": f"malformed request: {e}"})
            continue
        try:
            if what == "hello":
                reply({"reply": "hello", "protocol": PROTOCOL, "ops": ["peer"], "env": fingerprint()})
            elif what == "cases":
                pat = re.compile(req["filter"]) if req.get("filter") else None
                reply({"reply": "cases", "unsupported": [], "cases": [
                    {"key": key_text(k), "fields": list(k), "sampling": s}
                    for f in fams for k, s in f.specs if pat is None or pat.search(key_text(k))]})
            elif what == "prepare":
                reply(prepare(index, live, req["key"]))
            elif what == "sample":
                reply(sampled(c, live, req["key"], int(req["iters"])))
            elif what == "release":
                # the family stays built until another is prepared: `opbench ab` visits its
                # cases one by one, and a step family costs a prefill and generate() calls
                live.pop(req["key"], None)
                reply({"reply": "released", "key": req["key"]})
            elif what == "quit":
                reply({"reply": "bye"})
                return
            else:
                reply({"reply": "error", "message": f"unknown request {what!r}"})
        except Exception as e:  # one request's failure is its reply, not the worker's end
            reply({"reply": "error", "message": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"})


def fingerprint():
    """This process's build and machine, as env.json names them (the run directories
    `opbench ab` writes for each side)."""
    import platform
    gpu = torch.cuda.is_available()
    hip = getattr(torch.version, "hip", None)
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((x.split(":", 1)[1].strip() for x in f if x.startswith("model name")), cpu)
    except OSError:
        pass
    return {"libtorch_version": torch.__version__.split("+")[0], "tch_version": "", "opbench_version": "",
            "backend": ("hip" if hip else "cuda") if gpu else "cpu",
            "devices": (["hip:0" if hip else "cuda:0"] if gpu else []) + ["cpu"],
            "device_name": torch.cuda.get_device_name(0) if gpu else None,
            "runtime_version": hip or torch.version.cuda, "visible_gpus": torch.cuda.device_count(),
            "cpu_model": cpu, "threads": torch.get_num_threads(), "os": platform.system().lower(),
            "torch_settings": {"python": sys.version.split()[0], "torch": torch.__version__}}


def prepare(index, live, key):
    fam = index.get(key)
    if fam is None:
        return {"reply": "error", "message": f"unknown case {key}"}
    if fam.built is None:
        # one idle family at most: those whose cases are all released go
        for other in set(index.values()) - {fam}:
            if other.built is not None and not any(key_text(k) in live for k, _ in other.specs):
                other.built = None
        try:
            fam.built = {key_text(k): case for k, case in fam.build().items()}
        except Exception as e:  # the family's cases end with the reason, the worker goes on
            oom = "out of memory" in str(e).lower()
            why = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            fam.built = {key_text(k): refused("oom" if oom else "error", why) for k, _ in fam.specs}
    case = fam.built.get(key)
    if case is None:
        return {"reply": "error", "message": f"{key}: its family did not build it"}
    live[key] = case
    ok = case.status == "ok"
    return {"reply": "prepared", "key": key, "status": case.status, "reason": None if ok else case.note,
            "rel_err": case.err, "dims": case.dims, "flops": 0, "bytes": 0, "note": case.note if ok else None,
            "check": case.check, "state_bytes": 0}


def on_cpu(cpu):
    """Run the calling thread on CPU `cpu` alone, as the bench binaries' workers do for a
    GPU case's sample (OPBENCH_TIMING_CPU); returns what puts it back (Linux, Windows)."""
    if sys.platform.startswith("linux"):
        home = os.sched_getaffinity(0)  # 0: the calling thread
        os.sched_setaffinity(0, {cpu})
        return lambda: os.sched_setaffinity(0, home)
    if sys.platform == "win32":
        import ctypes
        k32 = ctypes.windll.kernel32
        k32.GetCurrentThread.restype = ctypes.c_void_p
        k32.SetThreadAffinityMask.restype = ctypes.c_size_t
        me = ctypes.c_void_p(k32.GetCurrentThread())
        home = k32.SetThreadAffinityMask(me, ctypes.c_size_t(1 << cpu))
        if not home:
            raise OSError("SetThreadAffinityMask failed")
        return lambda: k32.SetThreadAffinityMask(me, ctypes.c_size_t(home))
    return lambda: None


def sampled(c, live, key, iters):
    case = live.get(key)
    if case is None:
        return {"reply": "error", "message": f"{key} is not prepared"}
    one = os.environ.get("OPBENCH_TIMING_CPU", "any")
    # a GPU case's samples on one CPU, the same on both sides (docs/method.md, "CPUs")
    back = on_cpu(int(one)) if c.device.type != "cpu" and one != "any" else (lambda: None)
    try:
        t = case.sample(c, iters)
    finally:
        back()
    calls = iters * case.calls
    st = t.state
    state = {k: st.get(k) for k in c.state_keys}
    spent = getattr(t, "spent", None)
    return {"reply": "sample", "key": key, "calls": calls, "total_ns": float(t) * calls,
            "spent_ns": None if spent is None else spent * calls,
            "control_ns": st.get("control_ns"), "host_ns": st.get("host_ns"), "state": state}


def pin(listed):
    """Run this process and its threads on the CPUs `listed` names (`2`, `0-1,6`), as the
    bench binaries do with OPBENCH_CPUS (`opbench ab` puts both sides on the same ones)."""
    cpus = set()
    for part in listed.split(","):
        a, _, b = part.partition("-")
        cpus.update(range(int(a), int(b or a) + 1))
    if sys.platform.startswith("linux"):
        for tid in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(tid), cpus)
            except OSError:  # a thread that ended since the listing
                pass
    elif sys.platform == "win32":
        import ctypes
        k32 = ctypes.windll.kernel32
        k32.GetCurrentProcess.restype = ctypes.c_void_p
        if not k32.SetProcessAffinityMask(ctypes.c_void_p(k32.GetCurrentProcess()),
                                          ctypes.c_size_t(sum(1 << c for c in cpus))):
            fail(f"OPBENCH_CPUS={listed}: SetProcessAffinityMask failed")
    else:
        fail(f"OPBENCH_CPUS={listed}: pinning to CPUs is done on Linux and Windows only")


def main(argv):
    if os.environ.get("OPBENCH_CPUS"):
        try:
            pin(os.environ["OPBENCH_CPUS"])
        except (ValueError, OSError) as e:
            fail(f"OPBENCH_CPUS={os.environ['OPBENCH_CPUS']}: {e}")
    if os.environ.get("OPBENCH_THREADS"):  # both sides of `opbench ab` alive at once share the cores
        torch.set_num_threads(int(os.environ["OPBENCH_THREADS"]))
    c = setup(argv)
    torch.manual_seed(0)

    def reply(obj):
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()
    serve(c, sys.stdin, reply)


if __name__ == "__main__":
    main(sys.argv[1:])
