"""CUDA/HIP graphs without torch.compile: the HF static-cache decode step captured in a
torch.cuda.CUDAGraph directly (no Inductor, no Triton), its logits checked against the
eager step's, replayed as a step (`step_cudagraph`) and inside generate()
(`generate_cudagraph_from_l`: generate()'s forward replaced by a replay). The recipe a user
pastes is docs/guide.md's "CUDA/HIP graphs without compile"; this is it, timed."""

import contextlib
import functools

import torch

from peerlib.base import rel_err
from peerlib.case import Case, refused
from peerlib.model import static_cache

SITES = ("step_cudagraph", "generate_cudagraph_from_l")


def capture(c, b):
    """(graph, input ids buffer, logits buffer, cache, ids, reset): the step from a StaticCache
    of L (transformers' positions and mask come from the cache's own device counters, which
    the graph advances), warmed up on a side stream and captured; the cache reset to L."""
    cache, ids, reset = static_cache(c, b, c.ctx)
    buf = ids[:, c.ctx:].clone()
    out = {}

    def forward():
        out["logits"] = c.model(input_ids=buf, past_key_values=cache, use_cache=True).logits
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            reset()
            forward()
    torch.cuda.current_stream().wait_stream(side)
    reset()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        forward()
    reset()
    return g, buf, out["logits"], cache, ids, reset


def cudagraph_cases(c, b, gen, new, dims):
    """{site: Case} of SITES at batch `b`, or rows that say why they cannot run (the CPU, a
    capture that fails). `gen`: generate()'s kwargs continuing from a static cache (greedy,
    `new` tokens, disable_compile)."""
    keys = {s_: c.step_key(s_, b) for s_ in SITES}
    if c.device.type != "cuda":
        return {k: refused("unsupported", "CUDA/HIP graphs need a GPU", dims) for k in keys.values()}
    try:
        g, buf, logits, cache, ids, reset = capture(c, b)
        want = c.model(input_ids=buf, past_key_values=cache, use_cache=True).logits[:, -1]
        reset()
        g.replay()
        torch.cuda.synchronize()
        err = max(c.step_err, rel_err(logits[:, -1], want))
    except Exception as e:  # a stack whose capture fails: a row that says so, not a crash
        why = f"torch.cuda.CUDAGraph capture of the HF step failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
        return {k: refused("unsupported", why, dims) for k in keys.values()}
    start = buf.clone()

    def before():
        reset()
        buf.copy_(start)

    def step():
        g.replay()
        buf.copy_(logits[:, -1:].argmax(-1))
    real = c.model.forward

    @functools.wraps(real)
    def replayed(*a, input_ids=None, past_key_values=None, **kw):
        if past_key_values is not cache or input_ids is None or input_ids.shape != buf.shape:
            return real(*a, input_ids=input_ids, past_key_values=past_key_values, **kw)
        buf.copy_(input_ids)
        g.replay()
        return c.tf.CausalLMOutputWithPast(logits=logits, past_key_values=cache)
    kw = dict(gen, past_key_values=cache)

    @contextlib.contextmanager
    def graphed():
        # the forward swapped outside the timed calls: a sample times generate() alone
        c.model.forward = replayed
        try:
            yield
        finally:
            del c.model.forward

    def timed(n):
        reset()
        with graphed():
            return c.timer.sample(lambda: c.model.generate(ids, **kw), 1).scaled(1 / new)
    reset()
    with graphed():
        got = c.model.generate(ids, **kw, output_logits=True, return_dict_in_generate=True).logits[0]
    gen_err = max(err, rel_err(got, want))
    base = (f"the HF step from a StaticCache of L (max_cache_len L + {2 * new}) captured in one "
            f"torch.cuda.CUDAGraph (no torch.compile, no Triton), replayed; its logits checked against the "
            f"eager step's from that cache")
    return {keys["step_cudagraph"]: Case(step, err, "step", f"{base}; a step is a replay and the argmax fed to "
                                         "the next (reset to L before each sample)", dims, before=before),
            keys["generate_cudagraph_from_l"]: Case(
                None, gen_err, "step", f"model.generate() continuing from that cache, greedy, {new} new tokens per "
                f"call, its forward replaced by the graph's replay (the recipe of docs/guide.md), per new token; "
                f"{base}", f"{dims} new={new}", new,
                timed=timed)}
