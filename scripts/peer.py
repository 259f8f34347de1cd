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
import math
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKER_FLAG = "--opbench-worker"
PROTOCOL = 1


def fail(msg, code=2):
    print(f"peer: {msg}", file=sys.stderr)
    sys.exit(code)


STARTED = time.monotonic()


def say(msg):
    print(f"peer: [{time.monotonic() - STARTED:.0f} s] {msg}", file=sys.stderr, flush=True)


try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    fail("torch is not importable in this Python: run scripts/setup, or use the Python opbench uses")


# ------------------------------------------------------------------ the sample: its clock and counters


def _control_work():
    """The build-independent host control from Python: fixed interpreter work (integer
    hashing into a small dict) that never calls torch, ~0.1–0.3 ms."""
    h, seen = 0x811C9DC5, {}
    for i in range(1500):
        h = ((h ^ i) * 16777619) & 0xFFFFFFFF
        seen[h & 511] = i
    return h


def host_control_ns():
    """The control's time: the faster of two passes (as the Rust control's)."""
    best = math.inf
    for _ in range(2):
        t0 = time.perf_counter_ns()
        _control_work()
        best = min(best, time.perf_counter_ns() - t0)
    return best


class TorchControl:
    """The torch control from Python: the dispatch floor's call (a one-element add, py-add)
    back to back for the span Rust gives, in its chunks, synchronized at both ends, per
    call (as the harness's `control_ns`)."""

    def __init__(self, device, dtype, sync, span_ns, chunk):
        self.sync, self.span_ns, self.chunk = sync, span_ns, chunk
        self.a = torch.ones(1, device=device, dtype=dtype)
        self.b = torch.ones(1, device=device, dtype=dtype)

    def ns(self):
        a, b = self.a, self.b
        self.sync()
        t0 = time.perf_counter_ns()
        calls = 0
        while calls == 0 or time.perf_counter_ns() - t0 < self.span_ns:
            for _ in range(self.chunk):
                torch.add(a, b)
            calls += self.chunk
        self.sync()
        return (time.perf_counter_ns() - t0) / calls


def _nivcsw():
    try:
        import resource  # Unix only
        return resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
    except (ImportError, AttributeError):
        return None


def _this_cpu():
    """The CPU this thread runs on (Linux's sched_getcpu), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        cpu = ctypes.CDLL(None).sched_getcpu()
        return cpu if cpu >= 0 else None
    except (OSError, AttributeError):
        return None


def _steal(cpu):
    """The steal ticks of CPU `cpu` (its /proc/stat line), where Linux tells."""
    if cpu is None:
        return None
    try:
        with open("/proc/stat") as f:
            for line in f:
                fields = line.split()
                if fields and fields[0] == f"cpu{cpu}":
                    return int(fields[8]) if len(fields) > 8 else None
    except (OSError, ValueError):
        return None
    return None


class State:
    """The host's state over one sample: the Python control and the torch control before
    and after it, the process's CPU time, its involuntary context switches, the steal
    ticks of the CPU the thread ran on (None where the OS does not tell, or the thread
    moved), and the slowest and the median stretch of its calls per call."""

    def __init__(self, control):
        self.control = control
        self.control_ns = control.ns()
        self.host_ns = host_control_ns()
        self.on = _this_cpu()
        self.cpu, self.sw, self.st = time.process_time_ns(), _nivcsw(), _steal(self.on)

    def close(self, paces=()):
        on = _this_cpu()
        cpu, sw, st = time.process_time_ns(), _nivcsw(), _steal(self.on)
        steal = None if st is None or self.st is None or on != self.on else st - self.st
        return {"host_ns": self.host_ns, "cpu_ns": cpu - self.cpu,
                "nivcsw": None if sw is None else sw - self.sw, "steal": steal,
                "host_after_ns": host_control_ns(), **stretches(paces),
                "control_ns": self.control_ns, "control_after_ns": self.control.ns()}


class Timed(float):
    """A per-call time with the host's state over its sample (`State`)."""

    def __new__(cls, ns, state):
        t = super().__new__(cls, ns)
        t.state = state
        return t

    def scaled(self, k):
        state = dict(self.state)
        for col in STRETCH_COLUMNS:
            if state.get(col) is not None:
                state[col] *= k
        return Timed(self * k, state)

    def with_stretches(self, paces):
        """This time with its stretches read from `paces` (ns each, in this time's unit)."""
        return Timed(self, dict(self.state, **stretches(paces)))

    @staticmethod
    def total(parts):
        """Samples taken one after another, as one: their sum, the control before the first
        and after the last, their CPU time, switches and steal added up (no stretches: the
        parts are different calls, whose stretches do not add up to one pace)."""
        state = {k: (None if any(p.state.get(k) is None for p in parts) else sum(p.state[k] for p in parts))
                 for k in ("cpu_ns", "nivcsw", "steal")}
        state.update({k: parts[0].state.get(k) for k in ("host_ns", "control_ns")})
        state.update({k: parts[-1].state.get(k) for k in ("host_after_ns", "control_after_ns")})
        return Timed(sum(parts), state)


class Timer:
    """The worker's clock: a sample of n calls back to back, one synchronize at its end."""

    def __init__(self, device, dtype, span_ns, chunk, stretches_):
        self.device = device
        self.stretches = stretches_
        self.control = TorchControl(device, dtype, self.sync, span_ns, chunk)

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def sample(self, fn, n):
        """Per-call ns of n calls back to back with the host's state: the calls run in up to
        `stretches` stretches, the clock read between them, the last ending with the
        device, and the slowest and the median stretch's time per call are kept where there
        are at least 4 (as in Rust's harness)."""
        self.sync()
        state = State(self.control)
        per = max(1, -(-n // self.stretches))
        paces, done = [], 0
        t0 = at = time.perf_counter_ns()
        while done < n:
            k = min(per, n - done)
            for _ in range(k):
                fn()
            if done + k == n:
                self.sync()
            now = time.perf_counter_ns()
            paces.append((now - at) / k)
            at, done = now, done + k
        return Timed((at - t0) / n, state.close(paces))


STRETCH_COLUMNS = ("slowest_ns", "typical_ns")


def stretches(paces):
    """`slowest_ns` and `typical_ns` (the median) of a sample's stretches, per call, where
    there are at least 4 (as in Rust's harness); else none."""
    kept = len(paces) >= 4
    return dict(zip(STRETCH_COLUMNS, (max(paces), statistics.median(paces)) if kept else (None, None)))


def rel_err(out, ref):
    out = out.detach().to("cpu", torch.float64)
    ref = ref.detach().to("cpu", torch.float64)
    d = (out - ref).norm().item()
    n = ref.norm().item()
    return d / n if n > 0 else d


# ------------------------------------------------------------------ the model


DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def load_toml(path):
    if tomllib is None:
        fail("Python 3.11 or newer is needed to read shapes/ (tomllib)")
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        fail(f"{path}: {e}")


def shapes_dir():
    d = os.environ.get("OPBENCH_SHAPES")
    return Path(d) if d else ROOT / "shapes"


class Ctx:
    """What every case needs: the model file and the HF model (None without transformers)
    with transformers' helpers, the device, the dtype and the worker's clock."""

    def key(self, op, variant, site, b, kv=""):
        return (op, variant, site, self.model_name, "decode", b, 1, kv, self.dt_name, self.label, "pipelined")

    def floor_key(self, variant):
        return ("floor", variant, "add1", "none", "decode", 1, 1, "", self.dt_name, self.label, "pipelined")

    def step_key(self, site, b):
        return self.key("decode", "transformers", site, b, self.ctx + 1)

    @functools.cached_property
    def step_err(self):
        return step_check(self)


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
    c.H, c.Hkv, c.D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    c.hidden, c.inter, c.vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    c.tf, c.model = load_model(c)
    say("ready")
    c.version = f"transformers {c.tf.__version__}, " if c.tf else ""
    c.note_base = f"Python {sys.version.split()[0]}, torch {torch.__version__}"
    return c


# the families whose decoder layer layer_program writes out (model_type: transformers' module)
FAMILIES = ("qwen3", "qwen3_moe", "llama", "mistral", "qwen2")


def load_model(c):
    """transformers' helpers and the model with random weights; (None, None) without it.
    The model is built from the model file's fields by `AutoModelForCausalLM.from_config`
    with the family's `model_type`, as from_pretrained would build it from its config.json
    (rope scaling, which changes only the rotary frequencies, is left at the default)."""
    torch.manual_seed(0)
    torch.set_grad_enabled(False)
    try:
        import importlib
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache, StaticCache
        from transformers.masking_utils import create_causal_mask
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        from transformers.modeling_outputs import CausalLMOutputWithPast
        modeling = importlib.import_module(f"transformers.models.{c.family}.modeling_{c.family}")
    except ImportError as e:
        say(f"transformers is not importable ({e}): no transformers step, generate or framework rows; "
            "the Python op rows only (pip install transformers to measure the user's stack)")
        return None, None
    tf = transformers
    tf.DynamicCache, tf.StaticCache, tf.create_causal_mask = DynamicCache, StaticCache, create_causal_mask
    tf.sdpa_attention_forward = sdpa_attention_forward
    tf.rotate_half, tf.apply_rotary_pos_emb = modeling.rotate_half, modeling.apply_rotary_pos_emb
    tf.CausalLMOutputWithPast = CausalLMOutputWithPast
    tf.AutoConfig, tf.AutoModelForCausalLM = AutoConfig, AutoModelForCausalLM
    if c.moe:
        return tf, load_moe_model(c, transformers)
    say(f"building {c.model_name} ({c.family}) with random weights (transformers {transformers.__version__})")
    # as from_pretrained(torch_dtype=...) builds it: parameters in the dtype, the rotary
    # embedding's inv_freq buffer in float32 (a .to(dtype) would cast it and lose the
    # precision of cos/sin at long positions); made on the device (a CPU's f16 random
    # init of 0.6B parameters took 22 s on a 2-core VM)
    with torch.device(c.device):
        model = AutoModelForCausalLM.from_config(hf_config(c, tf), torch_dtype=c.dtype)
    model = model.eval()
    return tf, model


def hf_config(c, tf, **extra):
    """transformers' config of the model file for its family (`model_type`), `extra` over it."""
    cfg = c.cfg
    fields = dict(
        vocab_size=c.vocab, hidden_size=c.hidden, intermediate_size=c.inter,
        num_hidden_layers=cfg["num_hidden_layers"], num_attention_heads=c.H,
        num_key_value_heads=c.Hkv, head_dim=c.D, rope_theta=cfg["rope_theta"],
        rms_norm_eps=cfg["rms_norm_eps"], max_position_embeddings=cfg["max_position_embeddings"],
        tie_word_embeddings=cfg.get("tie_word_embeddings", False), attn_implementation="sdpa",
    )
    if c.family in ("llama", "mistral"):
        fields["attention_bias"] = cfg.get("attention_bias", False)
    fields.update(extra)
    return tf.AutoConfig.for_model(c.family, **fields)


def moe_config(c, tf, layers):
    """transformers' Qwen3MoeConfig of the model file, with `layers` decoder layers, every one
    an MoE block (Qwen3-MoE's decoder_sparse_step 1, no mlp_only_layers)."""
    cfg = c.cfg
    return hf_config(c, tf, num_hidden_layers=layers, moe_intermediate_size=cfg["moe_intermediate_size"],
                     num_experts=cfg["num_experts"], num_experts_per_tok=cfg["num_experts_per_tok"],
                     norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[])


def load_moe_model(c, tf):
    """Qwen3MoeForCausalLM with random weights, made on the device (30B-A3B is ~61 GB in
    bf16); transformers picks its default experts implementation (5.17: grouped_mm)."""
    say(f"building {c.model_name} (MoE) with random weights on {c.device} (transformers {tf.__version__})")
    with torch.device(c.device):
        model = tf.AutoModelForCausalLM.from_config(moe_config(c, tf, c.cfg["num_hidden_layers"]),
                                                    torch_dtype=c.dtype)
    return model.eval()


# ------------------------------------------------------------------ one decoder layer


def layer_program(c, lay, b):
    """One decoder layer's calls as the family's modeling file makes them (modeling_qwen3;
    modeling_llama, modeling_mistral and modeling_qwen2 the same without qk-norm), written
    out flat (no module wrappers, kwargs or cache object): (name, call) pairs, each reading
    its inputs from the environment `e` and leaving its output under its name. Written by
    hand because transformers has no callable for a layer's calls without its wrappers:
    `layer_flat` times it against `layer` (the layer as the model calls it), and its output
    is checked as theirs is."""
    at, mlp, tf = lay.self_attn, lay.mlp, c.tf
    hs = (b, 1, -1, c.D)
    return [
        ("h", lambda e: lay.input_layernorm(e["x"])),
        ("q1", lambda e: at.q_proj(e["h"])), ("q3", lambda e: e["q1"].view(hs)),
        *([("q3", lambda e: at.q_norm(e["q3"]))] if c.qk_norm else []),
        ("q", lambda e: e["q3"].transpose(1, 2)),
        ("k1", lambda e: at.k_proj(e["h"])), ("k3", lambda e: e["k1"].view(hs)),
        *([("k3", lambda e: at.k_norm(e["k3"]))] if c.qk_norm else []),
        ("k", lambda e: e["k3"].transpose(1, 2)),
        ("v1", lambda e: at.v_proj(e["h"])), ("v2", lambda e: e["v1"].view(hs)),
        ("v", lambda e: e["v2"].transpose(1, 2)),
        ("qk", lambda e: tf.apply_rotary_pos_emb(e["q"], e["k"], *e["pe"])),
        ("kf", lambda e: torch.cat([e["K"], e["qk"][1]], dim=-2)),
        ("vf", lambda e: torch.cat([e["V"], e["v"]], dim=-2)),
        ("o1", lambda e: tf.sdpa_attention_forward(at, e["qk"][0], e["kf"], e["vf"], None, dropout=0.0,
                                                   scaling=at.scaling)[0]),
        ("o2", lambda e: e["o1"].reshape(b, 1, -1).contiguous()),
        ("o", lambda e: at.o_proj(e["o2"])),
        ("h2", lambda e: e["x"] + e["o"]),
        ("n2", lambda e: lay.post_attention_layernorm(e["h2"])),
        ("g", lambda e: mlp.gate_proj(e["n2"])), ("s", lambda e: mlp.act_fn(e["g"])),
        ("u", lambda e: mlp.up_proj(e["n2"])), ("gu", lambda e: e["s"] * e["u"]),
        ("d", lambda e: mlp.down_proj(e["gu"])), ("y", lambda e: e["h2"] + e["d"]),
    ]


def run_program(prog, env):
    for name, call in prog:
        env[name] = call(env)
    return env["y"]


def layer_env(c, b, x, pos, kc, vc):
    """Layer 0's program, its inputs (hidden state `x`, the rotary embedding at `pos`, a
    cache of L keys and values) and the float64 reference of its output: the same program
    over a float64 CPU copy of the layer."""
    import copy
    lay = c.model.model.layers[0]
    env = {"x": x, "pe": c.model.model.rotary_emb(x, pos), "K": kc, "V": vc}
    prog = layer_program(c, lay, b)
    ref_lay = copy.deepcopy(lay).to("cpu", torch.float64)
    ref_env = {"x": x.cpu().double(), "pe": tuple(t.cpu().double() for t in env["pe"]), "K": kc.cpu().double(),
               "V": vc.cpu().double()}
    want = run_program(layer_program(c, ref_lay, b), ref_env)
    return prog, env, want


# ------------------------------------------------------------------ the framework's own work


def framework_cases(c, b):
    """`cache_update` (DynamicCache.update beyond its two cats: each sample the update's n
    calls less twice n cats, timed right after it, floored at 1 ns) and `mask`
    (create_causal_mask per step)."""
    model, t = c.model, cache_tensors(c, b)
    kc, vc, kn, vn = t["kc"], t["vc"], t["kn"], t["vn"]
    cache = c.tf.DynamicCache(config=model.config)
    cache.update(kc, vc, 0)
    lay = cache.layers[0]
    k0, v0 = lay.keys, lay.values

    def upd():
        cache.update(kn, vn, 0)
        lay.keys, lay.values = k0, v0

    def cat():
        return torch.cat([kc, kn], dim=-2)

    def difference(n):
        u, k = c.timer.sample(upd, n), c.timer.sample(cat, n)
        t = Timed(max(u - 2 * k, 1.0), {})
        t.spent = u + k  # per call: what sizes the next sample
        return t
    masked = c.tf.DynamicCache(config=model.config)
    for i in range(c.cfg["num_hidden_layers"]):
        masked.update(kc, vc, i)
    emb = torch.randn(b, 1, c.hidden, device=c.device, dtype=c.dtype)
    mpos = torch.full((1, 1), c.ctx, device=c.device, dtype=torch.long)

    def mask():
        return c.tf.create_causal_mask(config=model.config, inputs_embeds=emb, attention_mask=None,
                                       past_key_values=masked, position_ids=mpos)
    got = mask()
    returned = "None: SDPA needs no mask" if got is None else tuple(got.shape)
    dims = f"batch={b} L={c.ctx}"
    return {c.step_key("cache_update", b): Case(upd, None, None, "DynamicCache.update(k, v, layer) beyond its two "
                                                "torch.cat appends (per layer; each sample the update's calls less "
                                                "twice as many cats timed right after, floored at 1 ns); "
                                                f"{c.version}{c.note_base}", dims, timed=difference),
            c.step_key("mask", b): Case(mask, None, None, f"create_causal_mask per step (returned {returned}); "
                                        f"{c.version}{c.note_base}", dims)}


LAYER_SITES = ("layer", "layer_flat", "layer_calls", "stack", "stack_flat")


def layer_cases(c, b):
    """One decoder layer five ways, sampled in interleaved rounds (group `layers`), per
    layer: `layer` (one decoder layer called as the model calls it, from a DynamicCache of
    L, reset after each call), `layer_flat` (its calls written out flat), `layer_calls` (the
    same calls each timed alone, summed), `stack` (every decoder layer called in turn, each
    from its own cache layer of L) and `stack_flat` (their calls flat, in turn). predict
    prices transformers' own code per layer as stack − stack_flat."""
    model = c.model
    lay = model.model.layers[0]
    x, pos = step_inputs(c, b)
    t = cache_tensors(c, b)
    kc, vc = t["kc"], t["vc"]
    prog, env, want = layer_env(c, b, x, pos, kc, vc)
    pe = env["pe"]
    got = run_program(prog, env)  # env keeps every call's output: each call alone reads its inputs from it
    layers = list(model.model.layers)
    cache = c.tf.DynamicCache(config=model.config)
    for i in range(len(layers)):
        cache.update(kc, vc, i)
    kept = [(cl.keys, cl.values) for cl in cache.layers]
    cl0, (k00, v00) = cache.layers[0], kept[0]

    def layer_call():
        out = lay(x, attention_mask=None, position_ids=pos, past_key_values=cache, use_cache=True,
                  position_embeddings=pe)
        cl0.keys, cl0.values = k00, v00  # layer 0 updates its own cache layer only
        return out

    def stack():
        # each layer's cache reset right after its call, as in the step, where a layer's
        # update frees the keys and values it replaces before the next layer allocates its own
        h = x
        for lay_, cl, (k0, v0) in zip(layers, cache.layers, kept):
            h = lay_(h, attention_mask=None, position_ids=pos, past_key_values=cache, use_cache=True,
                     position_embeddings=pe)
            cl.keys, cl.values = k0, v0
        return h
    progs = [layer_program(c, lay_, b) for lay_ in layers]

    def stack_flat():
        e = {"x": x, "pe": pe, "K": kc, "V": vc}
        for prog_ in progs:
            e["x"] = run_program(prog_, e)
        return e["x"]
    # the stack runs layer 0's code on every layer: the same calls, whose check is the layer's
    err = max(rel_err(got, want), rel_err(layer_call(), want), rel_err(stack(), stack_flat()))
    leaves = [functools.partial(call, dict(env)) for _, call in prog]
    flat = functools.partial(run_program, prog, dict(env))
    nl = len(layers)
    tail = f"per layer; {c.version}{c.note_base}"
    sample = c.timer.sample
    cases = {
        "layer": Case(layer_call, note=f"one {type(lay).__name__} called as the model calls it (kwargs, "
                      "DynamicCache of L, reset after each call)"),
        "layer_flat": Case(flat, note=f"the same layer's {len(prog)} calls written out flat from Python (leaf "
                           "modules and functions, no wrappers, kwargs or cache object)"),
        "layer_calls": Case(None, note=f"the same {len(prog)} calls each timed alone, back to back, summed",
                            timed=lambda n: Timed.total([sample(f, n) for f in leaves])),
        "stack": Case(stack, calls=nl, note=f"the model's {nl} {type(lay).__name__}s called in turn as the model "
                      "calls them (each from its own cache layer of L, reset after its call; layer 0's check "
                      "covers their code)", timed=lambda n: sample(stack, n).scaled(1 / nl)),
        "stack_flat": Case(stack_flat, calls=nl, note=f"the same {nl} layers' calls written out flat, in turn",
                           timed=lambda n: sample(stack_flat, n).scaled(1 / nl)),
    }
    for k in cases.values():
        k.err, k.check, k.dims, k.note = err, "step", f"batch={b} L={c.ctx}", f"{k.note}; {tail}"
    return {c.step_key(s_, b): cases[s_] for s_ in LAYER_SITES}


def layer_specs(c, b):
    return [(c.step_key(s_, b), {"group": f"layers-b{b}"}) for s_ in LAYER_SITES]


# ------------------------------------------------------------------ the HF step and generate()


def step_check(c):
    """The HF step's error: the model against a float64 CPU copy of itself at context 16
    (an MoE model's through its first layers: moe_step_check)."""
    if c.moe:
        return moe_step_check(c)
    say("checking the HF step against a float64 CPU copy (first sequence, context 16)")
    import copy
    model = c.model
    ref = copy.deepcopy(model).to("cpu", torch.float64)
    ids = torch.randint(0, c.vocab, (1, 17))
    want = ref(ids).logits[0, -1]
    del ref
    cache = c.tf.DynamicCache(config=model.config)
    model(ids[:, :16].to(c.device), past_key_values=cache, use_cache=True)
    got = model(ids[:, 16:].to(c.device), past_key_values=cache, use_cache=True).logits[0, -1]
    err = rel_err(got, want)
    say(f"the HF step's logits are {err:.2e} off float64")
    return err


def new_tokens(c):
    """New tokens per generate() call: 32 on a GPU, 8 on the CPU (whose step is ~100× slower)."""
    return 32 if c.device.type == "cuda" else 8


GENERATE_SITES = ("step", "step_synced", "step_as_generate", "generate_from_l", "generate_loop")
STATIC_WHOLE = ("step_static", "generate_static_from_l", "generate_graph_from_l")
# at most this many steps a step sample; layers a layer_beside sample (the decode crate's LAYER_REPEATS)
STEPS, BESIDE_LAYERS = 16, 8


def step_specs(c, b):
    """The step group's keys: the step and generate() taken apart, in interleaved rounds so
    that all see the same host states (predict reads the step sites' differences round by
    round): the three step sites back to back, the two generate() sites back to back, the
    static cache's block, the blocks in a shuffled order; `layer_beside` before each step
    sample."""
    g = f"step-b{b}"
    beside = c.step_key("layer_beside", b)
    out = [(c.step_key(s_, b), {"group": g, "block": "step", "max_iters": STEPS}) for s_ in GENERATE_SITES[:3]]
    out[0][1]["before"] = "/".join(str(v) for v in beside)
    out += [(c.step_key(s_, b), {"group": g, "block": "generate", "max_iters": 1}) for s_ in GENERATE_SITES[3:]]
    if c.user_generate:
        out += [(c.step_key(s_, b), {"group": g, "block": "static", "max_iters": STEPS if s_ == "step_static" else 1})
                for s_ in STATIC_WHOLE]
    return out + [(beside, {"max_iters": BESIDE_LAYERS, "min_iters": BESIDE_LAYERS})]


def step_cases(c, b):
    """The group's cases: `step` (the HF step pipelined: n steps, argmax feeding the next,
    one synchronize, from a DynamicCache of L cropped back before each sample);
    `step_synced` (a synchronize after every step, as generate() has); `step_as_generate`
    (that called with generate()'s inputs); `generate_from_l` (model.generate() continuing
    from the cache, greedy, per new token, timed per token); `generate_loop` (the same call,
    the model's forward replaced by a stand-in returning fixed logits: generate()'s own work
    per token); `layer_beside` (layer 0's calls flat: the layer in the step's host state);
    and the static cache's whole (static_cases). Checked: generate()'s logits for its first
    new token against the checked step's from the same cache."""
    model, ctx, device, tf = c.model, c.ctx, c.device, c.tf
    cache = tf.DynamicCache(config=model.config)
    ids = torch.randint(1, c.vocab, (b, ctx + 1), device=device)
    model(ids[:, :ctx], past_key_values=cache, use_cache=True)
    crop, new, tok = cropper(cache, ctx), new_tokens(c), {"t": ids[:, ctx:]}

    def step():
        out = model(input_ids=tok["t"], past_key_values=cache, use_cache=True)
        tok["t"] = out.logits[:, -1:].argmax(-1)

    def step_synced():
        step()
        c.timer.sync()
    mask = torch.ones(b, ctx + 64, dtype=torch.long, device=device)
    positions = torch.arange(ctx + 64, device=device).expand(b, -1)

    def step_as_generate():
        n_ = cache.get_seq_length()
        out = model(input_ids=tok["t"], past_key_values=cache, use_cache=True, attention_mask=mask[:, :n_ + 1],
                    position_ids=positions[:, n_:n_ + 1], logits_to_keep=1, return_dict=True)
        tok["t"] = out.logits[:, -1:].argmax(-1)
        c.timer.sync()
    gen = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0, eos_token_id=eos_of(c),
               past_key_values=cache)
    logits = torch.zeros(b, 1, c.vocab, device=device, dtype=c.dtype)

    @functools.wraps(model.forward)
    def standin(*_, **kw):
        return tf.CausalLMOutputWithPast(logits=logits, past_key_values=kw.get("past_key_values"))

    def generate(**extra):
        return model.generate(ids, **gen, **extra)

    def stubbed(n):
        model.forward = standin
        try:
            crop()
            return c.timer.sample(generate, 1).scaled(1 / new)
        finally:
            del model.forward

    def clocked(n):
        """generate() per new token, its stretches per token: the clock read as each forward
        starts (one Python call and one clock read more a token)."""
        ticks, real = [], model.forward

        @functools.wraps(real)
        def forward(*a, **kw):
            ticks.append(time.perf_counter_ns())
            return real(*a, **kw)
        model.forward = forward
        try:
            crop()
            t = c.timer.sample(generate, 1).scaled(1 / new)
        finally:
            del model.forward
        return t.with_stretches([b_ - a_ for a_, b_ in zip(ticks, ticks[1:])])
    crop()
    want = model(input_ids=ids[:, ctx:], past_key_values=cache, use_cache=True).logits[:, -1]
    crop()
    got = generate(output_logits=True, return_dict_in_generate=True).logits[0]
    err = max(c.step_err, rel_err(got, want))
    crop()
    stubbed(1)
    dims, tail = f"batch={b} L={c.ctx}", f"{c.version}{c.note_base}"
    cases = {
        "step": Case(step, err, "step", "HF transformers step: eager, sdpa, DynamicCache; pipelined from L "
                     "(cropped back before each sample); checked against float64 at context 16", dims, before=crop),
        "step_synced": Case(step_synced, err, "step", "the HF step with a synchronize after each, as generate() "
                            "has every token", dims, before=crop),
        "step_as_generate": Case(step_as_generate, err, "step", "the synced HF step called with generate()'s inputs "
                                 "(2-D attention mask, position ids, logits_to_keep, return_dict)", dims, before=crop),
        "generate_from_l": Case(None, err, "step", f"model.generate() from the step's cache of L, greedy, {new} new "
                                f"tokens per call, per new token; its first token's logits checked against the step's; timed "
                                "per token (the clock read as each forward starts)", f"{dims} new={new}", new,
                                timed=clocked),
        "generate_loop": Case(None, None, None, "generate()'s own work per new token: the same call with the model's "
                              "forward replaced by a stand-in returning fixed logits (its loop, logits processing, eos "
                              "masking, stopping criteria and per-token synchronization)", f"{dims} new={new}", new,
                              timed=stubbed),
    }
    out = {c.step_key(s_, b): k for s_, k in cases.items()}
    if c.user_generate:
        out.update(static_cases(c, b, new))
    flat, beside_err = layer_beside(c, b)
    out[c.step_key("layer_beside", b)] = Case(flat, beside_err, "step", "layer 0's calls written out flat (as "
                                              "layer_flat), timed right before every step sample: the layer in the "
                                              "step's host state; per layer", dims)
    for k in out.values():
        k.note = f"{k.note}; sampled in the rounds of the step's sites; {tail}"
    return out


def layer_beside(c, b):
    """(layer 0's calls flat, its error against the float64 program) at batch `b` from a
    cache of L."""
    x, pos = step_inputs(c, b)
    t = cache_tensors(c, b)
    prog, env, want = layer_env(c, b, x, pos, t["kc"], t["vc"])
    return functools.partial(run_program, prog, dict(env)), rel_err(run_program(prog, dict(env)), want)


def static_cases(c, b, new):
    """The static cache's whole, in the step's rounds: `step_static` (the HF step from a
    StaticCache of L, eager, reset to L before each sample), `generate_static_from_l`
    (generate() continuing from it, disable_compile, per new token) and
    `generate_graph_from_l` (graph_case), checked against the dynamic step's logits."""
    dims, ctx, model = f"batch={b} L={c.ctx}", c.ctx, c.model
    keys = {s_: c.step_key(s_, b) for s_ in STATIC_WHOLE}
    try:
        cache, ids, reset = static_cache(c, b, ctx)
    except (AttributeError, TypeError) as e:
        why = f"the static cache's layers are not as transformers 5.17 has them ({type(e).__name__}: {str(e)[:120]})"
        return {k: refused("unsupported", why, dims) for k in keys.values()}
    tok = {"t": ids[:, ctx:]}

    def step():
        out = model(input_ids=tok["t"], past_key_values=cache, use_cache=True)
        tok["t"] = out.logits[:, -1:].argmax(-1)
    gen = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0, eos_token_id=eos_of(c),
               past_key_values=cache, disable_compile=True)
    reset()
    want = model(input_ids=ids[:, ctx:], past_key_values=cache, use_cache=True).logits[:, -1]
    reset()
    got = model.generate(ids, output_logits=True, return_dict_in_generate=True, **gen).logits[0]
    err = max(c.step_err, rel_err(got, want))
    base = f"max_cache_len L + {2 * new}; its logits checked against the dynamic step's"
    out = {keys["step_static"]: Case(step, err, "step", f"the HF step from a StaticCache of L (eager), reset to L "
                                     f"before each sample; {base}", dims, before=reset),
           keys["generate_static_from_l"]: Case(
               None, err, "step", f"model.generate() continuing from the StaticCache of L (disable_compile), greedy, "
               f"{new} new tokens per call, per new token; {base}", f"{dims} new={new}", new,
               timed=lambda n: (reset(), c.timer.sample(lambda: model.generate(ids, **gen), 1).scaled(1 / new))[1])}
    out[keys["generate_graph_from_l"]] = graph_case(c, b, gen, new, f"{dims} new={new}")
    return out


def graph_case(c, b, gen, new, dims):
    """generate() continuing from a StaticCache of L of its own, its step compiled into
    CUDA/HIP graphs (torch.compile reduce-overhead), compiled and captured here (three
    calls), its first logits checked against the eager step's from that cache; or a case
    that says why it cannot run."""
    how = graphed(c)
    if isinstance(how, str):
        return refused("unsupported", how, dims)
    try:
        cache, ids, reset = static_cache(c, b, c.ctx)
        reset()
        want = c.model(input_ids=ids[:, c.ctx:], past_key_values=cache, use_cache=True).logits[:, -1]
        kw = dict(gen, past_key_values=cache, disable_compile=False, **how)
        for _ in range(3):
            reset()
            got = c.model.generate(ids, output_logits=True, return_dict_in_generate=True, **kw).logits[0]
        err = max(c.step_err, rel_err(got, want))
    except Exception as e:  # a build without the feature: a row that says so, not a crash
        return refused("unsupported", f"torch.compile's graphs did not run: {type(e).__name__}: "
                       f"{str(e).splitlines()[0][:200]}", dims)
    return Case(None, err, "step", f"model.generate() continuing from a StaticCache of L of its own, its step "
                f"compiled (torch.compile reduce-overhead: CUDA/HIP graphs; compiled and captured before the "
                f"rounds), greedy, {new} new tokens per call, per new token", dims, new,
                timed=lambda n: (reset(), c.timer.sample(lambda: c.model.generate(ids, **kw), 1).scaled(1 / new))[1])


def layers_cases(c, b, layers):
    """`layers1`, `layers8`: the HF step with the model's first `layers` decoder layers,
    pipelined from a cache of L (cropped back before every sample): their difference over 7
    is one layer inside a step, the rest the step's own work."""
    model, ctx = c.model, c.ctx
    cache = c.tf.DynamicCache(config=model.config)
    full = model.config.num_hidden_layers
    model.config.num_hidden_layers = layers
    try:
        cache.layers = cache.layers[:layers]
        model(torch.randint(0, c.vocab, (b, ctx), device=c.device), past_key_values=cache, use_cache=True)
    finally:
        model.config.num_hidden_layers = full
    state = {"tok": torch.randint(0, c.vocab, (b, 1), device=c.device)}

    def step():
        out = model(input_ids=state["tok"], past_key_values=cache, use_cache=True)
        state["tok"] = out.logits[:, -1:].argmax(-1)

    def timed(n):
        crop()
        model.config.num_hidden_layers = layers
        try:
            return c.timer.sample(step, n)
        finally:
            model.config.num_hidden_layers = full
    crop = cropper(cache, ctx)
    return Case(step, c.step_err, "step", f"the HF step with its first {layers} decoder layer(s) only (the rest as "
                "the full step, whose check covers this code); pipelined from L, cropped back before each sample; "
                f"{c.note_base}", f"batch={b} L={c.ctx} layers={layers}", timed=timed)


def generate_case(c, b, how, extra):
    """generate() per new token as the user sees it (greedy, prompt 16, prefill included),
    or a case that says why this build cannot run it. Built with its first calls (and,
    compiled, its capture)."""
    new = new_tokens(c)
    dims = f"batch={b} prompt=16 new={new}"
    if isinstance(extra, str):
        return refused("unsupported", extra, dims)
    prompt = torch.randint(0, c.vocab, (b, 16), device=c.device)
    gen = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0, **extra)
    try:
        for _ in range(2 if extra else 1):
            c.model.generate(prompt, **gen)
    except Exception as e:  # a build without the feature: a row that says so, not a crash
        return refused("unsupported", f"{how}: {type(e).__name__}: {str(e).splitlines()[0][:200]}", dims)
    return Case(None, None, None, f"{how}: as the user sees it (greedy, prompt 16, {new} new tokens, prefill "
                f"included); per new token; {c.version}{c.note_base}", dims, new,
                timed=lambda n: c.timer.sample(lambda: c.model.generate(prompt, **gen), 1).scaled(1 / new))


def generate_variants(c):
    """(site, what, generate() kwargs or the reason it cannot run): the user's generate()
    as it is, with a static cache (no compile), and with its step compiled into CUDA/HIP
    graphs (mode="reduce-overhead")."""
    graph = graphed(c)
    if not isinstance(graph, str):
        graph = dict(graph, cache_implementation="static")
    return [("generate", "model.generate() (DynamicCache, eager)", {}),
            ("generate_static", "model.generate() with a static cache, eager",
             {"cache_implementation": "static", "disable_compile": True}),
            ("generate_graph", "model.generate() with a static cache and its step compiled (torch.compile "
             "reduce-overhead: CUDA/HIP graphs)", graph)]


def moe_cases(c, b):
    """`step` (transformers' default experts implementation) and `step_experts_eager` (its
    eager loop): the whole MoE step pipelined from a DynamicCache of L."""
    model, ctx = c.model, c.ctx
    default = model.config._experts_implementation
    cache = c.tf.DynamicCache(config=model.config)
    model(torch.randint(0, c.vocab, (b, ctx), device=c.device), past_key_values=cache, use_cache=True)
    tok, crop = {"t": torch.randint(0, c.vocab, (b, 1), device=c.device)}, cropper(cache, ctx)

    def step():
        out = model(input_ids=tok["t"], past_key_values=cache, use_cache=True)
        tok["t"] = out.logits[:, -1:].argmax(-1)

    def timed(impl):
        def sample(n):
            crop()
            model.set_experts_implementation(impl)
            try:
                return c.timer.sample(step, n)
            finally:
                model.set_experts_implementation(default)
        return sample
    return {c.step_key(site, b): Case(step, c.step_err, "step", f"HF transformers MoE step: eager, sdpa, "
                                      f"DynamicCache, experts implementation `{impl}`; pipelined from L (cropped back "
                                      f"before each sample); checked against float64 through its first "
                                      f"{MOE_CHECK_LAYERS} layers at context 16, routed as the device chose; "
                                      f"{c.version}{c.note_base}", f"batch={b} L={c.ctx}", timed=timed(impl))
            for site, impl in (("step", default), ("step_experts_eager", "eager"))}


MOE_CHECK_LAYERS = 2


def moe_step_check(c):
    """An MoE model's step against float64 through its first MOE_CHECK_LAYERS layers (the
    whole of 30B-A3B in float64 is 244 GB): the model file runs layers[:num_hidden_layers],
    so the device model runs that many; the float64 CPU model of as many layers holds the
    same weights and routes its tokens to the experts the device's router chose (a near-tie
    that rounding breaks the other way is not a mismatch; it computes and renormalizes its
    own probabilities of them). Context 16, first sequence."""
    import torch.nn.functional as F
    model, n = c.model, MOE_CHECK_LAYERS
    say(f"checking the HF MoE step through its first {n} layers against float64 (context 16)")
    ids = torch.randint(0, c.vocab, (1, 17))
    chosen = {i: [] for i in range(n)}
    hooks = [model.model.layers[i].mlp.gate.register_forward_hook(
        lambda _m, _a, out, i=i: chosen[i].append(out[2].detach().cpu())) for i in range(n)]
    full = model.config.num_hidden_layers
    model.config.num_hidden_layers = n
    try:
        cache = c.tf.DynamicCache(config=model.config)
        cache.layers = cache.layers[:n]
        model(ids[:, :16].to(c.device), past_key_values=cache, use_cache=True)
        got = model(ids[:, 16:].to(c.device), past_key_values=cache, use_cache=True).logits[0, -1]
    finally:
        model.config.num_hidden_layers = full
        for h in hooks:
            h.remove()
    ref = c.tf.AutoModelForCausalLM.from_config(moe_config(c, c.tf, n), torch_dtype=torch.float64).eval()
    keep = {k: v.detach().to("cpu", torch.float64) for k, v in model.state_dict().items()
            if not k.startswith("model.layers.") or int(k.split(".")[2]) < n}
    ref.load_state_dict(keep, strict=True)
    # torch's grouped GEMM has no float64 kernel: the reference runs the eager loop
    ref.set_experts_implementation("eager")
    for i in range(n):
        gate, route = ref.model.layers[i].mlp.gate, torch.cat(chosen[i])

        def replay(hidden_states, gate=gate, route=route):
            logits = F.linear(hidden_states.reshape(-1, gate.hidden_dim), gate.weight)
            top = torch.softmax(logits, dim=-1).gather(-1, route)
            top = top / top.sum(dim=-1, keepdim=True)
            return logits, top.to(logits.dtype), route
        gate.forward = replay
    want = ref(ids).logits[0, -1]
    del ref, keep
    return rel_err(got, want)


def cropper(cache, ctx):
    """Crop `cache` back to `ctx` tokens, contiguous: crop leaves each layer's keys and
    values as views of the longer tensors, whose next `cat` then reads strided memory; a
    cache of L tokens built step by step is contiguous (as generate()'s is)."""
    def crop():
        extra = cache.get_seq_length() - ctx
        if extra > 0:
            cache.crop(-extra)
            for layer_ in cache.layers:
                layer_.keys = layer_.keys.contiguous()
                layer_.values = layer_.values.contiguous()
    return crop


# config.json's eos_token_id of the Qwen3 chat models: generate() masks and checks it every
# token as the user's does (min_new_tokens keeps random weights from stopping early)
QWEN3_EOS = 151645


def eos_of(c):
    """The eos token generate() masks and checks: Qwen3's, or the last id of a smaller
    vocabulary (a test's, or another family's)."""
    return QWEN3_EOS if QWEN3_EOS < c.vocab else c.vocab - 1


def graphed(c):
    """generate()'s kwargs that compile its step with torch.compile(mode="reduce-overhead")
    (CUDA/HIP graphs), or why this build cannot."""
    if c.device.type != "cuda":
        return "CUDA/HIP graphs need a GPU"
    try:
        from transformers import CompileConfig
        import triton  # noqa: F401  (torch.compile's GPU backend)
    except ImportError as e:
        return f"torch.compile's reduce-overhead mode is not available here: {e}"
    return {"compile_config": CompileConfig(mode="reduce-overhead", fullgraph=True)}


# ------------------------------------------------------------------ cases and families


class Case:
    """One site as built: `run` (one call), or `timed(n)` (a sample of n units, per call)
    where a sample is more than n calls of one function; `before` runs ahead of each sample,
    outside it; `calls` calls a unit makes. Its error against float64 (`check`: `op`, `step`
    or None) is judged by Rust; `status` other than ok says why it cannot run."""

    def __init__(self, run=None, err=None, check="op", note="", dims="", calls=1, before=None, timed=None,
                 status="ok"):
        self.run, self.err, self.check, self.note, self.dims = run, err, check, note, dims
        self.calls, self.before, self.timed, self.status = calls, before, timed, status

    def sample(self, c, n):
        if self.timed is not None:
            return self.timed(n)
        if self.before is not None:
            self.before()
        return c.timer.sample(self.run, n)


def refused(status, reason, dims=""):
    """A case that does not run, and why."""
    return Case(status=status, note=reason, dims=dims, check=None)


class Family:
    """Cases built together (they share tensors, a cache or a check): their keys with how
    each is sampled, listed without building, and `build()` → {key: Case}, run on the
    first `prepare` of any of them."""

    def __init__(self, specs, build):
        self.specs = [(tuple(str(v) for v in k), s) for k, s in specs]
        self.build = build
        self.built = None


def alone(keys, max_iters=None):
    return [(k, {"max_iters": max_iters} if max_iters else {}) for k in keys]


def op_case(run, ref, note, c):
    """An op call checked against its float64 reference `ref()` (its output's), timed alone."""
    return Case(run, rel_err(run(), ref()), "op", f"{note}; {c.note_base}")


# ------------------------------------------------------------------ the op sites from Python


def linear_sites(c):
    H, Hkv, D, hidden = c.H, c.Hkv, c.D, c.hidden
    return [("q_proj", H * D, hidden), ("k_proj", Hkv * D, hidden), ("v_proj", Hkv * D, hidden),
            ("o_proj", hidden, H * D), ("gate_proj", c.inter, hidden), ("up_proj", c.inter, hidden),
            ("down_proj", hidden, c.inter), ("lm_head", c.vocab, hidden)]


def linear_cases(c, b):
    """`linear/py-aten`: the model's nn.Linear at each projection site."""
    layer = c.model.model.layers[0] if c.model is not None else None
    out = {}
    for site, n, k_ in linear_sites(c):
        m = None
        if layer is not None:
            m = getattr(layer.self_attn, site, None) or getattr(layer.mlp, site, None)
        if site == "lm_head" and c.model is not None:
            m = c.model.lm_head
        if m is None:
            m = torch.nn.Linear(k_, n, bias=False).to(device=c.device, dtype=c.dtype)
        xin = torch.randn(b, 1, k_, device=c.device, dtype=c.dtype)
        rows, cols = min(b, 64), min(n, 4096)
        ref = xin[:rows, 0].double().cpu() @ m.weight[:cols].double().cpu().T
        err = rel_err(m(xin)[:rows, 0, :cols], ref)
        out[c.key("linear", "py-aten", site, b)] = Case(
            functools.partial(m, xin), err, "op",
            f"{type(m).__name__} called from Python, as transformers calls it; {c.note_base}")
    return out


def norm_sites(c, b):
    heads = [("q_norm", (b, 1, c.H, c.D)), ("k_norm", (b, 1, c.Hkv, c.D))] if c.qk_norm else []
    return [("input_norm", (b, 1, c.hidden)), ("post_norm", (b, 1, c.hidden)), ("final_norm", (b, 1, c.hidden)),
            *heads]


def rmsnorm_cases(c, b):
    """`rmsnorm/py-hf`: the model's RMSNorm at each norm site."""
    eps = c.cfg["rms_norm_eps"]
    out = {}
    for site, shape in norm_sites(c, b):
        m = norm_module(c, shape[-1])
        xin = torch.randn(*shape, device=c.device, dtype=c.dtype)
        h = xin.double().cpu()
        ref = m.weight.double().cpu() * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps))
        out[c.key("rmsnorm", "py-hf", site, b)] = Case(functools.partial(m, xin), rel_err(m(xin), ref), "op",
                                                       f"{type(m).__name__} called from Python; {c.note_base}")
    return out


def rope_cases(c, b):
    """`rope/py-rotate_half` (q·cos + rotate_half(q)·sin) and `rope/py-hf` (the rotary
    embedding module)."""
    D, x, pos = c.D, *step_inputs(c, b)

    def rot(t):
        if c.tf is not None:
            return c.tf.rotate_half(t)
        h = t.shape[-1] // 2
        return torch.cat((-t[..., h:], t[..., :h]), dim=-1)
    if c.model is not None:
        cos, sin = c.model.model.rotary_emb(x, pos)
    else:
        inv = 1.0 / (c.cfg["rope_theta"] ** (torch.arange(0, D, 2, device=c.device, dtype=torch.float32) / D))
        fr = pos[..., None].float() * inv
        emb = torch.cat((fr, fr), dim=-1)
        cos, sin = emb.cos().to(c.dtype), emb.sin().to(c.dtype)
    cos1, sin1 = cos.unsqueeze(1), sin.unsqueeze(1)
    out = {}
    for site, heads in [("q", c.H), ("k", c.Hkv)]:
        t = torch.randn(b, heads, 1, D, device=c.device, dtype=c.dtype)
        td, co, si = t.double().cpu(), cos1.double().cpu(), sin1.double().cpu()
        out[c.key("rope", "py-rotate_half", site, b)] = op_case(
            lambda t=t: t * cos1 + rot(t) * sin1,
            lambda td=td: td * co + torch.cat((-td[..., D // 2:], td[..., :D // 2]), -1) * si,
            "q·cos + rotate_half(q)·sin from Python (apply_rotary_pos_emb's per-tensor work)", c)
    if c.model is not None:
        re = c.model.model.rotary_emb
        inv = 1.0 / (c.cfg["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
        fr = pos.cpu()[..., None].double() * inv
        emb = torch.cat((fr, fr), dim=-1)
        co, si = re(x, pos)
        case = Case(lambda: re(x, pos), rel_err(torch.cat((co, si), -1), torch.cat((emb.cos(), emb.sin()), -1)),
                    "op", f"the rotary embedding module (cos, sin for the step's positions); {c.note_base}")
        out[c.key("rope", "py-hf", "cache", b)] = case
    return out


def step_inputs(c, b):
    """The step's hidden state and positions at batch `b`."""
    x = torch.randn(b, 1, c.hidden, device=c.device, dtype=c.dtype)
    return x, torch.full((b, 1), c.ctx, device=c.device, dtype=torch.long)


def cache_tensors(c, b):
    """The step's q, a cache of L keys and values, the new ones, and both appended."""
    dev, dt = c.device, c.dtype
    t = {"q": torch.randn(b, c.H, 1, c.D, device=dev, dtype=dt)}
    for name, length in [("kc", c.ctx), ("vc", c.ctx), ("kn", 1), ("vn", 1)]:
        t[name] = torch.randn(b, c.Hkv, length, c.D, device=dev, dtype=dt)
    t["kf"], t["vf"] = torch.cat([t["kc"], t["kn"]], -2), torch.cat([t["vc"], t["vn"]], -2)
    return t


def attention_ref(c, q, k, v):
    """float64 attention of the first sequence, grouped heads repeated."""
    g = c.H // c.Hkv
    k0, v0 = (z[:1].double().cpu().repeat_interleave(g, 1) for z in (k, v))
    return torch.softmax(q[:1].double().cpu() @ k0.transpose(-1, -2) / math.sqrt(c.D), -1) @ v0


def first_heads(c, out):
    """The first sequence of an attention output in (batch, heads, q, D) order."""
    return out[:1] if out.shape[1] == c.H else out[:1].transpose(1, 2)


def attention_cases(c, b):
    """`sdpa/py-auto` (transformers' sdpa_attention_forward over the cache) and
    `kvcache/py-cat` (the cache append)."""
    t = cache_tensors(c, b)
    q, kf, vf = t["q"], t["kf"], t["vf"]
    if c.model is not None:
        attn_mod = c.model.model.layers[0].self_attn

        def call():
            return c.tf.sdpa_attention_forward(attn_mod, q, kf, vf, None, dropout=0.0, scaling=c.D ** -0.5)[0]
        how = "transformers' sdpa_attention_forward"
    else:
        def call():
            return F.scaled_dot_product_attention(q, kf, vf, enable_gqa=True)
        how = "F.scaled_dot_product_attention(enable_gqa=True)"
    out = {c.key("sdpa", "py-auto", "attn", b, c.ctx + 1): Case(
        call, rel_err(first_heads(c, call()), attention_ref(c, q, kf, vf)), "op", f"{how} from Python; {c.note_base}")}
    for site, cache_t, new in [("k", t["kc"], t["kn"]), ("v", t["vc"], t["vn"])]:
        def cat(a=cache_t, n=new):
            return torch.cat([a, n], dim=-2)
        ref = torch.cat([cache_t[:1].double().cpu(), new[:1].double().cpu()], -2)
        out[c.key("kvcache", "py-cat", site, b, c.ctx + 1)] = Case(
            cat, rel_err(cat()[:1], ref), "op", f"torch.cat from Python (DynamicLayer.update's append); {c.note_base}")
    return out


ELTWISE_SITES = ("embedding", "argmax", "residual_add", "silu", "swiglu_mul", "attn_contiguous")


def eltwise_cases(c, b):
    """`eltwise/py-aten`: the element-wise calls between the ops."""
    dev, dt = c.device, c.dtype
    act = c.model.model.layers[0].mlp.act_fn if c.model is not None else F.silu
    hs_a, hs_b = (torch.randn(b, 1, c.hidden, device=dev, dtype=dt) for _ in range(2))
    gate, up = (torch.randn(b, 1, c.inter, device=dev, dtype=dt) for _ in range(2))
    silu_out = act(gate)
    attn_o = torch.randn(b, c.H, 1, c.D, device=dev, dtype=dt)
    emb = (c.model.model.embed_tokens if c.model is not None
           else torch.nn.Embedding(c.vocab, c.hidden).to(dev, dt))
    tok_ids = torch.randint(0, c.vocab, (b, 1), device=dev)
    logits = torch.randn(b, 1, c.vocab, device=dev, dtype=dt)
    logits[torch.arange(b), 0, torch.randint(0, c.vocab, (b,))] = 100.0  # a clear winner per row
    calls = {
        "embedding": (lambda: emb(tok_ids), lambda: emb.weight.double().cpu()[tok_ids.cpu()],
                      f"{type(emb).__name__} (embed_tokens) from Python"),
        "argmax": (lambda: logits[:, -1:].argmax(-1), lambda: logits.double().cpu()[:, -1:].argmax(-1).double(),
                   "logits[:, -1:].argmax(-1) from Python (the greedy choice)"),
        "residual_add": (lambda: hs_a + hs_b, lambda: hs_a.double().cpu() + hs_b.double().cpu(),
                         "residual + branch output from Python"),
        "silu": (lambda: act(gate), lambda: (lambda g: g * torch.sigmoid(g))(gate.double().cpu()),
                 f"{type(act).__name__} from Python"),
        "swiglu_mul": (lambda: silu_out * up, lambda: silu_out.double().cpu() * up.double().cpu(),
                       "act_fn(gate) * up from Python"),
        "attn_contiguous": (lambda: attn_o.transpose(1, 2).contiguous(),
                            lambda: attn_o.double().cpu().transpose(1, 2).contiguous(),
                            "attn_output.transpose(1, 2).contiguous() from Python (no copy at q = 1)"),
    }
    return {c.key("eltwise", "py-aten", s_, b): op_case(*calls[s_], c) for s_ in ELTWISE_SITES}


def module_call_cases(c, b):
    """`module_call`: one nn.Module call whose forward returns its input."""
    class Empty(torch.nn.Module):
        def forward(self, h):
            return h
    e, (x, _) = Empty(), step_inputs(c, b)
    return {module_call_key(c, b): Case(lambda: e(x), None, None, "one nn.Module call whose forward returns its "
                                        f"input (the call machinery transformers pays per module); {c.note_base}",
                                        dims="-")}


def module_call_key(c, b):
    return c.key("decode", "transformers" if c.model is not None else "python", "module_call", b)


FLOORS = ("py-add", "py-view", "py-mixed", "py-blocked")


def floor_cases(c):
    """`floor/py-add`, `floor/py-view` (the Python dispatch floors) and `floor/py-mixed`,
    `floor/py-blocked` (the host's context factor from Python, as opbench's floor `mixed` /
    `blocked`: eight kinds of one-element call switching kind on every call or in runs)."""
    dev, dt = c.device, c.dtype
    one, two = torch.ones(1, device=dev, dtype=dt), torch.ones(2, 2, device=dev, dtype=dt)
    out = {c.floor_key("py-add"): op_case(lambda: one + one, lambda: one.double().cpu() * 2,
                                          "one-element add from Python", c),
           c.floor_key("py-view"): op_case(lambda: two.transpose(0, 1), lambda: two.double().cpu().T,
                                           "transpose of a tiny tensor: dispatch only, from Python", c)}
    a1, b1 = torch.full((1, 1), 1.5, device=dev, dtype=dt), torch.full((1, 1), 0.25, device=dev, dtype=dt)
    x8, w8 = torch.randn(1, 8, device=dev, dtype=dt), (0.35 * torch.randn(8, 8)).to(device=dev, dtype=dt)
    kinds = [lambda a, b, x, w: a + b, lambda a, b, x, w: a * b, lambda a, b, x, w: -a,
             lambda a, b, x, w: torch.rsqrt(b), lambda a, b, x, w: F.silu(a),
             lambda a, b, x, w: torch.cat([a, b], 1), lambda a, b, x, w: x.mean(-1, keepdim=True),
             lambda a, b, x, w: F.linear(x, w)]
    args = (a1, b1, x8, w8)
    mix = [functools.partial(k, *args) for k in kinds]
    rounds = 64

    def every(t):
        return torch.cat([k(*t).reshape(-1) for k in kinds])
    err = rel_err(every(args), every(tuple(t.double().cpu() for t in args)))
    for variant, calls, how in [("py-mixed", [f for _ in range(rounds) for f in mix], "switching kind on every call"),
                                ("py-blocked", [f for f in mix for _ in range(rounds)],
                                 f"{rounds} calls of a kind in a row")]:
        def unit(calls=calls):
            for f in calls:
                f()
        out[c.floor_key(variant)] = Case(
            unit, err, "op", f"{rounds} calls of each of 8 kinds of one-element call (add, mul, neg, rsqrt, silu, "
            f"cat, mean, linear) from Python per timed unit, {how}; {c.note_base}", calls=len(calls),
            timed=lambda n, unit=unit, k=len(calls): c.timer.sample(unit, n).scaled(1 / k))
    return out


def norm_module(c, width):
    """The model's RMSNorm class (a stand-in with its arithmetic without transformers)."""
    eps = c.cfg["rms_norm_eps"]
    if c.model is not None:
        m = type(c.model.model.layers[0].input_layernorm)(width, eps=eps).to(device=c.device, dtype=c.dtype)
    else:
        class Norm(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.weight = torch.nn.Parameter(torch.ones(width))

            def forward(self, h):
                dt_in = h.dtype
                h = h.to(torch.float32)
                v = h.pow(2).mean(-1, keepdim=True)
                return self.weight * (h * torch.rsqrt(v + eps)).to(dt_in)
        m = Norm().to(device=c.device, dtype=c.dtype)
    with torch.no_grad():
        m.weight.copy_(1 + 0.1 * torch.randn(width))
    return m


def static_cache(c, b, ctx):
    """A StaticCache of max_cache_len L + 2·new holding `ctx` tokens of a prompt, and its
    reset: every layer's length set back to `ctx` (the tokens past it are masked)."""
    cache = c.tf.StaticCache(config=c.model.config, max_cache_len=c.ctx + 2 * new_tokens(c))
    ids = torch.randint(1, c.vocab, (b, ctx + 1), device=c.device)
    c.model(ids[:, :ctx], past_key_values=cache, use_cache=True)

    def reset():
        for layer_ in cache.layers:
            layer_.cumulative_length.fill_(ctx)
    return cache, ids, reset


def static_attention(c, b):
    """A static cache of L (max_cache_len L + 2·new) as the step at L attends over it: the
    step's mask made while L are filled, then layer 0 written to L + 1. Returns (cache,
    layer 0, the step's tensors, the mask's maker, the mask); AttributeError or TypeError
    where the cache's layers are not as transformers 5.17 has them."""
    cache, _, reset = static_cache(c, b, c.ctx)
    lay0, t = cache.layers[0], cache_tensors(c, b)
    reset()  # L filled: the mask is made before the layers write the new token
    emb = torch.randn(b, 1, c.hidden, device=c.device, dtype=c.dtype)
    mpos = torch.full((1, 1), c.ctx, device=c.device, dtype=torch.long)

    def mask():
        return c.tf.create_causal_mask(config=c.model.config, inputs_embeds=emb, attention_mask=None,
                                       past_key_values=cache, position_ids=mpos)
    got = mask()
    cache.update(t["kn"], t["vn"], 0)  # L + 1 filled, as the attention of the step at L sees them
    return cache, lay0, t, mask, got


STATIC_PARTS = ("cache_update_static", "mask_static", "sdpa_static")


def static_part_cases(c, b):
    """A static cache's parts, each alone, from a cache of L (max_cache_len L + 2·new):
    `cache_update_static` (StaticCache.update per layer, in place of DynamicCache's two
    cats), `mask_static` (create_causal_mask per step with it) and `sdpa_static`
    (sdpa_attention_forward per layer over its keys with that mask, checked against float64
    attention over the L + 1 filled). predict's "static cache alone" swaps them into the
    step and is checked against `generate_static_from_l`."""
    dims, ctx, new = f"batch={b} L={c.ctx}", c.ctx, new_tokens(c)
    note = f"max_cache_len L + {2 * new}; {c.version}{c.note_base}"
    try:
        cache, lay0, t, mask, got = static_attention(c, b)
    except (AttributeError, TypeError) as e:
        why = f"the static cache's layers are not as transformers 5.17 has them ({type(e).__name__}: {str(e)[:120]})"
        return {c.step_key(s_, b): refused("unsupported", why, dims) for s_ in STATIC_PARTS}
    calls = [0]

    def upd():
        # layer 0 advances one position a call from L, set back every `new` calls
        calls[0] += 1
        if calls[0] % new == 0:
            lay0.cumulative_length.fill_(ctx)
        return cache.update(t["kn"], t["vn"], 0)
    shape = "None" if got is None else tuple(got.shape)
    attn_mod, q = c.model.model.layers[0].self_attn, t["q"]
    keys, values = lay0.keys, lay0.values

    def attend():
        return c.tf.sdpa_attention_forward(attn_mod, q, keys, values, got, dropout=0.0, scaling=c.D ** -0.5)[0]
    err = rel_err(first_heads(c, attend()), attention_ref(c, q, keys[:, :, :ctx + 1], values[:, :, :ctx + 1]))
    return {c.step_key("cache_update_static", b): Case(
                upd, None, None, f"StaticCache.update(k, v, layer) per layer (position arithmetic and two "
                f"index_copy_; one fill_ every {new} calls sets it back to L); {note}", dims),
            c.step_key("mask_static", b): Case(mask, None, None, f"create_causal_mask per step with the static cache "
                                               f"(returned {shape}); {note}", dims),
            c.step_key("sdpa_static", b): Case(attend, err, "op", f"transformers' sdpa_attention_forward over the "
                                               f"static cache's keys with its mask, per layer ({note})", dims)}


def static_graph_cases(c, b):
    """`sdpa_static_graph`: the attention of `sdpa_static` (sdpa_attention_forward over a
    static cache of L with its mask: repeat_kv and the masked SDPA) compiled with
    torch.compile(mode="reduce-overhead"), as the graphed generate() runs it. One graph
    replay chains a layer count of them (each output the next query), so a call's time is
    its kernels'. The first is checked against float64. predict's graphs row prices the
    step's attention with it."""
    key, dims, layers = c.step_key("sdpa_static_graph", b), f"batch={b} L={c.ctx}", c.cfg["num_hidden_layers"]
    how = graphed(c)
    if isinstance(how, str):
        return {key: refused("unsupported", how, dims)}
    _, lay0, t, _, mask = static_attention(c, b)
    attn_mod, keys, values = c.model.model.layers[0].self_attn, lay0.keys, lay0.values

    def chain(q, k, v, m):
        first = out = c.tf.sdpa_attention_forward(attn_mod, q, k, v, m, dropout=0.0, scaling=c.D ** -0.5)[0]
        for _ in range(layers - 1):
            out = c.tf.sdpa_attention_forward(attn_mod, out.transpose(1, 2), k, v, m, dropout=0.0,
                                              scaling=c.D ** -0.5)[0]
        return first, out
    compiled = torch.compile(chain, mode="reduce-overhead", fullgraph=True)

    def run():
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(t["q"], keys, values, mask)
    for _ in range(3):  # compile, record, replay
        run()
    first = run()[0].clone()
    ref = attention_ref(c, t["q"], keys[:, :, :c.ctx + 1], values[:, :, :c.ctx + 1])
    note = (f"{layers} of transformers' sdpa_attention_forward over a static cache of L (max_cache_len L + "
            f"{2 * new_tokens(c)}) with its mask, chained in one torch.compile(mode=\"reduce-overhead\") graph, "
            f"per call; {c.version}{c.note_base}")
    return {key: Case(run, rel_err(first_heads(c, first), ref), "op", note, dims, calls=layers,
                      timed=lambda n: c.timer.sample(run, n).scaled(1 / layers))}


# ------------------------------------------------------------------ the families and the protocol


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


def text(key):
    return "/".join(key)


def serve(c, lines, reply):
    """Answer the protocol's requests, one JSON object a line, until `quit`."""
    import re
    fams = [] if c.nothing else families(c)
    index = {text(k): f for f in fams for k, _ in f.specs}
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
                    {"key": text(k), "fields": list(k), "sampling": s}
                    for f in fams for k, s in f.specs if pat is None or pat.search(text(k))]})
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
            if other.built is not None and not any(text(k) in live for k, _ in other.specs):
                other.built = None
        try:
            fam.built = {text(tuple(str(v) for v in k)): case for k, case in fam.build().items()}
        except Exception as e:  # the family's cases end with the reason, the worker goes on
            oom = "out of memory" in str(e).lower()
            why = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            fam.built = {text(k): refused("oom" if oom else "error", why) for k, _ in fam.specs}
    case = fam.built.get(key)
    if case is None:
        return {"reply": "error", "message": f"{key}: its family did not build it"}
    live[key] = case
    ok = case.status == "ok"
    return {"reply": "prepared", "key": key, "status": case.status, "reason": None if ok else case.note,
            "rel_err": case.err, "dims": case.dims, "flops": 0, "bytes": 0, "note": case.note if ok else None,
            "check": case.check, "state_bytes": 0}


def sampled(c, live, key, iters):
    case = live.get(key)
    if case is None:
        return {"reply": "error", "message": f"{key} is not prepared"}
    t = case.sample(c, iters)
    calls = iters * case.calls
    st = t.state
    state = {k: st.get(k) for k in ("cpu_ns", "nivcsw", "steal", "host_after_ns", "slowest_ns", "control_after_ns",
                                    "typical_ns")}
    spent = getattr(t, "spent", None)
    return {"reply": "sample", "key": key, "calls": calls, "total_ns": float(t) * calls,
            "spent_ns": None if spent is None else spent * calls,
            "control_ns": st.get("control_ns"), "host_ns": st.get("host_ns"), "state": state}


def main(argv):
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
