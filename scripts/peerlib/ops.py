"""The op sites as transformers calls them from Python (`py-<variant>`), the dispatch
floors, and a static cache's parts."""

import functools
import math

import torch
import torch.nn.functional as F

from peerlib.base import rel_err
from peerlib.case import Case, op_case, refused
from peerlib.model import cache_tensors, graphed, new_tokens, norm_module, static_attention, step_inputs


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
