"""The model: the model file's HF transformers model with random weights (`Ctx`), its
step's check against float64, and the tensors and caches the sites share."""

import functools

import torch

from peerlib.base import rel_err, say


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
