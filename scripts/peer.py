#!/usr/bin/env python3
"""The user's own stack, measured the way opbench measures its tch step: the Hugging Face
transformers Qwen3 decode step (eager, SDPA attention, DynamicCache), its Python-side op
calls, and the framework's own per-step work, written as rows into an opbench run directory.

    python3 scripts/peer.py RUN_DIR [--batches 1,8,64] [--ctx 1024] [--device cuda|cpu]

Needs torch (the Python opbench benchmarks against); transformers is optional: without it
the run gets the Python op rows only, and one line says what is missing. Weights are random
(the model file in shapes/ gives the real config); nothing is downloaded.

The peer computes no estimate and judges no error itself: it writes each case's raw samples
and its error against the float64 reference to RUN/peer.csv, and `opbench ingest RUN` makes
the rows by the same estimator and tolerance table as every other row. It times a case only
when its error is within that table (`opbench tolerances`). Its budget (samples, warm-up,
measurement per case) is the run's, from env.json, unless given.

Rows (docs/schema.md; every case checked against a float64 CPU reference first), each
sample with the host's state (a pure-Python control and the torch control before and after
it, CPU time, involuntary switches, steal: `State`):
- op `decode`, variant `transformers`, site `step`: one HF step pipelined (n steps back to
  back, argmax feeding the next, one synchronize), from a DynamicCache of L tokens (cropped
  back to L after every sample);
- sites `layers1`, `layers8`: the same step with only the first 1 or 8 decoder layers: their
  difference over 7 is one layer inside a step (its framework included), the rest the
  step's own work;
- sites `step`, `step_synced`, `step_as_generate`, `generate_from_l`, `generate_loop`,
  sampled in interleaved rounds (the three step sites back to back, then or before the two
  generate() sites back to back): the step above; the same synchronized after every step
  (as generate() is); that called with generate()'s inputs; `model.generate()` continuing
  from the same cache of L, per new token (32 new tokens on a GPU, 8 on the CPU; greedy);
  and generate()'s own loop alone (the same call, the model's forward replaced by a
  stand-in returning fixed logits). predict prices a token from them (analysis::generate);
- site `layer_beside` (2026-12-02): layer 0's calls written out flat, 8 per sample, timed
  right before every `step` sample of those rounds: the layer in the step's own host state
  (as the decode crate's `layer_beside`); predict's `controlled` host model prices the HF
  step at it, read pair by pair with the step samples;
- sites `step_static`, `generate_static_from_l`, `generate_graph_from_l` (in the same
  rounds, a block of their own): the step and generate() from a StaticCache of L, eager,
  and that generate() compiled into CUDA/HIP graphs (a GPU's; predict's graphs lever is
  checked against it); and the static cache's parts,
  `cache_update_static`, `mask_static`, `sdpa_static` (predict's "static cache alone");
- sites `generate`, `generate_static`, `generate_graph`: `model.generate()` per new token as
  the user calls it from a prompt of 16 (32 new tokens on a GPU, 8 on the CPU, prefill
  included), as it is, with a static cache, and with its step compiled into CUDA/HIP
  graphs (or `unsupported` and why);
- sites `module_call`, `mask`, `cache_update`: the framework's own work per call (an empty
  nn.Module's call, `create_causal_mask`, DynamicCache.update beyond its two `cat`s);
- sites `layer`, `layer_flat`, `layer_calls`, `stack`, `stack_flat`, per layer, sampled in
  interleaved rounds: one decoder layer called as the model calls it, its calls written out
  flat, the same calls each timed alone; every decoder layer called in turn as the model
  calls them, and their calls flat in turn (predict prices transformers' own code per layer
  as stack − stack_flat, and its calls' sequence from layer_flat and layer_calls);
- an MoE model (Qwen3-30B-A3B; `--dtype bf16`): sites `step` (transformers' default experts
  implementation, grouped_mm in 5.17) and `step_experts_eager` (its eager expert loop) only,
  checked through the first 2 layers against float64 routed as the device chose;
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


KEY = ["op", "variant", "site", "model", "phase", "batch", "q_len", "kv_len", "dtype", "device", "mode"]
PEER_COLUMNS = KEY + ["dims", "flops", "bytes", "check", "rel_err", "status", "note", "execution", "iters",
                      "total_ns"] + ["host_ns", "host_after_ns", "cpu_ns", "nivcsw", "steal", "slowest_ns",
                                     "control_ns", "control_after_ns", "typical_ns"]
STATE_COLUMNS = PEER_COLUMNS[-9:]
# a sample's calls are timed in up to this many stretches (Rust's rundir::STRETCHES), of
# which it keeps the slowest's and the median's time per call in these columns
STRETCHES = 32
STRETCH_COLUMNS = ("slowest_ns", "typical_ns")


def opbench_exe():
    """The opbench binary of this workspace (its newest build): ingest, tolerances, shapes."""
    ws = Path(os.environ.get("OPBENCH_WS") or ROOT)
    name = "opbench.exe" if os.name == "nt" else "opbench"
    found = [p for d in (ws, ROOT) for p in (d / "target" / "release" / name, d / "target" / "debug" / name)
             if p.is_file()]
    if not found:
        fail("opbench is not built: cargo build --release -p opbench (scripts/bench builds it)")
    return max(found, key=lambda p: p.stat().st_mtime)


def tolerances(exe):
    """{(dtype, check): largest relative error}: the one table, as `opbench tolerances` prints it."""
    out = subprocess.run([str(exe), "tolerances"], capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"{exe} tolerances: {out.stderr.strip() or out.returncode}")
    return {(r["dtype"], r["check"]): float(r["tolerance"]) for r in csv.DictReader(out.stdout.splitlines())}


def layout(exe):
    """The run directory's file names, as `opbench layout` prints them (the one description)."""
    out = subprocess.run([str(exe), "layout"], capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"{exe} layout: {out.stderr.strip() or out.returncode}")
    return json.loads(out.stdout)


class Run:
    """The run directory: its env.json and the cases it holds. The peer's samples go to
    RUN/peer.csv for `opbench ingest`, which writes the rows."""

    def __init__(self, path: Path, lay):
        self.path = path
        env = path / lay["env"]
        if not env.is_file():
            fail(f"{path}: not a run directory (no env.json); run scripts/bench first")
        self.env = json.loads(env.read_text())
        self.execution = str(self.env.get("settings", {}).get("execution", "1"))
        self.have = set()
        results = path / lay["results"]
        if results.is_file():
            with results.open() as f:
                self.have = {tuple(r[k] for k in KEY) for r in csv.DictReader(f)}
        self.peer = path / lay["peer"]
        if self.peer.is_file():
            with self.peer.open() as f:
                self.have |= {tuple(r[k] for k in KEY) for r in csv.DictReader(f)}
        else:
            with self.peer.open("w", newline="") as f:
                csv.writer(f).writerow(PEER_COLUMNS)

    def has(self, key):
        return tuple(str(v) for v in key) in self.have

    def write(self, key, dims, times_ns, note, flops=0, nbytes=0, rel_err=None, check=None, status="ok",
              iters=1):
        """One case: its per-call times (one per sample, `iters` calls each), its error
        against float64 and how it was checked (`op`, `step`, or None), as lines of peer.csv."""
        if self.has(key):
            return
        case = dict(zip(KEY, [str(v) for v in key]))
        case.update(dims=dims, flops=str(flops), bytes=str(nbytes), check=check or "",
                    rel_err="" if rel_err is None else f"{rel_err:.6e}", status=status, note=note,
                    execution=self.execution)
        timed = times_ns if status == "ok" else []
        with self.peer.open("a", newline="") as f:
            w = csv.writer(f)
            if not timed:
                w.writerow([case.get(c, "") for c in PEER_COLUMNS])
            for t in timed:
                line = dict(case, iters=str(iters), total_ns=f"{t * iters:.1f}")
                line.update({k: str(v) for k, v in getattr(t, "state", {}).items() if v is not None})
                w.writerow([line.get(c, "") for c in PEER_COLUMNS])
        self.have.add(tuple(str(v) for v in key))

    def ingest(self, exe):
        """`opbench ingest`: the rows, made by Rust's estimator and tolerance table."""
        out = subprocess.run([str(exe), "ingest", str(self.path)], capture_output=True, text=True)
        if out.returncode != 0:
            fail(f"opbench ingest: {out.stderr.strip()}", out.returncode)
        say(out.stdout.strip().removeprefix("opbench: "))


# ------------------------------------------------------------------ timing


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
    back to back for ~200 µs, synchronized at both ends, per call — as the Rust harness's
    `control_ns`. A torch call moves with the build, but a flag judges a sample within its
    case and execution, where it reads the host's state as the HF step's calls feel it."""

    # as the harness's control (timing::control_ns): calls in chunks of 16 for ~200 µs
    SPAN_NS = 200_000
    CHUNK = 16

    def __init__(self, device, dtype, sync):
        self.sync = sync
        self.a = torch.ones(1, device=device, dtype=dtype)
        self.b = torch.ones(1, device=device, dtype=dtype)

    def ns(self):
        a, b = self.a, self.b
        self.sync()
        t0 = time.perf_counter_ns()
        calls = 0
        while calls == 0 or time.perf_counter_ns() - t0 < self.SPAN_NS:
            for _ in range(self.CHUNK):
                torch.add(a, b)
            calls += self.CHUNK
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
    """The host's state over one sample, as samples.csv records it for the Rust cases: the
    Python control and the torch control (`TorchControl`) before and after it, the
    process's CPU time, its involuntary context switches, the steal ticks of the CPU the
    thread ran on (empty where the OS does not tell, or the thread moved) and the slowest
    and the median stretch of the sample's calls per call. The GPU's columns stay empty for the peer's
    rows (env.json has the GPU's state at the run's start and end)."""

    def __init__(self, control=None):
        self.control = control
        self.control_ns = control.ns() if control else None
        self.host_ns = host_control_ns()
        self.on = _this_cpu()
        self.cpu, self.sw, self.st = time.process_time_ns(), _nivcsw(), _steal(self.on)

    def close(self, paces=()):
        """The state over the sample, its calls' stretches `paces` (per call, ns) kept
        where there are at least 4."""
        # the steal of the CPU the sample began on, where the thread is still on it
        on = _this_cpu()
        cpu, sw, st = time.process_time_ns(), _nivcsw(), _steal(self.on)
        steal = None if st is None or self.st is None or on != self.on else st - self.st
        return {"host_ns": self.host_ns, "cpu_ns": cpu - self.cpu,
                "nivcsw": None if sw is None else sw - self.sw, "steal": steal,
                "host_after_ns": host_control_ns(), **stretches(paces),
                "control_ns": self.control_ns,
                "control_after_ns": self.control.ns() if self.control else None}


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
    def __init__(self, device, samples, warmup_s, measure_s, control_dtype=None):
        """`control_dtype`: time the torch control (`TorchControl`, in that dtype) around
        every sample."""
        self.device = device
        self.control = TorchControl(device, control_dtype, self.sync) if control_dtype else None
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
        """Per-call ns of n calls back to back, one synchronize, with the host's state: the
        calls run in up to STRETCHES stretches, the clock read between them, and the slowest
        and the median stretch's time per call are kept where there are at least 4 (as in
        Rust's harness)."""
        self.sync()
        state = State(self.control)
        per = max(1, -(-n // STRETCHES))
        paces, done = [], 0
        t0 = at = time.perf_counter_ns()
        while done < n:
            k = min(per, n - done)
            for _ in range(k):
                fn()
            if done + k == n:
                self.sync()  # the last stretch ends with the device: the stretches make up the whole
            now = time.perf_counter_ns()
            paces.append((now - at) / k)
            at, done = now, done + k
        ns = (at - t0) / n
        return Timed(ns, state.close(paces))


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


def opbench_shapes(exe, model, batch, ctx, dtype):
    """FLOPs and bytes per (op, site) from `opbench shapes` (the one place they are counted)."""
    out = subprocess.run([str(exe), "shapes", "--model", model, "--batch", str(batch), "--ctx", str(ctx),
                          "--dtype", dtype, "--format", "csv"], capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"opbench shapes: {out.stderr.strip()}")
    rows = list(csv.DictReader(out.stdout.splitlines()))
    return {(r["op"], r["site"]): (int(r["flops"]), int(r["bytes"]), r["dims"]) for r in rows}


# ------------------------------------------------------------------ the cases


class Ctx:
    """What every row family needs: the run, its budget and model, the device, the HF model
    (None without transformers) and transformers' helpers, and the tolerances to time by."""

    def key(self, op, variant, site, b, kv=""):
        return (op, variant, site, self.model_name, "decode", b, 1, kv, self.dt_name, self.label, "pipelined")

    def floor_key(self, variant):
        return ("floor", variant, "add1", "none", "decode", 1, 1, "", self.dt_name, self.label, "pipelined")

    def case(self, kk, dims, call, err, note, flops=0, nbytes=0, calls_per=1):
        """Time `call` pipelined, unless its error against float64 is over the op tolerance;
        `call` may make `calls_per` calls, and the row is per call."""
        if not err <= self.tol_op:
            self.run.write(kk, dims, [], f"relative error {err:.3e} against the float64 reference",
                           flops, nbytes, err, check="op", status="mismatch")
            return
        times, n = self.timer.pipelined(call)
        self.run.write(kk, dims, [t.scaled(1 / calls_per) for t in times], f"{note}; {self.note_base}", flops, nbytes, err,
                       check="op", iters=n * calls_per)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="the run directory (target/opbench/runs/RUN_ID)")
    ap.add_argument("--batches", help="decode batch sizes (default: the run's grid profile)")
    ap.add_argument("--ctx", type=int, help="cache length L (default: the grid's first decode_ctx)")
    ap.add_argument("--device", choices=["cuda", "cpu"], help="default: the GPU when torch sees one")
    ap.add_argument("--samples", type=int, help="samples per case (default: the run's)")
    ap.add_argument("--measure-ms", type=int, help="measurement per case (default: the run's)")
    ap.add_argument("--warmup-ms", type=int, help="warm-up per case (default: the run's)")
    ap.add_argument("--only", choices=["ops", "step"], help="only the op rows, or only the step rows")
    ap.add_argument("--dtype", choices=list(DTYPES), help="default: f16 on a GPU, f32 on the CPU (an MoE "
                    "model's grouped GEMMs take their fast kernel in bf16)")
    ap.add_argument("--user-generate", action=argparse.BooleanOptionalAction, default=True,
                    help="generate() from a prompt as it is, with a static cache and with graphs (default: on; "
                         "the graphed one compiles for ~1 min per batch)")
    return ap.parse_args(argv)


def setup(argv):
    """The run, its budget and grid, the device and the HF model with random weights."""
    a = parse_args(argv)
    c = Ctx()
    c.only = a.only
    c.user_generate = a.user_generate
    c.exe = opbench_exe()
    c.run = run = Run(a.run, layout(c.exe))
    settings = run.env.get("settings", {})

    def budget(given, name, default):
        try:
            return given if given is not None else int(settings.get(name, default))
        except ValueError:
            fail(f"{run.path}/env.json: settings.{name} = {settings[name]!r} is not a whole number")
    samples = budget(a.samples, "samples", 20)
    if samples < 3:
        fail("--samples: at least 3")
    c.model_name = (settings.get("models") or "qwen3-0.6b").split(",")[0]
    path = shapes_dir() / f"{c.model_name}.toml"
    if not path.is_file():
        say(f"{c.model_name} is not a model of shapes/ (a config.json?): scripts/peer.py builds the "
            "models of shapes/ only; no HF rows")
        sys.exit(0)
    c.cfg = cfg = load_toml(path)
    c.family = family = cfg.get("family", "qwen3_moe" if "num_experts" in cfg else "qwen3")
    if family not in FAMILIES:
        say(f"{c.model_name} is a {family} model: scripts/peer.py builds {', '.join(FAMILIES)} models "
            "(whose layer it writes out flat); no HF rows")
        sys.exit(0)
    c.qk_norm = family in ("qwen3", "qwen3_moe")
    c.moe = "num_experts" in cfg
    if c.moe:
        # the op, layer and generate rows are written for the dense MLP
        c.only, c.user_generate = "step", False
        say(f"{c.model_name} is a mixture-of-experts model: its HF step only (sites step and "
            "step_experts_eager), no op, layer or generate() rows")
    grid = load_toml(shapes_dir() / "grid.toml").get(settings.get("profile", "default"), {})
    try:
        c.batches = [int(b) for b in (a.batches.split(",") if a.batches else grid.get("batches", [1]))]
    except ValueError:
        fail(f"--batches: expected comma-separated whole numbers, got {a.batches}")
    if not c.batches or min(c.batches) < 1:
        fail("--batches: every batch must be at least 1")
    c.ctx = a.ctx if a.ctx is not None else (grid.get("decode_ctx") or [1024])[0]
    dev = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dev == "cuda" and not torch.cuda.is_available():
        fail("--device cuda: torch sees no GPU")
    c.device = torch.device(dev, 0) if dev == "cuda" else torch.device("cpu")
    c.label = "cpu" if dev == "cpu" else ("hip:0" if getattr(torch.version, "hip", None) else "cuda:0")
    c.dt_name = a.dtype or ("f16" if dev == "cuda" else "f32")
    c.dtype = DTYPES[c.dt_name]
    c.timer = Timer(c.device, samples, budget(a.warmup_ms, "warmup_ms", 100) / 1e3,
                    budget(a.measure_ms, "measure_ms", 400) / 1e3, c.dtype)
    tol = tolerances(c.exe)
    c.tol_op, c.tol_step = tol[(c.dt_name, "op")], tol[(c.dt_name, "step")]
    c.H, c.Hkv, c.D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    c.hidden, c.inter, c.vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    c.tf, c.model = load_model(c)
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
    # precision of cos/sin at long positions)
    model = AutoModelForCausalLM.from_config(hf_config(c, tf), torch_dtype=c.dtype).to(c.device).eval()
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
    its inputs from the environment `e` and leaving its output under its name."""
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


def layer_rows(c, b, kc, vc, x, pos):
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
    model, timer = c.model, c.timer
    lay = model.model.layers[0]
    prog, env, want = layer_env(c, b, x, pos, kc, vc)
    pe = env["pe"]
    # env keeps every call's output: each call alone reads its inputs from it
    got = run_program(prog, env)
    layers = list(model.model.layers)
    cache = c.tf.DynamicCache(config=model.config)
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
    progs = [layer_program(c, lay_, b) for lay_ in layers]

    def stack_flat():
        e = {"x": x, "pe": pe, "K": kc, "V": vc}
        for prog_ in progs:
            e["x"] = run_program(prog_, e)
        return e["x"]
    # the stack runs layer 0's code on every layer: the same calls, whose check is the
    # layer's; and the stack called as the model calls it against its calls flat
    err = max(rel_err(got, want), rel_err(layer_call(), want))
    stack_err = rel_err(stack(), stack_flat())
    sites = [(s_, c.key("decode", "transformers", s_, b, c.ctx + 1)) for s_ in LAYER_SITES]
    dims = f"batch={b} L={c.ctx}"
    if not stack_err <= c.tol_step:
        for _, kk in sites:
            c.run.write(kk, dims, [], f"the layers called as the model calls them are {stack_err:.3e} off their "
                        "calls written out flat", rel_err=max(err, stack_err), check="step", status="mismatch")
        return
    if not err <= c.tol_step:
        for _, kk in sites:
            c.run.write(kk, dims, [], "the decoder layer is off its float64 reference", rel_err=err, check="step",
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
                                      lambda: Timed.total([timer.sample(f, n) for f in leaves]),
                                      lambda: timer.sample(stack, passes).scaled(1 / len(layers)),
                                      lambda: timer.sample(stack_flat, passes).scaled(1 / len(layers))]))
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
        "layer": f"one {type(lay).__name__} called as the model calls it (kwargs, DynamicCache of L, reset after "
                 "each call)",
        "layer_flat": f"the same layer's {len(prog)} calls written out flat from Python (leaf modules and "
                      "functions, no wrappers, kwargs or cache object)",
        "layer_calls": f"the same {len(prog)} calls each timed alone, back to back, summed per round",
        "stack": f"the model's {nl} {type(lay).__name__}s called in turn as the model calls them (each from its own "
                 f"cache layer of L, reset after its call; layer 0's check covers their code; {passes} pass(es) "
                 "per sample)",
        "stack_flat": f"the same {nl} layers' calls written out flat, in turn ({passes} pass(es) per sample)",
    }
    for s_, kk in sites:
        iters = passes * nl if s_.startswith("stack") else n
        c.run.write(kk, dims, res[s_], f"{what[s_]}; per layer; {rounds} rounds of the five interleaved, {n} "
                    f"calls per sample of the one layer; {c.version}{c.note_base}", rel_err=err, check="step",
                    iters=iters)


# ------------------------------------------------------------------ the HF step and generate()


def step_check(c):
    """The HF step's error: the model against a float64 CPU copy of itself at context 16."""
    if c.model is None or c.only == "ops":
        return None
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
    if not err <= c.tol_step:
        fail(f"the HF step's logits are {err:.3e} off the float64 reference (tolerance {c.tol_step})", 1)
    return err


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
    err = rel_err(got, want)
    if not err <= c.tol_step:
        fail(f"the HF MoE step's logits are {err:.3e} off the float64 reference (tolerance {c.tol_step})", 1)
    return err


def moe_step_rows(c, b, step_err):
    """Sites `step` (transformers' default experts implementation) and `step_experts_eager`
    (its eager loop, `experts_implementation="eager"`): the whole MoE step pipelined from a
    DynamicCache of L, as step_times times the dense model's layer counts."""
    dims = f"batch={b} L={c.ctx}"
    default = c.model.config._experts_implementation
    layers = c.cfg["num_hidden_layers"]
    for site, impl in (("step", default), ("step_experts_eager", "eager")):
        k = c.key("decode", "transformers", site, b, c.ctx + 1)
        if c.run.has(k):
            continue
        say(f"B={b}: the HF MoE step, experts implementation {impl}")
        c.model.set_experts_implementation(impl)
        try:
            times, n = step_times(c, b, layers)
        finally:
            c.model.set_experts_implementation(default)
        c.run.write(k, dims, times,
                    f"HF transformers MoE step: eager, sdpa, DynamicCache, experts implementation `{impl}`; "
                    f"{n} steps per sample from L (cropped back after each), pipelined; checked against float64 "
                    f"through its first {MOE_CHECK_LAYERS} layers at context 16, routed as the device chose; "
                    f"{c.version}{c.note_base}", rel_err=step_err, check="step", iters=n)


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


def step_times(c, b, layers):
    """The HF step with the model's first `layers` decoder layers, pipelined from a cache of
    L (cropped back before every sample): the model file runs layers[:num_hidden_layers],
    and the cache keeps that many."""
    model, ctx, device = c.model, c.ctx, c.device
    full = model.config.num_hidden_layers
    model.config.num_hidden_layers = layers
    try:
        cache = c.tf.DynamicCache(config=model.config)
        cache.layers = cache.layers[:layers]
        ids = torch.randint(0, c.vocab, (b, ctx), device=device)
        model(ids, past_key_values=cache, use_cache=True)
        state = {"tok": torch.randint(0, c.vocab, (b, 1), device=device)}

        def step():
            out = model(input_ids=state["tok"], past_key_values=cache, use_cache=True)
            state["tok"] = out.logits[:, -1:].argmax(-1)

        crop = cropper(cache, ctx)
        times, n = c.timer.pipelined(step, before=crop, max_calls=16)
        crop()
        return times, n
    finally:
        model.config.num_hidden_layers = full


# config.json's eos_token_id of the Qwen3 chat models: generate() masks and checks it every
# token as the user's does (min_new_tokens keeps random weights from stopping early)
QWEN3_EOS = 151645


def eos_of(c):
    """The eos token generate() masks and checks: Qwen3's, or the last id of a smaller
    vocabulary (a test's, or another family's)."""
    return QWEN3_EOS if QWEN3_EOS < c.vocab else c.vocab - 1


def new_tokens(c):
    """New tokens per generate() call: 32 on a GPU, 8 on the CPU (whose step is ~100× slower)."""
    return 32 if c.device.type == "cuda" else 8


GENERATE_SITES = ("step", "step_synced", "step_as_generate", "generate_from_l", "generate_loop")


def generate_keys(c, b):
    """The keys of step_and_generate's five sites at batch `b`."""
    return {s_: c.key("decode", "transformers", s_, b, c.ctx + 1) for s_ in GENERATE_SITES}


def step_and_generate(c, b, step_err):
    """The HF step and generate() taken apart, five sites sampled in interleaved rounds so
    that all see the same host states, each from a DynamicCache of L cropped back before
    every sample. In a round the three step sites run back to back (in a shuffled order),
    as do the two generate() sites, the two blocks in a shuffled order: predict reads the
    step sites' differences pair by pair, and samples seconds apart saw different states
    (2026-12-02: the step and the synced step one generate() call apart differed by −13 to
    +10 ms within an execution whose true difference is ~0):
    - step: the HF step pipelined (n steps, argmax feeding the next, one synchronize);
    - step_synced: the same with a synchronize after every step, as generate() has: its
      StopCheck reads `unfinished.max() == 0` on the host every token (transformers 5.17
      defers it only on MPS), so the host cannot run ahead of the device;
    - step_as_generate: the synced step called with the inputs generate() passes (the 2-D
      attention mask, position ids, logits_to_keep, return_dict), as views of tensors made
      once: what the model's forward costs more as generate() calls it;
    - generate_from_l: model.generate() continuing from the cache (the prompt's last token
      uncached), greedy, per new token;
    - generate_loop: the same generate() call with the model's forward replaced by a
      stand-in that returns fixed logits: generate()'s own work per token (input
      preparation, cache positions, logits to float32, argmax, the eos masking, the stopping
      criteria, the per-token synchronization against an idle device).
    The check: generate()'s logits for its first new token against the checked step's from
    the same cache (the step tolerance). And `layer_beside`: layer 0's calls written out flat
    (as `layer_flat`) timed right before every `step` sample, outside it: the layer in the
    step's own host state, as the decode crate's `layer_beside` for the tch steps; checked
    against its float64 program. `predict --host-model controlled` prices the HF step at it,
    read against each step sample of its round (docs/findings.md 11)."""
    model, ctx, device, tf = c.model, c.ctx, c.device, c.tf
    cache = tf.DynamicCache(config=model.config)
    ids = torch.randint(1, c.vocab, (b, ctx + 1), device=device)
    model(ids[:, :ctx], past_key_values=cache, use_cache=True)
    crop = cropper(cache, ctx)
    new = new_tokens(c)
    tok = {"t": ids[:, ctx:]}

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
    eos = eos_of(c)
    gen = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0, eos_token_id=eos,
               past_key_values=cache)
    logits = torch.zeros(b, 1, c.vocab, device=device, dtype=c.dtype)
    real = model.forward

    @functools.wraps(real)
    def standin(*_, **kw):
        return tf.CausalLMOutputWithPast(logits=logits, past_key_values=kw.get("past_key_values"))

    def generate(**extra):
        return model.generate(ids, **gen, **extra)

    def stubbed(fn):
        """`fn` with the model's forward replaced by the stand-in."""
        model.forward = standin
        try:
            return fn()
        finally:
            del model.forward

    def timed_generate():
        """generate() per new token, the cache cropped back outside the timed call as before
        every step sample."""
        crop()
        return c.timer.sample(generate, 1).scaled(1 / new)

    def clocked_generate():
        """timed_generate with its stretches per token: the clock read as each forward
        starts (a token's forward and generate()'s loop after it): one Python call and one
        clock read more a token, against a token of ~20 ms on the H200 (not measured apart)."""
        ticks, real_forward = [], model.forward

        @functools.wraps(real_forward)
        def forward(*a, **kw):
            ticks.append(time.perf_counter_ns())
            return real_forward(*a, **kw)
        model.forward = forward
        try:
            t = timed_generate()
        finally:
            del model.forward
        return t.with_stretches([b_ - a_ for a_, b_ in zip(ticks, ticks[1:])])
    crop()
    want = model(input_ids=ids[:, ctx:], past_key_values=cache, use_cache=True).logits[:, -1]
    crop()
    got = generate(output_logits=True, return_dict_in_generate=True).logits[0]
    err = max(step_err or 0.0, rel_err(got, want))
    crop()
    stubbed(generate)
    dims = f"batch={b} L={c.ctx}"
    keys = generate_keys(c, b)
    if not err <= c.tol_step:
        for s_, kk in keys.items():
            c.run.write(kk, dims, [], f"generate()'s logits for its first token are {err:.3e} off the checked "
                        "step's from the same cache", rel_err=err, check="step", status="mismatch")
        return
    # steps per step sample: about measure_s / samples, at most 16
    crop()
    c.timer.sync()
    t0 = time.perf_counter()
    for _ in range(3):
        step()
    c.timer.sync()
    per = max((time.perf_counter() - t0) / 3, 1e-7)
    n = max(1, min(16, int(c.timer.measure_s / c.timer.samples / per)))
    # the layer beside the step: timed before each step sample where it passed its check
    flat, beside_err = layer_beside(c, b)
    beside = []

    def before_step():
        if beside_err <= c.tol_step:
            beside.append(c.timer.sample(flat, BESIDE_LAYERS))
        crop()
    samplers = {"step": lambda: (before_step(), c.timer.sample(step, n))[1],
                "step_synced": lambda: (crop(), c.timer.sample(step_synced, n))[1],
                "step_as_generate": lambda: (crop(), c.timer.sample(step_as_generate, n))[1],
                "generate_from_l": clocked_generate,
                "generate_loop": lambda: stubbed(timed_generate)}
    # the step sites, the generate() sites, and a static cache's step and generate() (the
    # user's other choice: its ratio to the step is read within these rounds)
    blocks = [list(GENERATE_SITES[:3]), list(GENERATE_SITES[3:])]
    static, write_static = static_samplers(c, b, step_err, n) if c.user_generate else ({}, None)
    if static:
        samplers.update(static)
        blocks.append(list(static))
    for f in samplers.values():  # one of each first: allocations and caches warm
        f()
    beside.clear()
    res = {s_: [] for s_ in samplers}
    rng = random.Random(b)
    rounds = max(8, c.timer.samples // 2)
    for _ in range(rounds):
        for block in blocks:
            rng.shuffle(block)
        rng.shuffle(blocks)
        for which in [s_ for block in blocks for s_ in block]:
            res[which].append(samplers[which]())
    crop()
    write_generate_rows(c, b, res, err, (n, new, rounds), beside, beside_err)
    if write_static:
        write_static(res, rounds)


def write_generate_rows(c, b, res, err, counts, beside, beside_err):
    """step_and_generate's rows: the five sites' samples `res` (checked to `err`), with
    `counts` = (steps per step sample, new tokens per generate() call, rounds), and the
    layer beside's samples (checked to `beside_err`)."""
    n, new, rounds = counts
    dims = f"batch={b} L={c.ctx}"
    keys = generate_keys(c, b)
    base = (f"{rounds} rounds of the five generate() sites interleaved (the three step sites back to back, "
            f"the two generate() sites back to back); {c.version}{c.note_base}")
    tps = b * 1e9 / statistics.median(res["generate_from_l"])
    what = {
        "step": f"HF transformers step: eager, sdpa, DynamicCache; {n} steps per sample from L (cropped back after "
                "each), pipelined; checked against float64 at context 16",
        "step_synced": f"the HF step with a synchronize after each, as generate() has every token; {n} per sample",
        "step_as_generate": f"the synced HF step called with generate()'s inputs (2-D attention mask, position ids, "
                            f"logits_to_keep, return_dict); {n} per sample",
        "generate_from_l": f"model.generate() from the step's cache of L, greedy, {new} new tokens per call (the "
                           f"first over the prompt's one uncached token), per new token: {tps:.1f} tokens/s; its "
                           "first token's logits checked against the step's; timed per token (the clock read as "
                           "each forward starts: slowest_ns and typical_ns per token)",
        "generate_loop": "generate()'s own work per new token: the same call with the model's forward replaced by a "
                         "stand-in returning fixed logits (its loop, logits processing, eos masking, stopping "
                         "criteria and per-token synchronization)",
    }
    for s_, kk in keys.items():
        calls = n if s_.startswith("step") else new
        checked = s_ != "generate_loop"
        c.run.write(kk, dims if s_.startswith("step") else f"{dims} new={new}", res[s_], f"{what[s_]}; {base}",
                    rel_err=err if checked else None, check="step" if checked else None, iters=calls)
    kk = c.key("decode", "transformers", "layer_beside", b, c.ctx + 1)
    note = (f"layer 0's calls written out flat (as layer_flat), {BESIDE_LAYERS} per sample, timed right before "
            f"every step sample: the layer in the step's host state; per layer; {c.version}{c.note_base}")
    if not beside_err <= c.tol_step:
        c.run.write(kk, dims, [], "the decoder layer is off its float64 reference", rel_err=beside_err,
                    check="step", status="mismatch")
    else:
        c.run.write(kk, dims, beside, note, rel_err=beside_err, check="step", iters=BESIDE_LAYERS)


# layers per layer_beside sample (as the decode crate's LAYER_REPEATS)
BESIDE_LAYERS = 8


def layer_beside(c, b):
    """(layer 0's calls flat, its error against the float64 program) at batch `b` from a
    cache of L."""
    dev, dt = c.device, c.dtype
    x = torch.randn(b, 1, c.hidden, device=dev, dtype=dt)
    pos = torch.full((b, 1), c.ctx, device=dev, dtype=torch.long)
    kc, vc = (torch.randn(b, c.Hkv, c.ctx, c.D, device=dev, dtype=dt) for _ in range(2))
    prog, env, want = layer_env(c, b, x, pos, kc, vc)
    err = rel_err(run_program(prog, dict(env)), want)
    return functools.partial(run_program, prog, dict(env)), err


def step_rows(c, b, step_err):
    """Sites `step`, `generate_from_l`, `generate_loop` (step_and_generate), `layers1`,
    `layers8` (the step with its first 1 and 8 decoder layers: their difference over 7 is
    one layer inside a step, the rest the step's own work) and generate() as the user calls
    it from a prompt, three ways (generate_variants)."""
    if not c.run.has(c.key("decode", "transformers", "step", b, c.ctx + 1)):
        say(f"B={b}: HF step and generate() from a DynamicCache of {c.ctx}, five ways interleaved")
        step_and_generate(c, b, step_err)
    dims = f"batch={b} L={c.ctx}"
    for layers in (1, min(8, c.cfg["num_hidden_layers"])):
        k = c.key("decode", "transformers", f"layers{layers}", b, c.ctx + 1)
        if not c.run.has(k):
            times, n = step_times(c, b, layers)
            c.run.write(k, f"{dims} layers={layers}", times,
                        f"the HF step with its first {layers} decoder layer(s) only (the rest as the full step, "
                        f"whose check covers this code); {n} steps per sample from L; {c.note_base}",
                        rel_err=step_err, check="step", iters=n)
    for site, how, extra in generate_variants(c) if c.user_generate else []:
        k = c.key("decode", "transformers", site, b, 16 + new_tokens(c))
        if not c.run.has(k):
            generate_row(c, b, k, how, extra)


def generate_variants(c):
    """(site, what, generate() kwargs or the reason it cannot run): the user's generate()
    as it is, and the two things the user can change: a static cache (no compile), and a
    static cache whose decoding step torch.compile captures in CUDA/HIP graphs
    (mode="reduce-overhead")."""
    out = [("generate", "model.generate() (DynamicCache, eager)", {})]
    static = {"cache_implementation": "static", "disable_compile": True}
    out.append(("generate_static", "model.generate() with a static cache, eager", static))
    graph = graphed(c)
    if not isinstance(graph, str):
        graph = dict(graph, cache_implementation="static")
    out.append(("generate_graph", "model.generate() with a static cache and its step compiled "
                "(torch.compile reduce-overhead: CUDA/HIP graphs)", graph))
    return out


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


def generate_row(c, b, k, how, extra):
    """generate() per new token as the user sees it (greedy, prompt 16, new_tokens(c) new
    tokens, prefill included), or `unsupported` with the reason where this build cannot
    run it."""
    new = new_tokens(c)
    dims = f"batch={b} prompt=16 new={new}"
    if isinstance(extra, str):
        c.run.write(k, dims, [], extra, status="unsupported")
        return
    prompt = torch.randint(0, c.vocab, (b, 16), device=c.device)
    gen = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0, **extra)
    try:
        # the first calls build (and, compiled, capture) what the timed ones reuse
        for _ in range(2 if extra else 1):
            c.model.generate(prompt, **gen)
        # a GPU's call takes ~0.2–1.5 s: half the run's samples (3 of the graphed one
        # spread 5.4–7.0 ms a token at B = 8, H200 2026-12-03); a CPU's ~20 s: a third
        n = max(3, c.timer.samples // 3) if c.device.type == "cpu" else max(5, c.timer.samples // 2)
        times = [c.timer.sample(lambda: c.model.generate(prompt, **gen), 1).scaled(1 / new) for _ in range(n)]
    except Exception as e:  # a build without the feature: a row that says so, not a crash
        c.run.write(k, dims, [], f"{how}: {type(e).__name__}: {str(e).splitlines()[0][:200]}",
                    status="unsupported")
        return
    tps = b * 1e9 / statistics.median(times)
    c.run.write(k, dims, times, f"{how}: {tps:.1f} tokens/s as the user sees it (greedy, prompt 16, {new} new "
                f"tokens, prefill included); per new token; {c.version}{c.note_base}", iters=new)


# ------------------------------------------------------------------ the op sites from Python


def linear_rows(c, b, work):
    """`linear/py-aten`: the model's nn.Linear at each projection site."""
    layer = c.model.model.layers[0] if c.model is not None else None
    H, Hkv, D, hidden = c.H, c.Hkv, c.D, c.hidden
    sites = [("q_proj", H * D, hidden), ("k_proj", Hkv * D, hidden), ("v_proj", Hkv * D, hidden),
             ("o_proj", hidden, H * D), ("gate_proj", c.inter, hidden), ("up_proj", c.inter, hidden),
             ("down_proj", hidden, c.inter), ("lm_head", c.vocab, hidden)]
    for site, n, k_ in sites:
        kk = c.key("linear", "py-aten", site, b)
        if c.run.has(kk):
            continue
        m = None
        if layer is not None:
            m = getattr(layer.self_attn, site, None)
            if m is None:
                m = getattr(layer.mlp, site, None)
        if site == "lm_head" and c.model is not None:
            m = c.model.lm_head
        if m is None:
            m = torch.nn.Linear(k_, n, bias=False).to(device=c.device, dtype=c.dtype)
        xin = torch.randn(b, 1, k_, device=c.device, dtype=c.dtype)
        out = m(xin)
        rows, cols = min(b, 64), min(n, 4096)
        ref = xin[:rows, 0].double().cpu() @ m.weight[:cols].double().cpu().T
        err = rel_err(out[:rows, 0, :cols], ref)
        f, nb, d = work("linear", site)
        c.case(kk, d, lambda: m(xin), err, f"{type(m).__name__} called from Python, as transformers calls it", f,
               nb)


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


def rmsnorm_rows(c, b, work):
    """`rmsnorm/py-hf`: the model's RMSNorm (Qwen3RMSNorm, LlamaRMSNorm, ...) at each norm
    site (q_norm and k_norm where the family has qk-norm)."""
    eps = c.cfg["rms_norm_eps"]
    heads = [("q_norm", (b, 1, c.H, c.D)), ("k_norm", (b, 1, c.Hkv, c.D))] if c.qk_norm else []
    for site, shape in [("input_norm", (b, 1, c.hidden)), ("post_norm", (b, 1, c.hidden)),
                        ("final_norm", (b, 1, c.hidden)), *heads]:
        kk = c.key("rmsnorm", "py-hf", site, b)
        if c.run.has(kk):
            continue
        m = norm_module(c, shape[-1])
        xin = torch.randn(*shape, device=c.device, dtype=c.dtype)
        h = xin.double().cpu()
        ref = m.weight.double().cpu() * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps))
        err = rel_err(m(xin), ref)
        f, nb, d = work("rmsnorm", site)
        c.case(kk, d, lambda: m(xin), err, f"{type(m).__name__} called from Python", f, nb)


def rope_rows(c, b, x, pos, work):
    """`rope/py-rotate_half` (q·cos + rotate_half(q)·sin) and `rope/py-hf` (the rotary
    embedding module)."""
    D = c.D

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
    for site, heads in [("q", c.H), ("k", c.Hkv)]:
        kk = c.key("rope", "py-rotate_half", site, b)
        if c.run.has(kk):
            continue
        t = torch.randn(b, heads, 1, D, device=c.device, dtype=c.dtype)
        out = t * cos1 + rot(t) * sin1
        td, co, si = t.double().cpu(), cos1.double().cpu(), sin1.double().cpu()
        err = rel_err(out, td * co + torch.cat((-td[..., D // 2:], td[..., :D // 2]), -1) * si)
        f, nb, d = work("rope", site)
        c.case(kk, d, lambda: t * cos1 + rot(t) * sin1, err,
               "q·cos + rotate_half(q)·sin from Python (apply_rotary_pos_emb's per-tensor work)", f, nb)
    kk = c.key("rope", "py-hf", "cache", b)
    if c.model is not None and not c.run.has(kk):
        re = c.model.model.rotary_emb
        co, si = re(x, pos)
        inv = 1.0 / (c.cfg["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
        fr = pos.cpu()[..., None].double() * inv
        emb = torch.cat((fr, fr), dim=-1)
        err = rel_err(torch.cat((co, si), -1), torch.cat((emb.cos(), emb.sin()), -1))
        f, nb, d = work("rope", "cache")
        c.case(kk, d, lambda: re(x, pos), err, "the rotary embedding module (cos, sin for the step's positions)",
               f, nb)


def attention_rows(c, b, t, work):
    """`sdpa/py-auto` (transformers' sdpa_attention_forward over the cache) and
    `kvcache/py-cat` (the cache append); `t` holds the step's q, cache and new keys/values."""
    H, Hkv, D = c.H, c.Hkv, c.D
    q, kc, vc, kn, vn, kf, vf = t["q"], t["kc"], t["vc"], t["kn"], t["vn"], t["kf"], t["vf"]
    kk = c.key("sdpa", "py-auto", "attn", b, c.ctx + 1)
    if not c.run.has(kk):
        if c.model is not None:
            attn_mod = c.model.model.layers[0].self_attn
            call = lambda: c.tf.sdpa_attention_forward(attn_mod, q, kf, vf, None, dropout=0.0,  # noqa: E731
                                                       scaling=D ** -0.5)[0]
            how = "transformers' sdpa_attention_forward"
        else:
            call = lambda: F.scaled_dot_product_attention(q, kf, vf, enable_gqa=True)  # noqa: E731
            how = "F.scaled_dot_product_attention(enable_gqa=True)"
        out = call()
        q0 = q[:1].double().cpu()
        k0 = kf[:1].double().cpu().repeat_interleave(H // Hkv, 1)
        v0 = vf[:1].double().cpu().repeat_interleave(H // Hkv, 1)
        ref = torch.softmax(q0 @ k0.transpose(-1, -2) / math.sqrt(D), -1) @ v0
        got = out[:1] if out.shape[1] == H else out[:1].transpose(1, 2)
        err = rel_err(got, ref)
        f, nb, d = work("sdpa", "attn")
        c.case(kk, d, call, err, f"{how} from Python", f, nb)
    for site, cache_t, new in [("k", kc, kn), ("v", vc, vn)]:
        kk = c.key("kvcache", "py-cat", site, b, c.ctx + 1)
        if c.run.has(kk):
            continue
        out = torch.cat([cache_t, new], dim=-2)
        err = rel_err(out[:1], torch.cat([cache_t[:1].double().cpu(), new[:1].double().cpu()], -2))
        f, nb, d = work("kvcache", site)
        c.case(kk, d, lambda: torch.cat([cache_t, new], dim=-2), err,
               "torch.cat from Python (DynamicLayer.update's append)", f, nb)


def eltwise_rows(c, b, work):
    """`eltwise/py-aten`: the element-wise calls between the ops (residual adds, the MLP's
    act_fn and product, the attention output's transpose(1, 2).contiguous(), the embedding
    and the greedy argmax)."""
    dev, dt = c.device, c.dtype
    act = c.model.model.layers[0].mlp.act_fn if c.model is not None else F.silu
    hs_a = torch.randn(b, 1, c.hidden, device=dev, dtype=dt)
    hs_b = torch.randn(b, 1, c.hidden, device=dev, dtype=dt)
    gate = torch.randn(b, 1, c.inter, device=dev, dtype=dt)
    up = torch.randn(b, 1, c.inter, device=dev, dtype=dt)
    silu_out = act(gate)
    attn_o = torch.randn(b, c.H, 1, c.D, device=dev, dtype=dt)
    sig = lambda t: t * torch.sigmoid(t)  # noqa: E731
    emb = (c.model.model.embed_tokens if c.model is not None
           else torch.nn.Embedding(c.vocab, c.hidden).to(dev, dt))
    tok_ids = torch.randint(0, c.vocab, (b, 1), device=dev)
    logits = torch.randn(b, 1, c.vocab, device=dev, dtype=dt)
    logits[torch.arange(b), 0, torch.randint(0, c.vocab, (b,))] = 100.0  # a clear winner per row
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
        kk = c.key("eltwise", "py-aten", site, b)
        if c.run.has(kk):
            continue
        err = rel_err(call(), ref_of())
        f, nb, d = work("eltwise", site)
        c.case(kk, d, call, err, how, f, nb)


# ------------------------------------------------------------------ the framework's own work


def framework_rows(c, b, t, x, pos):
    """Sites `cache_update` (DynamicCache.update beyond its two cats), `mask`
    (create_causal_mask per step) and the decoder-layer rows ([`layer_rows`])."""
    model, ctx, dims = c.model, c.ctx, f"batch={b} L={c.ctx}"
    kc, vc, kn, vn = t["kc"], t["vc"], t["kn"], t["vn"]
    kk = c.key("decode", "transformers", "cache_update", b, ctx + 1)
    if not c.run.has(kk):
        cache = c.tf.DynamicCache(config=model.config)
        cache.update(kc, vc, 0)
        lay = cache.layers[0]
        k0, v0 = lay.keys, lay.values

        def upd():
            cache.update(kn, vn, 0)
            lay.keys, lay.values = k0, v0

        upd_t, _ = c.timer.pipelined(upd)
        cat_t, _ = c.timer.pipelined(lambda: torch.cat([kc, kn], dim=-2))
        # a difference of two timings: no one state of the host to record beside it
        extra = [max(u - 2 * statistics.median(cat_t), 1.0) for u in upd_t]
        c.run.write(kk, dims, extra, "DynamicCache.update(k, v, layer) beyond its two torch.cat appends (per layer; "
                    "timed beside one cat, difference per sample, floored at 1 ns); "
                    f"{c.version}{c.note_base}")
    kk = c.key("decode", "transformers", "mask", b, ctx + 1)
    if not c.run.has(kk):
        cache = c.tf.DynamicCache(config=model.config)
        for i in range(c.cfg["num_hidden_layers"]):
            cache.update(kc, vc, i)
        emb = torch.randn(b, 1, c.hidden, device=c.device, dtype=c.dtype)
        mpos = torch.full((1, 1), ctx, device=c.device, dtype=torch.long)

        def mask():
            return c.tf.create_causal_mask(config=model.config, inputs_embeds=emb, attention_mask=None,
                                           past_key_values=cache, position_ids=mpos)
        got = mask()
        times, _ = c.timer.pipelined(mask)
        returned = "None: SDPA needs no mask" if got is None else tuple(got.shape)
        c.run.write(kk, dims, times, f"create_causal_mask per step (returned {returned}); {c.version}{c.note_base}")
    # one decoder layer: called as the model calls it, its calls written out flat, and the
    # same calls each timed alone, in interleaved rounds of one process
    if not all(c.run.has(c.key("decode", "transformers", s_, b, ctx + 1)) for s_ in LAYER_SITES):
        layer_rows(c, b, kc, vc, x, pos)


STATIC_PARTS = ("cache_update_static", "mask_static", "sdpa_static")
STATIC_WHOLE = ("step_static", "generate_static_from_l", "generate_graph_from_l")


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


def static_rows(c, b, t):
    """A static cache without compile (`cache_implementation="static"`), its parts, from a
    cache of L (max_cache_len L + 2·new); its whole is sampled in the step's rounds
    (static_samplers):
    - `cache_update_static`: StaticCache.update per layer (its position arithmetic and two
      index_copy_ writes), in place of DynamicCache's two cats;
    - `mask_static`: create_causal_mask per step with the static cache (a mask over
      max_cache_len: SDPA must skip the empty slots);
    - `sdpa_static`: transformers' sdpa_attention_forward per layer over the static
      cache's keys with that mask, checked against float64 attention over the L + 1 filled;
    predict's "static cache alone" swaps the parts into the step and is checked against
    `generate_static_from_l`."""
    if all(c.run.has(c.key("decode", "transformers", s_, b, c.ctx + 1)) for s_ in STATIC_PARTS):
        return
    try:
        static_parts(c, b, t)
    except (AttributeError, TypeError) as e:  # a transformers without StaticCache's layers as 5.x has them
        for s_ in STATIC_PARTS:
            kk = c.key("decode", "transformers", s_, b, c.ctx + 1)
            if not c.run.has(kk):
                c.run.write(kk, f"batch={b} L={c.ctx}", [], f"the static cache's layers are not as transformers "
                            f"5.17 has them ({type(e).__name__}: {str(e)[:120]}); {c.version}", status="unsupported")


def static_parts(c, b, t):
    """static_rows' three parts, each pipelined."""
    dims, ctx, new = f"batch={b} L={c.ctx}", c.ctx, new_tokens(c)
    note = f"max_cache_len L + {2 * new}; {c.version}{c.note_base}"
    cache, _, reset = static_cache(c, b, ctx)
    lay0 = cache.layers[0]
    kk = c.key("decode", "transformers", "cache_update_static", b, ctx + 1)
    if not c.run.has(kk):
        # layer 0 advances one position a call from L, set back every `new` calls (warm-up included)
        calls = [0]

        def upd():
            calls[0] += 1
            if calls[0] % new == 0:
                lay0.cumulative_length.fill_(ctx)
            return cache.update(t["kn"], t["vn"], 0)
        times, _ = c.timer.pipelined(upd)
        c.run.write(kk, dims, times, f"StaticCache.update(k, v, layer) per layer (position arithmetic and two "
                    f"index_copy_; one fill_ every {new} calls sets it back to L); {note}")
    reset()  # L filled: the mask is made before the layers write the new token
    emb = torch.randn(b, 1, c.hidden, device=c.device, dtype=c.dtype)
    mpos = torch.full((1, 1), ctx, device=c.device, dtype=torch.long)

    def mask():
        return c.tf.create_causal_mask(config=c.model.config, inputs_embeds=emb, attention_mask=None,
                                       past_key_values=cache, position_ids=mpos)
    got = mask()
    kk = c.key("decode", "transformers", "mask_static", b, ctx + 1)
    if not c.run.has(kk):
        times, _ = c.timer.pipelined(mask)
        shape = "None" if got is None else tuple(got.shape)
        c.run.write(kk, dims, times, f"create_causal_mask per step with the static cache (returned {shape}); {note}")
    cache.update(t["kn"], t["vn"], 0)  # L + 1 filled, as the attention of the step at L sees them
    kk = c.key("decode", "transformers", "sdpa_static", b, ctx + 1)
    if not c.run.has(kk):
        attn_mod, q = c.model.model.layers[0].self_attn, t["q"]

        def call():
            return c.tf.sdpa_attention_forward(attn_mod, q, lay0.keys, lay0.values, got, dropout=0.0,
                                               scaling=c.D ** -0.5)[0]
        g = c.H // c.Hkv
        k0 = lay0.keys[:1, :, :ctx + 1].double().cpu().repeat_interleave(g, 1)
        v0 = lay0.values[:1, :, :ctx + 1].double().cpu().repeat_interleave(g, 1)
        ref = torch.softmax(q[:1].double().cpu() @ k0.transpose(-1, -2) / math.sqrt(c.D), -1) @ v0
        out = call()
        err = rel_err(out[:1] if out.shape[1] == c.H else out[:1].transpose(1, 2), ref)
        c.case(kk, dims, call, err, f"transformers' sdpa_attention_forward over the static cache's keys with its "
               f"mask, per layer ({note})")


def static_samplers(c, b, step_err, n):
    """The static cache's whole, for step_and_generate's rounds: `step_static` (the HF step
    from a StaticCache of L, eager, `n` steps a sample, reset to L before each) and
    `generate_static_from_l` (generate() continuing from it, disable_compile, per new
    token), checked against the dynamic step's logits; on a GPU `generate_graph_from_l`
    too (graph_sampler: the same generate() compiled into CUDA/HIP graphs, the
    counterpart of predict's graphs lever at the step's L). Returns the samplers and what writes
    their rows from the rounds' samples; ({}, None) where their rows are there, where the
    check failed (the rows say so) or where this transformers lacks the static cache."""
    keys = {s_: c.key("decode", "transformers", s_, b, c.ctx + 1) for s_ in STATIC_WHOLE}
    if all(c.run.has(kk) for kk in keys.values()):
        return {}, None
    dims, ctx, new = f"batch={b} L={c.ctx}", c.ctx, new_tokens(c)
    try:
        cache, ids, reset = static_cache(c, b, ctx)
    except (AttributeError, TypeError) as e:
        for kk in keys.values():
            c.run.write(kk, dims, [], f"the static cache's layers are not as transformers 5.17 has them "
                        f"({type(e).__name__}: {str(e)[:120]}); {c.version}", status="unsupported")
        return {}, None
    model, tok = c.model, {"t": ids[:, ctx:]}

    def step():
        out = model(input_ids=tok["t"], past_key_values=cache, use_cache=True)
        tok["t"] = out.logits[:, -1:].argmax(-1)
    eos = eos_of(c)
    gen = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0, eos_token_id=eos,
               past_key_values=cache, disable_compile=True)
    reset()
    want = model(input_ids=ids[:, ctx:], past_key_values=cache, use_cache=True).logits[:, -1]
    reset()
    got = model.generate(ids, output_logits=True, return_dict_in_generate=True, **gen).logits[0]
    err = max(step_err or 0.0, rel_err(got, want))
    if not err <= c.tol_step:
        for kk in keys.values():
            c.run.write(kk, dims, [], f"the static cache's logits are {err:.3e} off the dynamic step's", rel_err=err,
                        check="step", status="mismatch")
        return {}, None
    samplers = {"step_static": lambda: (reset(), c.timer.sample(step, n))[1],
                "generate_static_from_l": lambda: (reset(), c.timer.sample(lambda: model.generate(ids, **gen),
                                                                           1).scaled(1 / new))[1]}
    what = {"step_static": f"the HF step from a StaticCache of L (eager), {n} steps per sample, reset to L before "
                           "each", "generate_static_from_l": f"model.generate() continuing from the StaticCache of L "
                           f"(disable_compile), greedy, {new} new tokens per call, per new token",
            "generate_graph_from_l": f"model.generate() continuing from a StaticCache of L of its own, its step "
                                     f"compiled (torch.compile reduce-overhead: CUDA/HIP graphs; compiled and "
                                     f"captured before the rounds), greedy, {new} new tokens per call, per new token"}
    graph = graph_sampler(c, b, gen, step_err)
    if isinstance(graph, str):
        if not c.run.has(keys["generate_graph_from_l"]):
            c.run.write(keys.pop("generate_graph_from_l"), f"{dims} new={new}", [], graph, status="unsupported")
        keys.pop("generate_graph_from_l", None)
    else:
        samplers["generate_graph_from_l"], graph_err = graph
        err = max(err, graph_err)

    def write(res, rounds):
        reset()
        for s_, kk in keys.items():
            c.run.write(kk, dims if s_ == "step_static" else f"{dims} new={new}", res[s_],
                        f"{what[s_]}; max_cache_len L + {2 * new}; its logits checked against the dynamic step's; "
                        f"sampled in the {rounds} rounds of the step's sites, as one block; "
                        f"{c.version}{c.note_base}", rel_err=err, check="step", iters=n if s_ == "step_static" else new)
    return samplers, write


def graph_sampler(c, b, gen, step_err):
    """generate() continuing from a StaticCache of L of its own, its step compiled into
    CUDA/HIP graphs: (its sampler, its first logits' error against the eager step's from
    that cache), or why it cannot run (a row's reason). Compiled and captured here, before
    the rounds: three calls."""
    how = graphed(c)
    if isinstance(how, str):
        return how
    new = new_tokens(c)
    try:
        cache, ids, reset = static_cache(c, b, c.ctx)
        reset()
        want = c.model(input_ids=ids[:, c.ctx:], past_key_values=cache, use_cache=True).logits[:, -1]
        kw = dict(gen, past_key_values=cache, disable_compile=False, **how)
        for _ in range(3):
            reset()
            got = c.model.generate(ids, output_logits=True, return_dict_in_generate=True, **kw).logits[0]
        err = max(step_err or 0.0, rel_err(got, want))
    except Exception as e:  # a build without the feature: a row that says so, not a crash
        return f"torch.compile's graphs did not run: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    if not err <= c.tol_step:
        return f"the graphed generate()'s logits are {err:.3e} off the eager step's"
    return (lambda: (reset(), c.timer.sample(lambda: c.model.generate(ids, **kw), 1).scaled(1 / new))[1]), err


def module_call_row(c, b, x):
    """`module_call`: one nn.Module call whose forward returns its input."""
    kk = c.key("decode", "transformers" if c.model is not None else "python", "module_call", b)
    if c.run.has(kk):
        return

    class Empty(torch.nn.Module):
        def forward(self, h):
            return h
    e = Empty()
    times, _ = c.timer.pipelined(lambda: e(x))
    c.run.write(kk, "-", times, "one nn.Module call whose forward returns its input (the call machinery "
                f"transformers pays per module); {c.note_base}")


# ------------------------------------------------------------------ the Python dispatch floors


def floor_rows(c):
    """`floor/py-add` and `floor/py-view`: the Python dispatch floors (not per batch)."""
    one = torch.ones(1, device=c.device, dtype=c.dtype)
    two = torch.ones(2, 2, device=c.device, dtype=c.dtype)
    for variant, fn, ref, what in [("py-add", lambda: one + one, lambda: one.double().cpu() * 2, "one-element add"),
                                   ("py-view", lambda: two.transpose(0, 1), lambda: two.double().cpu().T,
                                    "transpose of a tiny tensor: dispatch only")]:
        kk = c.floor_key(variant)
        if not c.run.has(kk):
            c.case(kk, "-", fn, rel_err(fn(), ref()), f"{what} from Python")


def context_floor_rows(c):
    """`floor/py-mixed` and `floor/py-blocked`: the host's context factor from Python (as
    opbench's floor `mixed` / `blocked`), the same eight kinds of one-element call switching
    kind on every call or in runs of a kind."""
    dev, dt = c.device, c.dtype
    a1 = torch.full((1, 1), 1.5, device=dev, dtype=dt)
    b1 = torch.full((1, 1), 0.25, device=dev, dtype=dt)
    x8 = torch.randn(1, 8, device=dev, dtype=dt)
    w8 = (0.35 * torch.randn(8, 8)).to(device=dev, dtype=dt)
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
        kk = c.floor_key(variant)
        if c.run.has(kk):
            continue

        def unit(calls=calls):
            for f in calls:
                f()
        how = "switching kind on every call" if variant == "py-mixed" else f"{rounds} calls of a kind in a row"
        c.case(kk, "-", unit, err, f"{rounds} calls of each of 8 kinds of one-element call (add, mul, neg, rsqrt, "
               f"silu, cat, mean, linear) from Python per timed unit, {how}", calls_per=len(calls))


# ------------------------------------------------------------------ main


def batch_rows(c, b, step_err):
    """Every row family at batch `b`."""
    counted = opbench_shapes(c.exe, c.model_name, b, c.ctx, c.dt_name)

    def work(op, site):
        return counted.get((op, site), (0, 0, ""))

    if c.model is not None and c.moe:
        moe_step_rows(c, b, step_err)
        return
    if c.model is not None and c.only != "ops":
        step_rows(c, b, step_err)
    if c.only == "step":
        return
    say(f"B={b}: Python op cases")
    dev, dt, ctx = c.device, c.dtype, c.ctx
    x = torch.randn(b, 1, c.hidden, device=dev, dtype=dt)
    pos = torch.full((b, 1), ctx, device=dev, dtype=torch.long)
    linear_rows(c, b, work)
    rmsnorm_rows(c, b, work)
    rope_rows(c, b, x, pos, work)
    t = {"q": torch.randn(b, c.H, 1, c.D, device=dev, dtype=dt)}
    for name, length in [("kc", ctx), ("vc", ctx), ("kn", 1), ("vn", 1)]:
        t[name] = torch.randn(b, c.Hkv, length, c.D, device=dev, dtype=dt)
    t["kf"], t["vf"] = torch.cat([t["kc"], t["kn"]], -2), torch.cat([t["vc"], t["vn"]], -2)
    attention_rows(c, b, t, work)
    eltwise_rows(c, b, work)
    if c.model is not None:
        framework_rows(c, b, t, x, pos)
        if c.user_generate:
            static_rows(c, b, t)
    module_call_row(c, b, x)


def main(argv):
    c = setup(argv)
    step_err = step_check(c)
    for b in c.batches:
        batch_rows(c, b, step_err)
        # a peer stopped later keeps the rows of the batches it finished
        c.run.ingest(c.exe)
    floor_rows(c)
    context_floor_rows(c)
    c.run.ingest(c.exe)
    say(f"rows written to {c.run.path}")


if __name__ == "__main__":
    main(sys.argv[1:])
