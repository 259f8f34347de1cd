"""What every part of the peer shares: its messages, the float64 error, the model files."""

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def fail(msg, code=2):
    print(f"peer: {msg}", file=sys.stderr)
    sys.exit(code)


try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

try:
    import torch
except ImportError:
    fail("torch is not importable in this Python: run scripts/setup, or use the Python opbench uses")


STARTED = time.monotonic()


def say(msg):
    print(f"peer: [{time.monotonic() - STARTED:.0f} s] {msg}", file=sys.stderr, flush=True)


def rel_err(out, ref):
    out = out.detach().to("cpu", torch.float64)
    ref = ref.detach().to("cpu", torch.float64)
    d = (out - ref).norm().item()
    n = ref.norm().item()
    return d / n if n > 0 else d


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


def key_text(key):
    """A case key as opbench writes it (rundir's CaseKey: `…/decode/b1/q1/kv129/…`): the name
    the worker's cases go by in requests, in `opbench ab`'s tables and in filters
    (`--filter`), as the bench workers' do."""
    op, variant, site, model, phase, b, q, kv, dt, dev, mode = (str(v) for v in key)
    kv = f"/kv{kv}" if kv != "" else ""
    return f"{op}/{variant}/{site}/{model}/{phase}/b{b}/q{q}{kv}/{dt}/{dev}/{mode}"
