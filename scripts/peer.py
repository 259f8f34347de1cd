#!/usr/bin/env python3
"""The user's own stack, measured the way opbench measures its tch step: the Hugging Face
transformers Qwen3 decode step (eager, SDPA attention, DynamicCache), its Python-side op
calls, and the framework's own per-step work, written as rows into an opbench run directory.

    python3 scripts/peer.py RUN_DIR [--batches 1,8,64] [--ctx 1024] [--device cuda|cpu]

Needs torch (the Python opbench benchmarks against); transformers is optional: without it
the run gets the Python op rows only, and one line says what is missing. Weights are random
(the model file in shapes/ gives the real config); nothing is downloaded.

Rows (docs/schema.md; every case checked against a float64 CPU reference first):
- op `decode`, variant `transformers`, site `step`: one HF step pipelined (n steps back to
  back, argmax feeding the next, one synchronize), from a DynamicCache of L tokens (cropped
  back to L after every sample);
- sites `layers1`, `layers8`: the same step with only the first 1 or 8 decoder layers: their
  difference over 7 is one layer inside a step (its framework included), the rest the
  step's own work;
- site `generate`: `model.generate()` time per new token as the user sees it (prompt of 16,
  32 new tokens, greedy), tokens/s in the note;
- sites `module_call`, `mask`, `cache_update`: the framework's own work per call (an empty
  nn.Module's call, `create_causal_mask`, DynamicCache.update beyond its two `cat`s);
- sites `layer`, `layer_flat`, `layer_calls`, `stack`, `stack_flat`, per layer, sampled in
  interleaved rounds: one decoder layer called as the model calls it, its calls written out
  flat, the same calls each timed alone; every decoder layer called in turn as the model
  calls them, and their calls flat in turn (predict prices transformers' own code per layer
  as stack − stack_flat, and its calls' sequence from layer_flat and layer_calls);
- the op sites at the run's decode shapes, as transformers calls them from Python, variant
  `py-<the tch variant>`: `linear/py-aten` (the model's nn.Linear), `rmsnorm/py-hf`
  (Qwen3RMSNorm), `rope/py-rotate_half` (q·cos + rotate_half(q)·sin), `rope/py-hf`
  (the rotary embedding module), `sdpa/py-auto` (transformers' sdpa_attention_forward),
  `kvcache/py-cat`, and the Python dispatch floors `floor/py-add`, `floor/py-view`.
"""

import argparse
import csv
import functools
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def fail(msg, code=2):
    print(f"peer: {msg}", file=sys.stderr)
    sys.exit(code)


def say(msg):
    print(f"peer: {msg}", file=sys.stderr, flush=True)


try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    fail("torch is not importable in this Python: run scripts/setup, or use the Python opbench uses")


# ------------------------------------------------------------------ the run directory


class Run:
    """Appends rows to RUN/results.csv and RUN/samples.csv by their header's column names."""

    def __init__(self, path: Path):
        self.path = path
        env = path / "env.json"
        if not env.is_file():
            fail(f"{path}: not a run directory (no env.json); run scripts/bench first")
        self.env = json.loads(env.read_text())
        self.run_id = self.env.get("run_id", path.name)
        self.results = path / "results.csv"
        self.samples = path / "samples.csv"
        for f in (self.results, self.samples):
            if not f.is_file():
                fail(f"{f}: missing")
        with self.results.open() as f:
            r = csv.reader(f)
            self.rcols = next(r)
            keys = ["op", "variant", "site", "model", "phase", "batch", "q_len", "kv_len", "dtype", "device", "mode"]
            idx = [self.rcols.index(k) for k in keys]
            self.have = {tuple(row[i] for i in idx) for row in r if row}
        with self.samples.open() as f:
            self.scols = next(csv.reader(f))

    def has(self, key):
        return tuple(str(v) for v in key) in self.have

    def write(self, key, dims, times_ns, note, flops=0, nbytes=0, rel_err=None, status="ok", iters=1):
        """One case: its per-call times (one per sample) and the row they make."""
        if self.has(key):
            return
        names = ["op", "variant", "site", "model", "phase", "batch", "q_len", "kv_len", "dtype", "device", "mode"]
        row = dict(zip(names, [str(v) for v in key]))
        row.update(run_id=self.run_id, dims=dims, status=status, flops=str(flops), bytes=str(nbytes), note=note)
        if rel_err is not None:
            row["max_rel_err"] = f"{rel_err:.3e}"
        if status == "ok":
            med, mean, lo, hi, mad = estimate(times_ns)
            row.update(samples=str(len(times_ns)), median_ns=f"{med:.1f}", mean_ns=f"{mean:.1f}",
                       ci_low_ns=f"{lo:.1f}", ci_high_ns=f"{hi:.1f}", mad_ns=f"{mad:.1f}")
            if med > 0:
                row.update(gflops=f"{flops / med:.4f}", gbps=f"{nbytes / med:.4f}")
            with self.samples.open("a", newline="") as f:
                w = csv.writer(f)
                for t in times_ns:
                    s = dict(row, execution="1", iters=str(iters), total_ns=f"{t * iters:.1f}", control_ns="")
                    w.writerow([s.get(c, "") for c in self.scols])
        with self.results.open("a", newline="") as f:
            csv.writer(f).writerow([row.get(c, "") for c in self.rcols])
        self.have.add(tuple(str(v) for v in key))


def estimate(times):
    """Median, mean, a 95% percentile-bootstrap interval of the median, and the MAD."""
    med = statistics.median(times)
    rng = random.Random(1)
    boots = sorted(statistics.median(rng.choices(times, k=len(times))) for _ in range(2000))
    mad = statistics.median(abs(t - med) for t in times)
    return med, statistics.fmean(times), boots[int(0.025 * 2000)], boots[int(0.975 * 2000) - 1], mad


# ------------------------------------------------------------------ timing


class Timer:
    def __init__(self, device, samples, warmup_s, measure_s):
        self.device = device
        self.samples = samples
        self.warmup_s = warmup_s
        self.measure_s = measure_s

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def pipelined(self, fn, before=None, max_calls=None):
        """Per-call ns of `samples` samples: n calls back to back, one synchronize.
        `before` runs ahead of each sample, outside the timed region; `max_calls` caps n."""
        self.sync()
        t0 = time.perf_counter()
        calls = 0
        while time.perf_counter() - t0 < self.warmup_s or calls < 2:
            fn()
            calls += 1
        self.sync()
        per = max((time.perf_counter() - t0) / calls, 1e-7)
        n = max(1, int(self.measure_s / self.samples / per))
        if max_calls:
            n = min(n, max_calls)
        out = []
        for _ in range(self.samples):
            if before:
                before()
            out.append(self.sample(fn, n))
        return out, n

    def sample(self, fn, n):
        """Per-call ns of n calls back to back, one synchronize."""
        self.sync()
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        self.sync()
        return (time.perf_counter_ns() - t0) / n


def rel_err(out, ref):
    out = out.detach().to("cpu", torch.float64)
    ref = ref.detach().to("cpu", torch.float64)
    d = (out - ref).norm().item()
    n = ref.norm().item()
    return d / n if n > 0 else d


TOL = {"f32": 1e-4, "f16": 1e-2, "bf16": 5e-2}
STEP_TOL = {"f32": 1e-3, "f16": 1.5e-2, "bf16": 1e-1}
# the decoder-layer rows (one layer called alone, its calls flat, each call alone; every
# layer of the model called in turn, and their calls flat in turn), sampled together;
# transformers' own code per layer is `stack` less `stack_flat` (opbench predict)
LAYER_SITES = ("layer", "layer_flat", "layer_calls", "stack", "stack_flat")
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


# ------------------------------------------------------------------ shapes


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


def opbench_shapes(model, batch, ctx, dtype):
    """FLOPs and bytes per (op, site) from `opbench shapes` (the one place they are counted);
    empty when the binary is not built."""
    exe = ROOT / "target" / "release" / ("opbench.exe" if os.name == "nt" else "opbench")
    if not exe.is_file():
        return {}
    out = subprocess.run([str(exe), "shapes", "--model", model, "--batch", str(batch), "--ctx", str(ctx),
                          "--dtype", dtype, "--format", "csv"], capture_output=True, text=True)
    if out.returncode != 0:
        return {}
    rows = list(csv.DictReader(out.stdout.splitlines()))
    return {(r["op"], r["site"]): (int(r["flops"]), int(r["bytes"]), r["dims"]) for r in rows}


# ------------------------------------------------------------------ the cases


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="the run directory (target/opbench/runs/RUN_ID)")
    ap.add_argument("--batches", help="decode batch sizes (default: the run's grid profile)")
    ap.add_argument("--ctx", type=int, help="cache length L (default: the grid's first decode_ctx)")
    ap.add_argument("--device", choices=["cuda", "cpu"], help="default: the GPU when torch sees one")
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--measure-ms", type=int, default=300)
    ap.add_argument("--warmup-ms", type=int, default=200)
    ap.add_argument("--only", choices=["ops", "step"], help="only the op rows, or only the step rows")
    a = ap.parse_args(argv)
    if a.samples < 3:
        fail("--samples: at least 3")
    run = Run(a.run)
    settings = run.env.get("settings", {})
    model_name = (settings.get("models") or "qwen3-0.6b").split(",")[0]
    cfg = load_toml(shapes_dir() / f"{model_name}.toml")
    grid = load_toml(shapes_dir() / "grid.toml").get(settings.get("profile", "default"), {})
    try:
        batches = [int(b) for b in (a.batches.split(",") if a.batches else grid.get("batches", [1]))]
    except ValueError:
        fail(f"--batches: expected comma-separated whole numbers, got {a.batches}")
    if not batches or min(batches) < 1:
        fail("--batches: every batch must be at least 1")
    ctx = a.ctx if a.ctx is not None else (grid.get("decode_ctx") or [1024])[0]
    dev = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dev == "cuda" and not torch.cuda.is_available():
        fail("--device cuda: torch sees no GPU")
    device = torch.device(dev, 0) if dev == "cuda" else torch.device("cpu")
    label = "cpu" if dev == "cpu" else (f"hip:0" if getattr(torch.version, "hip", None) else "cuda:0")
    dt_name = "f16" if dev == "cuda" else "f32"
    dtype = DTYPES[dt_name]
    timer = Timer(device, a.samples, a.warmup_ms / 1e3, a.measure_ms / 1e3)
    try:
        import transformers
        from transformers import Qwen3Config, Qwen3ForCausalLM, DynamicCache
        from transformers.masking_utils import create_causal_mask
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        from transformers.models.qwen3.modeling_qwen3 import rotate_half, apply_rotary_pos_emb
    except ImportError as e:
        transformers = None
        say(f"transformers is not importable ({e}): no transformers step, generate or framework rows; "
            "the Python op rows only (pip install transformers to measure the user's stack)")
    torch.manual_seed(0)
    H, Hkv, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    hidden, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]

    def case(kk, dims, call, err, note, flops=0, nbytes=0, calls_per=1):
        """Time `call` pipelined, unless its error against float64 is over the tolerance;
        `call` may make `calls_per` calls, and the row is per call."""
        if not err <= TOL[dt_name]:
            run.write(kk, dims, [], f"relative error {err:.3e} against the float64 reference exceeds "
                      f"{TOL[dt_name]}", flops, nbytes, err, status="mismatch")
            return
        times, n = timer.pipelined(call)
        run.write(kk, dims, [t / calls_per for t in times], f"{note}; {note_base}", flops, nbytes, err,
                  iters=n * calls_per)

    def key(op, variant, site, b, kv=""):
        return (op, variant, site, model_name, "decode", b, 1, kv, dt_name, label, "pipelined")

    def layer_program(lay, b):
        """One decoder layer's calls as modeling_qwen3 makes them, written out flat (no
        module wrappers, kwargs or cache object): (name, call) pairs, each reading its inputs
        from the environment `e` and leaving its output under its name."""
        at, mlp = lay.self_attn, lay.mlp
        hs = (b, 1, -1, D)
        return [
            ("h", lambda e: lay.input_layernorm(e["x"])),
            ("q1", lambda e: at.q_proj(e["h"])), ("q2", lambda e: e["q1"].view(hs)),
            ("q3", lambda e: at.q_norm(e["q2"])), ("q", lambda e: e["q3"].transpose(1, 2)),
            ("k1", lambda e: at.k_proj(e["h"])), ("k2", lambda e: e["k1"].view(hs)),
            ("k3", lambda e: at.k_norm(e["k2"])), ("k", lambda e: e["k3"].transpose(1, 2)),
            ("v1", lambda e: at.v_proj(e["h"])), ("v2", lambda e: e["v1"].view(hs)),
            ("v", lambda e: e["v2"].transpose(1, 2)),
            ("qk", lambda e: apply_rotary_pos_emb(e["q"], e["k"], *e["pe"])),
            ("kf", lambda e: torch.cat([e["K"], e["qk"][1]], dim=-2)),
            ("vf", lambda e: torch.cat([e["V"], e["v"]], dim=-2)),
            ("o1", lambda e: sdpa_attention_forward(at, e["qk"][0], e["kf"], e["vf"], None, dropout=0.0,
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

    def layer_rows(b, kc, vc, x, pos):
        """Rows `layer` (one Qwen3DecoderLayer called as the model calls it, from a DynamicCache
        of L tokens, reset after each call), `layer_flat` (its calls written out flat),
        `layer_calls` (the same calls each timed alone, summed), `stack` (every decoder layer
        of the model called in turn, as the step calls them, each from its own cache layer of
        L tokens) and `stack_flat` (their calls written out flat, in turn), all per layer,
        sampled in interleaved rounds. stack − stack_flat is transformers' own code in a
        layer (module calls, kwargs, the attention interface lookup, the cache's
        bookkeeping) with each layer's module objects and weights in the state the step
        leaves them in: on a CPU every layer's weights pass the cache between two calls of
        it; layer_flat / layer_calls what the calls cost in sequence over alone."""
        import copy
        lay = model.model.layers[0]
        pe = model.model.rotary_emb(x, pos)
        env = {"x": x, "pe": pe, "K": kc, "V": vc}
        prog = layer_program(lay, b)
        got = run_program(prog, env)
        # the float64 reference: the same program over a float64 CPU copy of the layer
        ref_lay = copy.deepcopy(lay).to("cpu", torch.float64)
        ref_env = {"x": x.cpu().double(), "pe": tuple(t.cpu().double() for t in pe), "K": kc.cpu().double(),
                   "V": vc.cpu().double()}
        want = run_program(layer_program(ref_lay, b), ref_env)
        del ref_lay
        layers = list(model.model.layers)
        cache = DynamicCache(config=model.config)
        for i in range(len(layers)):
            cache.update(kc, vc, i)
        kept = [(cl.keys, cl.values) for cl in cache.layers]

        cl0, (k00, v00) = cache.layers[0], kept[0]

        def layer_call():
            # layer 0 updates its own cache layer only: reset that one (inside the timed calls)
            out = lay(x, attention_mask=None, position_ids=pos, past_key_values=cache, use_cache=True,
                      position_embeddings=pe)
            cl0.keys, cl0.values = k00, v00
            return out

        def stack():
            # each layer's cache reset right after its call: as in the step, where a layer's
            # update frees the keys and values it replaces before the next layer allocates
            # its own (held over the whole pass, B = 8's 56 appends on the CPU took fresh
            # pages every pass: ~1.8 ms a layer the step does not spend)
            h = x
            for lay_, cl, (k0, v0) in zip(layers, cache.layers, kept):
                h = lay_(h, attention_mask=None, position_ids=pos, past_key_values=cache, use_cache=True,
                         position_embeddings=pe)
                cl.keys, cl.values = k0, v0
            return h
        progs = [layer_program(lay_, b) for lay_ in layers]

        def stack_flat():
            e = {"x": x, "pe": pe, "K": kc, "V": vc}
            for prog_ in progs:
                e["x"] = run_program(prog_, e)
            return e["x"]
        # the stack runs layer 0's code on every layer: the same calls, whose check is the
        # layer's; and the stack called as the model calls it against its calls flat
        err = max(rel_err(got, want), rel_err(layer_call(), want))
        stack_err = rel_err(stack(), stack_flat())
        sites = [(s_, key("decode", "transformers", s_, b, ctx + 1)) for s_ in LAYER_SITES]
        if not (err <= STEP_TOL[dt_name] and stack_err <= STEP_TOL[dt_name]):
            what = (f"the decoder layer is {err:.3e} off its float64 reference" if err > STEP_TOL[dt_name] else
                    f"the layers called as the model calls them are {stack_err:.3e} off their calls written out flat")
            for s_, kk in sites:
                run.write(kk, f"batch={b} L={ctx}", [], f"{what} (tolerance {STEP_TOL[dt_name]})", rel_err=err,
                          status="mismatch")
            return
        leaves = [functools.partial(call, dict(env)) for _, call in prog]
        flat = functools.partial(run_program, prog, dict(env))
        # calls per sample: about measure_s / samples of the flat layer per sample
        timer.sync()
        t0 = time.perf_counter()
        calls = 0
        while time.perf_counter() - t0 < timer.warmup_s or calls < 3:
            flat()
            layer_call()
            for f in leaves:
                f()
            calls += 1
        stack()
        stack_flat()
        timer.sync()
        per = max((time.perf_counter() - t0) / calls / 3, 1e-7)
        n = max(2, int(timer.measure_s / timer.samples / per))
        # the stacks: about as many layers per sample as the layer sites, at least one pass
        passes = max(1, round(n / len(layers)))
        # LAYER_SITES' order: the layer as called, its calls flat, each call alone, every
        # layer as called, their calls flat
        samplers = dict(zip(LAYER_SITES, [lambda: timer.sample(layer_call, n), lambda: timer.sample(flat, n),
                                          lambda: sum(timer.sample(f, n) for f in leaves),
                                          lambda: timer.sample(stack, passes) / len(layers),
                                          lambda: timer.sample(stack_flat, passes) / len(layers)]))
        res = {s_: [] for s_ in samplers}
        order = list(samplers)
        rng = random.Random(b)
        # twice the samples: predict reads differences of these rows, ~10% of each
        rounds = 2 * timer.samples
        for _ in range(rounds):
            rng.shuffle(order)
            for which in order:
                res[which].append(samplers[which]())
        nl = len(layers)
        what = {
            "layer": "one Qwen3DecoderLayer called as the model calls it (kwargs, DynamicCache of L, reset after "
                     "each call)",
            "layer_flat": f"the same layer's {len(prog)} calls written out flat from Python (leaf modules and "
                          "functions, no wrappers, kwargs or cache object)",
            "layer_calls": f"the same {len(prog)} calls each timed alone, back to back, summed per round",
            "stack": f"the model's {nl} Qwen3DecoderLayers called in turn as the model calls them (each from its own "
                     f"cache layer of L, reset after its call; layer 0's check covers their code; {passes} pass(es) "
                     "per sample)",
            "stack_flat": f"the same {nl} layers' calls written out flat, in turn ({passes} pass(es) per sample)",
        }
        for s_, kk in sites:
            if not run.has(kk):
                iters = passes * nl if s_.startswith("stack") else n
                run.write(kk, f"batch={b} L={ctx}", res[s_], f"{what[s_]}; per layer; {rounds} rounds of the "
                          f"five interleaved, {n} calls per sample of the one layer; {version}{note_base}",
                          rel_err=err, iters=iters)

    model = None
    if transformers is not None:
        hf_cfg = Qwen3Config(
            vocab_size=vocab, hidden_size=hidden, intermediate_size=inter,
            num_hidden_layers=cfg["num_hidden_layers"], num_attention_heads=H,
            num_key_value_heads=Hkv, head_dim=D, rope_theta=cfg["rope_theta"],
            rms_norm_eps=cfg["rms_norm_eps"], max_position_embeddings=cfg["max_position_embeddings"],
            tie_word_embeddings=cfg.get("tie_word_embeddings", False), attn_implementation="sdpa",
        )
        say(f"building {model_name} with random weights (transformers {transformers.__version__})")
        # as from_pretrained(torch_dtype=...) builds it: parameters in the dtype, the rotary
        # embedding's inv_freq buffer in float32 (a .to(dtype) would cast it and lose the
        # precision of cos/sin at long positions)
        model = Qwen3ForCausalLM._from_config(hf_cfg, torch_dtype=dtype).to(device).eval()
        torch.set_grad_enabled(False)
    else:
        torch.set_grad_enabled(False)
    version = f"transformers {transformers.__version__}, " if transformers else ""
    note_base = f"Python {sys.version.split()[0]}, torch {torch.__version__}"

    # ---- the step's check: the model against a float64 CPU copy of itself at a short context
    step_err = None
    if model is not None and a.only != "ops":
        say("checking the HF step against a float64 CPU copy (first sequence, context 16)")
        import copy
        ref = copy.deepcopy(model).to("cpu", torch.float64)
        ids = torch.randint(0, vocab, (1, 17))
        want = ref(ids).logits[0, -1]
        del ref
        cache = DynamicCache(config=model.config)
        model(ids[:, :16].to(device), past_key_values=cache, use_cache=True)
        got = model(ids[:, 16:].to(device), past_key_values=cache, use_cache=True).logits[0, -1]
        step_err = rel_err(got, want)
        if not step_err <= STEP_TOL[dt_name]:
            fail(f"the HF step's logits are {step_err:.3e} off the float64 reference (tolerance {STEP_TOL[dt_name]})", 1)

    for b in batches:
        counted = opbench_shapes(model_name, b, ctx, dt_name)

        def work(op, site):
            f, n, d = counted.get((op, site), (0, 0, ""))
            return f, n, d

        # ---- the HF step and generate()
        if model is not None and a.only != "ops":
            def step_times(layers):
                # the HF step with the model's first `layers` decoder layers: the model file
                # runs layers[:config.num_hidden_layers], and the cache keeps that many
                full = model.config.num_hidden_layers
                model.config.num_hidden_layers = layers
                try:
                    cache = DynamicCache(config=model.config)
                    cache.layers = cache.layers[:layers]
                    ids = torch.randint(0, vocab, (b, ctx), device=device)
                    model(ids, past_key_values=cache, use_cache=True)
                    state = {"tok": torch.randint(0, vocab, (b, 1), device=device)}

                    def step():
                        out = model(input_ids=state["tok"], past_key_values=cache, use_cache=True)
                        state["tok"] = out.logits[:, -1:].argmax(-1)

                    def crop():
                        extra = cache.get_seq_length() - ctx
                        if extra > 0:
                            cache.crop(-extra)
                            # crop leaves each layer's keys and values as views of the longer
                            # tensors, whose next `cat` then reads strided memory; a cache of L
                            # tokens built step by step is contiguous (as generate()'s is)
                            for layer_ in cache.layers:
                                layer_.keys = layer_.keys.contiguous()
                                layer_.values = layer_.values.contiguous()

                    # every sample starts from L: crop what the steps appended, before it
                    times, n = timer.pipelined(step, before=crop, max_calls=16)
                    crop()
                    return times, n
                finally:
                    model.config.num_hidden_layers = full

            k = key("decode", "transformers", "step", b, ctx + 1)
            if not run.has(k):
                say(f"B={b}: HF step from a DynamicCache of {ctx}")
                times, n = step_times(cfg["num_hidden_layers"])
                run.write(k, f"batch={b} L={ctx}", times,
                          f"HF transformers step: {version}eager, sdpa, DynamicCache; {n} steps per sample from L "
                          f"(cropped back after each); {note_base}; checked against float64 at context 16",
                          rel_err=step_err, iters=n)
            # the same step with 1 and 8 decoder layers: the difference over 7 is what one
            # layer costs inside a step (framework included), the rest the step's own work
            for layers in (1, min(8, cfg["num_hidden_layers"])):
                k = key("decode", "transformers", f"layers{layers}", b, ctx + 1)
                if not run.has(k):
                    times, n = step_times(layers)
                    run.write(k, f"batch={b} L={ctx} layers={layers}", times,
                              f"the HF step with its first {layers} decoder layer(s) only (the rest as the full "
                              f"step, whose check covers this code); {n} steps per sample from L; {note_base}",
                              rel_err=step_err, iters=n)
            k = key("decode", "transformers", "generate", b, 16 + 32)
            if not run.has(k):
                prompt = torch.randint(0, vocab, (b, 16), device=device)
                gen = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0)
                model.generate(prompt, **gen)
                times = []
                for _ in range(max(3, a.samples // 3)):
                    timer.sync()
                    t0 = time.perf_counter_ns()
                    model.generate(prompt, **gen)
                    timer.sync()
                    times.append((time.perf_counter_ns() - t0) / 32)
                tps = b * 1e9 / statistics.median(times)
                run.write(k, f"batch={b} prompt=16 new=32", times,
                          f"model.generate(): {tps:.1f} tokens/s as the user sees it (greedy, prompt 16, 32 new "
                          f"tokens, prefill included); per new token; {version}{note_base}", iters=32)

        # ---- the Python-side op cases, as transformers calls them
        if a.only == "step":
            continue
        say(f"B={b}: Python op cases")
        layer = model.model.layers[0] if model is not None else None
        x = torch.randn(b, 1, hidden, device=device, dtype=dtype)

        def lin(site, n, k_):
            m = getattr(layer.self_attn, site, None) if layer is not None else None
            if m is None and layer is not None:
                m = getattr(layer.mlp, site, None)
            if site == "lm_head" and model is not None:
                m = model.lm_head
            if m is None:
                m = torch.nn.Linear(k_, n, bias=False).to(device=device, dtype=dtype)
            return m

        sites = [("q_proj", H * D, hidden), ("k_proj", Hkv * D, hidden), ("v_proj", Hkv * D, hidden),
                 ("o_proj", hidden, H * D), ("gate_proj", inter, hidden), ("up_proj", inter, hidden),
                 ("down_proj", hidden, inter), ("lm_head", vocab, hidden)]
        for site, n, k_ in sites:
            kk = key("linear", "py-aten", site, b)
            if run.has(kk):
                continue
            m = lin(site, n, k_)
            xin = torch.randn(b, 1, k_, device=device, dtype=dtype)
            out = m(xin)
            rows, cols = min(b, 64), min(n, 4096)
            ref = xin[:rows, 0].double().cpu() @ m.weight[:cols].double().cpu().T
            err = rel_err(out[:rows, 0, :cols], ref)
            f, nb, d = work("linear", site)
            case(kk, d, lambda: m(xin), err, f"{type(m).__name__} called from Python, as transformers calls it", f, nb)
        eps = cfg["rms_norm_eps"]

        def norm(width):
            if layer is not None:
                m = type(layer.input_layernorm)(width, eps=eps).to(device=device, dtype=dtype)
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
                m = Norm().to(device=device, dtype=dtype)
            with torch.no_grad():
                m.weight.copy_(1 + 0.1 * torch.randn(width))
            return m

        for site, shape in [("input_norm", (b, 1, hidden)), ("post_norm", (b, 1, hidden)),
                            ("final_norm", (b, 1, hidden)), ("q_norm", (b, 1, H, D)), ("k_norm", (b, 1, Hkv, D))]:
            kk = key("rmsnorm", "py-hf", site, b)
            if run.has(kk):
                continue
            m = norm(shape[-1])
            xin = torch.randn(*shape, device=device, dtype=dtype)
            h = xin.double().cpu()
            ref = m.weight.double().cpu() * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps))
            err = rel_err(m(xin), ref)
            f, nb, d = work("rmsnorm", site)
            case(kk, d, lambda: m(xin), err, f"{type(m).__name__} called from Python", f, nb)

        def rot(t):
            if transformers is not None:
                return rotate_half(t)
            h = t.shape[-1] // 2
            return torch.cat((-t[..., h:], t[..., :h]), dim=-1)

        pos = torch.full((b, 1), ctx, device=device, dtype=torch.long)
        if model is not None:
            cos, sin = model.model.rotary_emb(x, pos)
        else:
            inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, D, 2, device=device, dtype=torch.float32) / D))
            fr = pos[..., None].float() * inv
            emb = torch.cat((fr, fr), dim=-1)
            cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
        cos1, sin1 = cos.unsqueeze(1), sin.unsqueeze(1)
        for site, heads in [("q", H), ("k", Hkv)]:
            kk = key("rope", "py-rotate_half", site, b)
            if run.has(kk):
                continue
            t = torch.randn(b, heads, 1, D, device=device, dtype=dtype)
            out = t * cos1 + rot(t) * sin1
            td, c, s = t.double().cpu(), cos1.double().cpu(), sin1.double().cpu()
            err = rel_err(out, td * c + torch.cat((-td[..., D // 2:], td[..., :D // 2]), -1) * s)
            f, nb, d = work("rope", site)
            case(kk, d, lambda: t * cos1 + rot(t) * sin1, err,
                 "q·cos + rotate_half(q)·sin from Python (apply_rotary_pos_emb's per-tensor work)", f, nb)
        kk = key("rope", "py-hf", "cache", b)
        if model is not None and not run.has(kk):
            re = model.model.rotary_emb
            c, s = re(x, pos)
            inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
            fr = pos.cpu()[..., None].double() * inv
            emb = torch.cat((fr, fr), dim=-1)
            err = rel_err(torch.cat((c, s), -1), torch.cat((emb.cos(), emb.sin()), -1))
            f, nb, d = work("rope", "cache")
            case(kk, d, lambda: re(x, pos), err, "the rotary embedding module (cos, sin for the step's positions)",
                 f, nb)
        # attention over the cache, and the cache append
        q = torch.randn(b, H, 1, D, device=device, dtype=dtype)
        kc = torch.randn(b, Hkv, ctx, D, device=device, dtype=dtype)
        vc = torch.randn(b, Hkv, ctx, D, device=device, dtype=dtype)
        kn = torch.randn(b, Hkv, 1, D, device=device, dtype=dtype)
        vn = torch.randn(b, Hkv, 1, D, device=device, dtype=dtype)
        kf, vf = torch.cat([kc, kn], -2), torch.cat([vc, vn], -2)
        kk = key("sdpa", "py-auto", "attn", b, ctx + 1)
        if not run.has(kk):
            if model is not None:
                attn_mod = layer.self_attn
                call = lambda: sdpa_attention_forward(attn_mod, q, kf, vf, None, dropout=0.0, scaling=D ** -0.5)[0]
                how = "transformers' sdpa_attention_forward"
            else:
                call = lambda: F.scaled_dot_product_attention(q, kf, vf, enable_gqa=True)
                how = "F.scaled_dot_product_attention(enable_gqa=True)"
            out = call()
            q0 = q[:1].double().cpu()
            k0 = kf[:1].double().cpu().repeat_interleave(H // Hkv, 1)
            v0 = vf[:1].double().cpu().repeat_interleave(H // Hkv, 1)
            ref = torch.softmax(q0 @ k0.transpose(-1, -2) / math.sqrt(D), -1) @ v0
            got = out[:1] if out.shape[1] == H else out[:1].transpose(1, 2)
            err = rel_err(got, ref)
            f, nb, d = work("sdpa", "attn")
            case(kk, d, call, err, f"{how} from Python", f, nb)
        for site, cache_t, new in [("k", kc, kn), ("v", vc, vn)]:
            kk = key("kvcache", "py-cat", site, b, ctx + 1)
            if run.has(kk):
                continue
            out = torch.cat([cache_t, new], dim=-2)
            err = rel_err(out[:1], torch.cat([cache_t[:1].double().cpu(), new[:1].double().cpu()], -2))
            f, nb, d = work("kvcache", site)
            case(kk, d, lambda: torch.cat([cache_t, new], dim=-2), err,
                 "torch.cat from Python (DynamicLayer.update's append)", f, nb)
        # the element-wise calls between the ops: residual adds, the MLP's act_fn and product,
        # the attention output's transpose(1, 2).contiguous() (eltwise crate's sites)
        act = layer.mlp.act_fn if model is not None else F.silu
        hs_a = torch.randn(b, 1, hidden, device=device, dtype=dtype)
        hs_b = torch.randn(b, 1, hidden, device=device, dtype=dtype)
        gate = torch.randn(b, 1, inter, device=device, dtype=dtype)
        up = torch.randn(b, 1, inter, device=device, dtype=dtype)
        silu_out = act(gate)
        attn_o = torch.randn(b, H, 1, D, device=device, dtype=dtype)
        sig = lambda t: t * torch.sigmoid(t)
        emb = model.model.embed_tokens if model is not None else torch.nn.Embedding(vocab, hidden).to(device, dtype)
        tok_ids = torch.randint(0, vocab, (b, 1), device=device)
        logits = torch.randn(b, 1, vocab, device=device, dtype=dtype)
        logits[torch.arange(b), 0, torch.randint(0, vocab, (b,))] = 100.0  # a clear winner per row
        for site, call, ref_of, how in [
            ("embedding", lambda: emb(tok_ids), lambda: emb.weight.double().cpu()[tok_ids.cpu()],
             f"{type(emb).__name__} (embed_tokens) from Python"),
            ("argmax", lambda: logits[:, -1:].argmax(-1), lambda: logits.double().cpu()[:, -1:].argmax(-1).double(),
             "logits[:, -1:].argmax(-1) from Python (the greedy choice)"),
            ("residual_add", lambda: hs_a + hs_b, lambda: hs_a.double().cpu() + hs_b.double().cpu(),
             "residual + branch output from Python"),
            ("silu", lambda: act(gate), lambda: sig(gate.double().cpu()), f"{type(act).__name__} from Python"),
            ("swiglu_mul", lambda: silu_out * up, lambda: silu_out.double().cpu() * up.double().cpu(),
             "act_fn(gate) * up from Python"),
            ("attn_contiguous", lambda: attn_o.transpose(1, 2).contiguous(),
             lambda: attn_o.double().cpu().transpose(1, 2).contiguous(),
             "attn_output.transpose(1, 2).contiguous() from Python (no copy at q = 1)"),
        ]:
            kk = key("eltwise", "py-aten", site, b)
            if run.has(kk):
                continue
            err = rel_err(call(), ref_of())
            f, nb, d = work("eltwise", site)
            case(kk, d, call, err, how, f, nb)
        # the framework's own work
        if model is not None:
            kk = key("decode", "transformers", "cache_update", b, ctx + 1)
            if not run.has(kk):
                cache = DynamicCache(config=model.config)
                cache.update(kc, vc, 0)
                lay = cache.layers[0]
                k0, v0 = lay.keys, lay.values

                def upd():
                    cache.update(kn, vn, 0)
                    lay.keys, lay.values = k0, v0

                cat_k = lambda: torch.cat([kc, kn], dim=-2)
                upd_t, _ = timer.pipelined(upd)
                cat_t, _ = timer.pipelined(cat_k)
                extra = [max(u - 2 * statistics.median(cat_t), 1.0) for u in upd_t]
                run.write(kk, f"batch={b} L={ctx}", extra,
                          "DynamicCache.update(k, v, layer) beyond its two torch.cat appends (per layer; timed beside "
                          f"one cat, difference per sample, floored at 1 ns); {version}{note_base}")
            kk = key("decode", "transformers", "mask", b, ctx + 1)
            if not run.has(kk):
                cache = DynamicCache(config=model.config)
                for i in range(cfg["num_hidden_layers"]):
                    cache.update(kc, vc, i)
                emb = torch.randn(b, 1, hidden, device=device, dtype=dtype)
                mpos = torch.full((1, 1), ctx, device=device, dtype=torch.long)

                def mask():
                    return create_causal_mask(config=model.config, inputs_embeds=emb, attention_mask=None,
                                              past_key_values=cache, position_ids=mpos)
                got = mask()
                times, _ = timer.pipelined(mask)
                run.write(kk, f"batch={b} L={ctx}", times,
                          f"create_causal_mask per step (returned {'None: SDPA needs no mask' if got is None else tuple(got.shape)}); "
                          f"{version}{note_base}")
            # one decoder layer: called as the model calls it, its calls written out flat,
            # and the same calls each timed alone, in interleaved rounds of one process
            if not all(run.has(key("decode", "transformers", s_, b, ctx + 1)) for s_ in LAYER_SITES):
                layer_rows(b, kc, vc, x, pos)
        kk = key("decode", "transformers" if model is not None else "python", "module_call", b)
        if not run.has(kk):
            class Empty(torch.nn.Module):
                def forward(self, h):
                    return h
            e = Empty()
            times, _ = timer.pipelined(lambda: e(x))
            run.write(kk, "-", times, f"one nn.Module call whose forward returns its input (the call machinery "
                      f"transformers pays per module); {note_base}")
    # the Python dispatch floors (not per batch)
    one = torch.ones(1, device=device, dtype=dtype)
    two = torch.ones(2, 2, device=device, dtype=dtype)
    for variant, fn, ref, what in [("py-add", lambda: one + one, lambda: one.double().cpu() * 2, "one-element add"),
                                   ("py-view", lambda: two.transpose(0, 1), lambda: two.double().cpu().T,
                                    "transpose of a tiny tensor: dispatch only")]:
        kk = ("floor", variant, "add1", "none", "decode", 1, 1, "", dt_name, label, "pipelined")
        if run.has(kk):
            continue
        case(kk, "-", fn, rel_err(fn(), ref()), f"{what} from Python")
    # the host's context factor from Python (opbench's floor `mixed` / `blocked`): the same
    # eight kinds of one-element call, switching kind on every call or in runs of a kind
    a1 = torch.full((1, 1), 1.5, device=device, dtype=dtype)
    b1 = torch.full((1, 1), 0.25, device=device, dtype=dtype)
    x8 = torch.randn(1, 8, device=device, dtype=dtype)
    w8 = (0.35 * torch.randn(8, 8)).to(device=device, dtype=dtype)
    kinds = [lambda a, b, x, w: a + b, lambda a, b, x, w: a * b, lambda a, b, x, w: -a,
             lambda a, b, x, w: torch.rsqrt(b), lambda a, b, x, w: F.silu(a),
             lambda a, b, x, w: torch.cat([a, b], 1), lambda a, b, x, w: x.mean(-1, keepdim=True),
             lambda a, b, x, w: F.linear(x, w)]
    args = (a1, b1, x8, w8)
    mix = [functools.partial(k, *args) for k in kinds]
    rounds = 64
    orders = {"py-mixed": [f for _ in range(rounds) for f in mix], "py-blocked": [f for f in mix for _ in range(rounds)]}

    def every(t):
        return torch.cat([k(*t).reshape(-1) for k in kinds])
    err = rel_err(every(args), every(tuple(t.double().cpu() for t in args)))
    for variant, calls in orders.items():
        kk = ("floor", variant, "add1", "none", "decode", 1, 1, "", dt_name, label, "pipelined")
        if run.has(kk):
            continue

        def unit(calls=calls):
            for f in calls:
                f()
        how = "switching kind on every call" if variant == "py-mixed" else f"{rounds} calls of a kind in a row"
        case(kk, "-", unit, err, f"{rounds} calls of each of 8 kinds of one-element call (add, mul, neg, rsqrt, "
             f"silu, cat, mean, linear) from Python per timed unit, {how}", calls_per=len(calls))
    say(f"rows written to {run.path}")


if __name__ == "__main__":
    main(sys.argv[1:])
