"""The user's HF step taken apart: one decoder layer five ways, the framework's own
work, the step and generate() in interleaved rounds, a static cache, CUDA/HIP graphs,
the step by layer count, an MoE step."""

import functools
import time

import torch

from peerlib.base import key_text, rel_err
from peerlib.case import Case, refused
from peerlib.clock import Timed
from peerlib.graph import SITES as CUDAGRAPH_SITES, cudagraph_cases
from peerlib.model import MOE_CHECK_LAYERS, cache_tensors, cropper, eos_of, graphed, new_tokens, static_cache, step_inputs


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
    return [(c.step_key(s_, b), {"group": f"layers-b{b}", "kind": "layers"}) for s_ in LAYER_SITES]


GENERATE_SITES = ("step", "step_synced", "step_as_generate", "generate_from_l", "generate_loop")


STATIC_WHOLE = ("step_static", "generate_static_from_l", "generate_graph_from_l") + CUDAGRAPH_SITES
# the static block's sites a sample takes several steps of (the rest: one generate() call)
STATIC_STEPS = ("step_static", "step_cudagraph")
# at most this many steps a step sample (the layers of a layer_beside sample: opbench passes
# them, `--beside-layers`, from shapes::LAYER_REPEATS)
STEPS = 16


def step_specs(c, b):
    """The step group's keys: the step and generate() taken apart, in interleaved rounds so
    that all see the same host states (predict reads the step sites' differences round by
    round): the three step sites back to back, the two generate() sites back to back, the
    static cache's block, the blocks in a shuffled order; `layer_beside` before each step
    sample."""
    g = f"step-b{b}"
    beside = c.step_key("layer_beside", b)
    out = [(c.step_key(s_, b), {"group": g, "kind": "step", "block": "step", "max_iters": STEPS}) for s_ in GENERATE_SITES[:3]]
    out[0][1]["before"] = key_text(beside)
    out += [(c.step_key(s_, b), {"group": g, "kind": "step", "block": "generate", "max_iters": 1}) for s_ in GENERATE_SITES[3:]]
    if c.user_generate:
        out += [(c.step_key(s_, b), {"group": g, "kind": "step", "block": "static",
                                  "max_iters": STEPS if s_ in STATIC_STEPS else 1})
                for s_ in STATIC_WHOLE]
    return out + [(beside, {"max_iters": c.beside_layers, "min_iters": c.beside_layers})]


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
    out[c.step_key("layer_beside", b)] = beside_case(c, b, dims)
    for k in out.values():
        k.note = f"{k.note}; sampled in the rounds of the step's sites; {tail}"
    return out


def beside_case(c, b, dims):
    """The case of layer 0's calls flat, timed right before every step sample."""
    flat, beside_err = layer_beside(c, b)
    return Case(flat, beside_err, "step", "layer 0's calls written out flat (as layer_flat), timed right before "
                "every step sample: the layer in the step's host state; per layer", dims)


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
    `generate_graph_from_l` (graph_case), checked against the dynamic step's logits; and the
    step captured in a torch.cuda.CUDAGraph without compile (peerlib.graph)."""
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
    out.update(cudagraph_cases(c, b, gen, new, dims))
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
