//! Sites of a Qwen3 decoder step and their problems: dims, FLOPs, bytes, calls per step.
//!
//! Notation (DESIGN.md): E hidden, H query heads, Hkv kv heads, D head_dim, I intermediate,
//! V vocab, B batch, q new tokens per sequence, L cache length before the step, T = B·q.

use std::fmt;

/// The ops opbench measures.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum OpKind {
    Linear,
    RmsNorm,
    Rope,
    Sdpa,
    KvCache,
    /// The element-wise calls between the ops: residual adds, SiLU, the SwiGLU product and
    /// the attention output's `transpose(1, 2).contiguous()`.
    Eltwise,
    /// The dispatch floor: the smallest op there is (a one-element add).
    Floor,
    /// A whole decoder forward (site `step`): what the ops add up to.
    Decode,
    /// What the device really does: a large copy (bandwidth) and a large GEMM (matrix rate).
    Ceiling,
    /// A mixture-of-experts MLP's routed experts (Qwen3-30B-A3B, -235B-A22B): the tokens
    /// sent to their experts, each expert's SwiGLU, the weighted combine ([`crate::moe`]).
    Moe,
}

impl OpKind {
    pub const ALL: [OpKind; 10] = [
        OpKind::Linear,
        OpKind::RmsNorm,
        OpKind::Rope,
        OpKind::Sdpa,
        OpKind::KvCache,
        OpKind::Eltwise,
        OpKind::Floor,
        OpKind::Decode,
        OpKind::Ceiling,
        OpKind::Moe,
    ];
    /// The name used in CSV and as the crate name.
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Linear => "linear",
            OpKind::RmsNorm => "rmsnorm",
            OpKind::Rope => "rope",
            OpKind::Sdpa => "sdpa",
            OpKind::KvCache => "kvcache",
            OpKind::Eltwise => "eltwise",
            OpKind::Floor => "floor",
            OpKind::Decode => "decode",
            OpKind::Ceiling => "ceiling",
            OpKind::Moe => "moe",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl std::str::FromStr for OpKind {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Self, UnknownValue> {
        UnknownValue::find(s, &Self::ALL, Self::as_str)
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not one of a closed set's: the value and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown value `{value}` (expected {expected})")]
pub struct UnknownValue {
    pub value: String,
    /// The accepted names, comma-separated.
    pub expected: String,
}

impl UnknownValue {
    pub fn new(value: &str, expected: &[&str]) -> Self {
        UnknownValue {
            value: value.to_string(),
            expected: expected.join(", "),
        }
    }

    /// The one of `all` whose text form (`name`) is `value`; else the error listing them.
    pub fn find<T: Copy>(value: &str, all: &[T], name: fn(T) -> &'static str) -> Result<T, Self> {
        all.iter()
            .copied()
            .find(|t| name(*t) == value)
            .ok_or_else(|| {
                let names: Vec<&str> = all.iter().map(|t| name(*t)).collect();
                UnknownValue::new(value, &names)
            })
    }
}

/// Decode (one new token per sequence) or prefill (the whole prompt).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Decode,
    Prefill,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Decode => "decode",
            Phase::Prefill => "prefill",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "decode" => Some(Phase::Decode),
            "prefill" => Some(Phase::Prefill),
            _ => None,
        }
    }
}

impl std::str::FromStr for Phase {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Self, UnknownValue> {
        Self::parse(s).ok_or_else(|| UnknownValue::new(s, &["decode", "prefill"]))
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One forward call of the model: `batch` sequences, `q_len` new tokens each, `cache_len`
/// tokens already cached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub phase: Phase,
    pub batch: usize,
    pub q_len: usize,
    pub cache_len: usize,
}

impl Step {
    /// One new token per sequence on top of `cache_len` cached ones.
    pub fn decode(batch: usize, cache_len: usize) -> Self {
        Step {
            phase: Phase::Decode,
            batch,
            q_len: 1,
            cache_len,
        }
    }
    /// A prompt of `len` tokens per sequence into an empty cache.
    pub fn prefill(batch: usize, len: usize) -> Self {
        Step {
            phase: Phase::Prefill,
            batch,
            q_len: len,
            cache_len: 0,
        }
    }
    /// Tokens in the step, T = B·q.
    /// Saturates rather than wraps (sizes that large are refused where they are read).
    pub fn tokens(&self) -> usize {
        self.batch.saturating_mul(self.q_len)
    }
    /// Positions attended to after the step, L + q (saturating).
    pub fn kv_len(&self) -> usize {
        self.cache_len.saturating_add(self.q_len)
    }
}

/// The dims of one problem, written `key=value` in DESIGN.md's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dims {
    /// `y[m,n] = x[m,k] · w[n,k]ᵀ`.
    Linear { m: usize, n: usize, k: usize },
    /// Normalise `rows` vectors of `width`.
    Norm { rows: usize, width: usize },
    /// Rotate `[batch, heads, seq, head_dim]`; `heads == 0` is the cos/sin cache build.
    Rope {
        batch: usize,
        heads: usize,
        seq: usize,
        head_dim: usize,
    },
    Sdpa {
        batch: usize,
        q_heads: usize,
        kv_heads: usize,
        q_len: usize,
        kv_len: usize,
        head_dim: usize,
        causal: bool,
    },
    KvCache {
        batch: usize,
        kv_heads: usize,
        cache_len: usize,
        new_len: usize,
        head_dim: usize,
    },
    /// A binary element-wise op over `numel` elements (the dispatch floor, a residual add).
    Elementwise { numel: usize },
    /// A unary element-wise op over `numel` elements (SiLU).
    Unary { numel: usize },
    /// An index-returning reduction of each of `rows` vectors of `width` (argmax).
    Reduce { rows: usize, width: usize },
    /// `rows` rows of `width` gathered from a table (the embedding lookup).
    Gather { rows: usize, width: usize },
    /// A device-to-device copy of `numel` elements.
    Copy { numel: usize },
    /// An MoE block's routed experts ([`crate::moe`]): `tokens` tokens, each sent to
    /// `top_k` of `experts` experts (SwiGLU MLPs `width` → `inter` → `width`), of which
    /// `hit` receive at least one token.
    Experts {
        tokens: usize,
        experts: usize,
        top_k: usize,
        hit: usize,
        width: usize,
        inter: usize,
    },
    /// A whole forward of a dense model: `batch` sequences, `q_len` new tokens on
    /// `cache_len` cached ones.
    Step {
        batch: usize,
        q_len: usize,
        cache_len: usize,
        layers: usize,
    },
}

impl fmt::Display for Dims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Dims::Linear { m, n, k } => write!(f, "m={m} n={n} k={k}"),
            Dims::Norm { rows, width } => write!(f, "rows={rows} width={width}"),
            Dims::Rope {
                batch,
                heads,
                seq,
                head_dim,
            } => write!(
                f,
                "batch={batch} heads={heads} seq={seq} head_dim={head_dim}"
            ),
            Dims::Sdpa {
                batch,
                q_heads,
                kv_heads,
                q_len,
                kv_len,
                head_dim,
                causal,
            } => write!(
                f,
                "batch={batch} q_heads={q_heads} kv_heads={kv_heads} q_len={q_len} \
                 kv_len={kv_len} head_dim={head_dim} causal={}",
                u8::from(causal)
            ),
            Dims::KvCache {
                batch,
                kv_heads,
                cache_len,
                new_len,
                head_dim,
            } => write!(
                f,
                "batch={batch} kv_heads={kv_heads} cache_len={cache_len} new_len={new_len} \
                 head_dim={head_dim}"
            ),
            Dims::Elementwise { numel } | Dims::Unary { numel } => write!(f, "numel={numel}"),
            Dims::Reduce { rows, width } | Dims::Gather { rows, width } => {
                write!(f, "rows={rows} width={width}")
            }
            Dims::Copy { numel } => write!(f, "numel={numel}"),
            Dims::Experts {
                tokens,
                experts,
                top_k,
                hit,
                width,
                inter,
            } => write!(
                f,
                "tokens={tokens} experts={experts} top_k={top_k} hit={hit} width={width} inter={inter}"
            ),
            Dims::Step {
                batch,
                q_len,
                cache_len,
                layers,
            } => write!(
                f,
                "batch={batch} q_len={q_len} cache_len={cache_len} layers={layers}"
            ),
        }
    }
}

/// A count that saturates instead of overflowing: shape arithmetic on absurd sizes gives
/// `u128::MAX`, which the `checked_*` counts turn into `None`, never a wrapped number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct W(pub(crate) u128);

impl std::ops::Mul for W {
    type Output = W;
    fn mul(self, o: W) -> W {
        W(self.0.saturating_mul(o.0))
    }
}

impl std::ops::Mul<W> for u128 {
    type Output = W;
    fn mul(self, o: W) -> W {
        W(self.saturating_mul(o.0))
    }
}

impl std::ops::Add for W {
    type Output = W;
    fn add(self, o: W) -> W {
        W(self.0.saturating_add(o.0))
    }
}

/// One op at one site of one step.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub op: OpKind,
    pub site: &'static str,
    pub model: String,
    pub phase: Phase,
    pub batch: usize,
    pub q_len: usize,
    /// Attention length L+q for ops whose cost depends on it (sdpa, kvcache); `None` for
    /// ops that do not see the cache (linear, rmsnorm, rope).
    pub kv_len: Option<usize>,
    pub dims: Dims,
    /// How many times one forward of the model calls this site.
    pub calls_per_step: usize,
    /// RoPE base, carried for the rope op (not part of the dims).
    pub rope_theta: f64,
    /// RMSNorm epsilon, carried for the rmsnorm op.
    pub eps: f64,
    /// Cache position of the first new token (L), for rope and kvcache.
    pub cache_len: usize,
    /// What a whole forward reads and computes (op `decode` only).
    pub step_work: Option<StepWork>,
}

/// The work of one whole forward of a dense model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepWork {
    /// FLOPs: 2 per multiply-add of every projection (lm_head on the last token of each
    /// sequence only) plus attention as the sdpa site counts it.
    pub flops: u64,
    /// Weight elements read once per forward: every layer's projections and norms, the
    /// final norm, lm_head, and the B embedding rows looked up.
    pub weight_elems: u64,
    /// KV-cache elements read by attention: 2 · layers · B · Hkv · (L+q) · D.
    pub kv_elems: u64,
}

impl StepWork {
    /// Bytes of KV cache the step holds after it (for the footprint note).
    pub fn kv_bytes(&self, elem: usize) -> u64 {
        self.kv_elems * elem as u64
    }
}

impl Problem {
    /// Same measurement: equal apart from what does not change the cost (the cache length of
    /// an op that does not read the cache).
    pub fn same_case(&self, other: &Problem) -> bool {
        self.op == other.op
            && self.site == other.site
            && self.model == other.model
            && self.phase == other.phase
            && self.batch == other.batch
            && self.q_len == other.q_len
            && self.kv_len == other.kv_len
            && self.dims == other.dims
    }

    /// Bytes an append by concatenation moves (DynamicCache's `cat`): the whole cache is
    /// read and written, L + q rows each way. `None` for anything but a KV-cache problem.
    pub fn cat_bytes(&self, elem: usize) -> Option<u64> {
        match self.dims {
            Dims::KvCache {
                batch,
                kv_heads,
                cache_len,
                new_len,
                head_dim,
            } => {
                let rows = (batch * kv_heads * head_dim) as u64;
                Some(rows * 2 * (cache_len + new_len) as u64 * elem as u64)
            }
            _ => None,
        }
    }

    /// Floating-point operations per call (multiply and add counted separately).
    ///
    /// - linear: 2·m·n·k.
    /// - rmsnorm: 4 per element (square, sum, scale by rsqrt, scale by weight).
    /// - rope: 3 per rotated element (x·cos + rot(x)·sin); the cache build: 3 per cos/sin
    ///   element pair (position × inverse frequency, cos, sin).
    /// - sdpa: 4·D per attended (query, key) pair and head (QKᵀ and P·V, 2·D each); a causal
    ///   call attends to q·L + q(q+1)/2 pairs per sequence, not q·(L+q).
    /// - kvcache: 0 (pure data movement).
    /// - elementwise (binary or unary): 1 per element; argmax 1 per element read; copies and
    ///   gathers 0.
    ///
    /// Saturates at `u64::MAX`; [`Self::checked_flops`] says when it would.
    pub fn flops(&self) -> u64 {
        self.checked_flops().unwrap_or(u64::MAX)
    }

    /// [`Self::flops`], `None` when the count does not fit 64 bits.
    pub fn checked_flops(&self) -> Option<u64> {
        u64::try_from(self.flops_wide()).ok()
    }

    /// [`Self::bytes`], `None` when the count does not fit 64 bits.
    pub fn checked_bytes(&self, elem: usize) -> Option<u64> {
        u64::try_from(self.bytes_wide(elem)).ok()
    }

    fn flops_wide(&self) -> u128 {
        let u = |x: usize| W(x as u128);
        let count = match self.dims {
            Dims::Linear { m, n, k } => 2 * u(m) * u(n) * u(k),
            Dims::Norm { rows, width } => 4 * u(rows) * u(width),
            Dims::Rope {
                batch,
                heads,
                seq,
                head_dim,
            } => 3 * u(batch) * u(heads.max(1)) * u(seq) * u(head_dim),
            Dims::Sdpa {
                batch,
                q_heads,
                q_len,
                kv_len,
                head_dim,
                causal,
                ..
            } => 4 * u(batch) * u(q_heads) * u(head_dim) * attended_pairs(q_len, kv_len, causal),
            Dims::KvCache { .. } => W(0),
            Dims::Elementwise { numel } | Dims::Unary { numel } => u(numel),
            Dims::Reduce { rows, width } => u(rows) * u(width),
            Dims::Copy { .. } | Dims::Gather { .. } => W(0),
            // each routed token's three GEMMs (gate, up: width → inter; down: inter →
            // width), its SiLU and product, and its weighted add into the token's row
            Dims::Experts {
                tokens,
                top_k,
                width,
                inter,
                ..
            } => {
                let routed = u(tokens) * u(top_k);
                6 * routed * u(width) * u(inter) + 2 * routed * u(inter) + 2 * routed * u(width)
            }
            Dims::Step { .. } => W(self.step_work.map_or(0, |w| u128::from(w.flops))),
        };
        count.0
    }

    /// Bytes a call must move at the least, for elements of `elem` bytes.
    ///
    /// - linear: (m·k + k·n + m·n)·elem (read x and w, write y).
    /// - rmsnorm: (2·rows·width + width)·elem (read x, write y, read weight).
    /// - rope: 2·B·h·q·D·elem (read x, write y) + 2·B·q·D·elem (read cos and sin); the cache
    ///   build writes cos and sin: 2·B·q·D·elem.
    /// - sdpa: Q and O (B·H·q·D each) + K and V (B·Hkv·kv·D each), times elem; scores are not
    ///   counted, so a kernel that materialises them shows a lower effective GB/s.
    /// - kvcache: read the new rows and write them into the cache, 2·B·Hkv·q·D·elem; a
    ///   variant that copies the whole cache (DynamicCache's `cat`) states its own count.
    /// - elementwise (binary): 3·numel·elem; unary and copies: 2·numel·elem.
    /// - argmax (reduce): rows·width·elem + 8·rows (the int64 indices); embedding (gather):
    ///   2·rows·width·elem.
    ///
    /// Saturates at `u64::MAX`; [`Self::checked_bytes`] says when it would.
    pub fn bytes(&self, elem: usize) -> u64 {
        self.checked_bytes(elem).unwrap_or(u64::MAX)
    }

    fn bytes_wide(&self, elem: usize) -> u128 {
        let u = |x: usize| W(x as u128);
        let e = u(elem);
        let count = match self.dims {
            Dims::Linear { m, n, k } => (u(m) * u(k) + u(k) * u(n) + u(m) * u(n)) * e,
            Dims::Norm { rows, width } => (2 * u(rows) * u(width) + u(width)) * e,
            Dims::Rope {
                batch,
                heads,
                seq,
                head_dim,
            } => {
                let table = 2 * u(batch) * u(seq) * u(head_dim) * e;
                if heads == 0 {
                    table
                } else {
                    2 * u(batch) * u(heads) * u(seq) * u(head_dim) * e + table
                }
            }
            Dims::Sdpa {
                batch,
                q_heads,
                kv_heads,
                q_len,
                kv_len,
                head_dim,
                ..
            } => {
                let qo = 2 * u(batch) * u(q_heads) * u(q_len) * u(head_dim);
                let kv = 2 * u(batch) * u(kv_heads) * u(kv_len) * u(head_dim);
                (qo + kv) * e
            }
            Dims::KvCache {
                batch,
                kv_heads,
                new_len,
                head_dim,
                ..
            } => 2 * u(batch) * u(kv_heads) * u(new_len) * u(head_dim) * e,
            // two inputs read, one output written
            Dims::Elementwise { numel } => 3 * u(numel) * e,
            // read once, written once
            Dims::Unary { numel } | Dims::Copy { numel } => 2 * u(numel) * e,
            // read every element, write one int64 index per row
            Dims::Reduce { rows, width } => u(rows) * u(width) * e + 8 * u(rows),
            // read the rows, write them (the ids are noise)
            Dims::Gather { rows, width } => 2 * u(rows) * u(width) * e,
            // as the three GEMMs of every expert hit count it ((m·k + k·n + m·n) each, the m
            // of all experts adding up to the T·k routed tokens): the weights of the experts
            // hit, and each routed token's rows in and out of them
            Dims::Experts {
                tokens,
                top_k,
                hit,
                width,
                inter,
                ..
            } => {
                let routed = u(tokens) * u(top_k);
                (3 * u(hit) * u(width) * u(inter) + 3 * routed * (u(width) + u(inter))) * e
            }
            Dims::Step { .. } => self.step_work.map_or(W(0), |w| {
                (W(u128::from(w.weight_elems)) + W(u128::from(w.kv_elems))) * e
            }),
        };
        count.0
    }
}

impl Problem {
    /// The dispatch floor: `a + b` on one element, the per-call cost every op pays.
    pub fn floor() -> Self {
        Problem {
            op: OpKind::Floor,
            site: "add1",
            model: "none".into(),
            phase: Phase::Decode,
            batch: 1,
            q_len: 1,
            kv_len: None,
            dims: Dims::Elementwise { numel: 1 },
            calls_per_step: 1,
            rope_theta: 0.0,
            eps: 0.0,
            cache_len: 0,
            step_work: None,
        }
    }
}

impl Problem {
    /// The ceiling probes: a 64 Mi-element copy (site `copy`, bytes read + written) and a
    /// 4096³ GEMM (site `gemm`).
    pub fn ceilings() -> Vec<Self> {
        let floor = Problem::floor();
        vec![
            Problem {
                op: OpKind::Ceiling,
                site: "copy",
                dims: Dims::Copy { numel: 64 << 20 },
                ..floor.clone()
            },
            Problem {
                op: OpKind::Ceiling,
                site: "gemm",
                dims: Dims::Linear {
                    m: 4096,
                    n: 4096,
                    k: 4096,
                },
                ..floor
            },
        ]
    }
}

/// (query, key) pairs one head of one sequence attends to.
pub(crate) fn attended_pairs(q_len: usize, kv_len: usize, causal: bool) -> W {
    let (q, kv) = (q_len as u128, kv_len as u128);
    if causal {
        // query i (0-based) of q sees the L = kv - q cached keys and i + 1 new ones
        let cached = kv.saturating_sub(q);
        W(q) * W(cached) + W(q.saturating_mul(q.saturating_add(1)) / 2)
    } else {
        W(q) * W(kv)
    }
}
