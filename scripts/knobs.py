"""`scripts/bench --knobs [NAME...] [--budget S] [--price RUN] [-- FILTER]`: which settings help.

Each runtime knob of this machine's backend (knobs/cuda.toml, knobs/rocm.toml or
knobs/cpu.toml: data, one file a backend) is compared, value by value, against the same
build with the knob unset: `opbench ab` runs the op crates the knob can touch with the
knob set in the candidate's workers only (`--cand-env NAME=VALUE`), and, with OPBENCH_PEER
unset or 1, scripts/peer.py on both sides (your HF step with the knob set). The budget
(--budget, default 120 s a knob value) is shared out over the knob values; each comparison
says what it ran and what it found as it ends, and the table at the end gives, per knob
value, the verdicts of the host-bound and device-timed cases and of the HF step, and where
the HF step was measured, its tokens/s with and without the knob. Tuning knobs (TunableOp)
tune in the comparison's warm-up. The run directories are runs/<RUN>-<i>-base, -cand and
-ab.csv; the table is runs/<RUN>-knobs.md.

Each knob is then priced: `opbench predict PRICE --knob <RUN>-<i>-ab.csv ...` moves the
rows of a whole run of this machine (PRICE: --price RUN_DIR, else one made first,
runs/<RUN>-price: every crate's decode cases of the model at the filter's batch, the
floor and the ceilings, and the peer at that batch) by
each pair's ratios and composes the step as for every other change; its "what would help"
gives each knob's verdict, predicted and measured tokens/s (a knob's "measured" is derived,
marked (d): the price run's step × the pair's ratio of it), and the line to set (or "leave
it unset", with its cost). With OPBENCH_BIN=DIR (bench-<crate> executables and opbench
built elsewhere: a machine without cargo) the tools come from DIR and --price is needed.
Exit 0 whatever the knobs do (a knob that hurts is a finding, not a failure); 2 on bad
input.
"""
import csv
import fnmatch
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import helptext
import paired as p
import run as r

FIELDS = ("name", "values", "crates", "said", "source", "ran", "launch")
CRATES = ("linear", "rmsnorm", "rope", "kvcache", "sdpa")
PER_VALUE = 120.0


def backend(py):
    """(`cuda`, `rocm` or `cpu`, the GPU's arch or None): what `py`'s torch runs on here, as
    scripts/doctor.py reads it (its `--quick` report)."""
    out = subprocess.run([str(py), str(r.ROOT / "scripts" / "doctor.py"), "--quick"],
                         capture_output=True, text=True).stdout.strip().splitlines()
    try:
        facts = json.loads(out[-1])
    except (IndexError, ValueError):
        return "cpu", None
    gpu = facts.get("gpu") or {}
    if not gpu.get("available"):
        return "cpu", None
    build = (facts.get("torch") or {}).get("build")
    return ("rocm" if build == "rocm" else "cuda"), gpu.get("arch")


def applies(knob, arch):
    """(applies, why not) for a knob on `arch` (`gfx1032`, `gfx90a:sramecc+:xnack-`; None
    without a GPU): a knob with `archs` (patterns, `gfx11*`) applies to the archs they
    match, one without to every arch of its backend."""
    pats = knob.get("archs")
    if not pats:
        return True, None
    base = (arch or "").split(":")[0]
    if any(fnmatch.fnmatch(base, pat) for pat in pats):
        return True, None
    return False, (f"for {', '.join(pats)} only ({knob.get('archs_source', 'its source')}); "
                   f"this GPU is {base or 'none'}")


def load(path):
    """The knobs of one backend's file, each checked for its fields; a one-line error (exit
    2) names what is wrong."""
    try:
        import tomllib
    except ImportError:
        r.fail("--knobs reads knobs/*.toml with tomllib: it needs Python 3.11 or newer")
    try:
        with open(path, "rb") as f:
            knobs = tomllib.load(f).get("knob", [])
    except (OSError, tomllib.TOMLDecodeError) as e:
        r.fail(f"{path}: {e}")
    for i, k in enumerate(knobs):
        missing = [f for f in FIELDS if f not in k]
        if missing:
            r.fail(f"{path}: knob {i + 1} ({k.get('name', '?')}) lacks {', '.join(missing)}")
        if not isinstance(k["launch"], bool):
            r.fail(f"{path}: {k['name']}: launch must be true (it acts on what each launch costs) or false")
        bad = [c for c in k["crates"] if c not in CRATES]
        if bad or not k["values"]:
            r.fail(f"{path}: {k['name']}: crates must be of {', '.join(CRATES)} and values not empty")
    return knobs


def side_cpus(env, cores=None):
    """How many CPUs each side of `opbench ab` runs on: OPBENCH_CPUS's list (`3`, `2-3`,
    `0,2`) where set, else ab's default, the last half of the cores."""
    spec = env.get("OPBENCH_CPUS", "").strip()
    if spec:
        n = 0
        for part in spec.split(","):
            lo, _, hi = part.partition("-")
            n += int(hi) - int(lo) + 1 if hi else 1
        return n
    cores = cores or os.cpu_count() or 1
    return max(1, cores // 2)


def value_acts(knob, value, cpus):
    """(acts, why not) for one value: a thread count at or over the CPUs a side runs on is
    what libtorch already runs there unset, so the pair could show nothing."""
    if knob.get("threads") and value.isdigit() and int(value) >= cpus:
        return False, (f"each side runs on {cpus} CPU(s), where libtorch already runs "
                       f"{cpus} thread(s) unset: the pair could show nothing")
    return True, None


def can_act(knob, arch, cpus):
    """The one decision whether a knob can act here, for `--knobs` and for doctor's list:
    (its values that can, [(value or None, why not)]). None where the knob does not apply to
    this arch ([`applies`]: the value None), else each value that [`value_acts`] on a side
    of `cpus` CPUs."""
    ok, why = applies(knob, arch)
    if not ok:
        return [], [(None, why)]
    acts, skipped = [], []
    for v in knob["values"]:
        yes, why = value_acts(knob, v, cpus)
        if yes:
            acts.append(v)
        else:
            skipped.append((v, why))
    return acts, skipped


def skip_line(knob, skipped):
    """`NAME skipped: why` (or `NAME=VALUE skipped: why`) for what [`can_act`] left out."""
    return [f"{knob['name']}{'' if v is None else '=' + v} skipped: {why}" for v, why in skipped]


def chosen(knobs, names):
    """The knobs `names` picks (all where none is named), or exit 2 naming an unknown one."""
    known = [k["name"] for k in knobs]
    for n in names:
        if n not in known:
            r.fail(f"--knobs {n}: not a knob of this backend; its knobs: {', '.join(known)}")
    return [k for k in knobs if not names or k["name"] in names]


def parse(args):
    """(knob names, seconds a knob value, the pricing run or None, filter) of `--knobs
    NAME... [--budget S] [--price RUN_DIR] [-- FILTER]` (args after --knobs)."""
    rest, filt = p.split_filter(args)
    budget = price = None
    if "--budget" in rest:
        i = rest.index("--budget")
        try:
            budget = float(rest[i + 1])
        except (IndexError, ValueError):
            r.fail("--budget needs seconds (a number)")
        if budget <= 0:
            r.fail(f"--budget {rest[i + 1]}: expected seconds above 0")
        del rest[i:i + 2]
    if "--price" in rest:
        i = rest.index("--price")
        if i + 1 >= len(rest) or not (Path(rest[i + 1]) / "results.csv").is_file():
            r.fail("--price needs a run directory with a results.csv (scripts/bench makes one)")
        price = Path(rest[i + 1])
        del rest[i:i + 2]
    flags = [a for a in rest if a.startswith("-")]
    if flags:
        r.fail(f"--knobs {flags[0]}: not an option here (--budget S, --price RUN, -- FILTER); each "
               "knob runs the crates it touches: a filter after -- narrows their cases")
    names = [a for a in rest if not a.startswith("-")]
    return names, budget, price, filt


def tools(env):
    """(opbench, {bench target: executable}, the layout): OPBENCH_BIN's (a folder of
    bench-<crate> executables and opbench, for a machine without cargo) or this workspace's,
    built."""
    b = env.get("OPBENCH_BIN")
    if not b:
        lay = r.layout(env)
        return r.opbench_exe(env), p.bench_executables(env, ["--workspace"]), lay
    d = Path(b)
    exe = d / ("opbench.exe" if r.WINDOWS else "opbench")
    if not exe.is_file():
        r.fail(f"OPBENCH_BIN={b}: no opbench executable there")
    exes = {f.stem.removeprefix("bench-"): str(f) for f in d.glob("bench-*")}
    return exe, exes, r.layout(env, exe)


def knob_env():
    """The environment knobs run in: the build's (run.py's) where cargo builds the tools,
    else this one, with OPBENCH_TORCH_PYTHON the Python whose torch the executables use."""
    if not os.environ.get("OPBENCH_BIN"):
        return r.build_env()
    env = dict(os.environ)
    env.setdefault("OPBENCH_TORCH_PYTHON", env.get("OPBENCH_PYTHON", "python3"))
    return env


def batch_of(filt):
    """The batch a filter picks (`/b8/`), else 1."""
    m = re.search(r"/b(\d+)/", filt)
    return int(m.group(1)) if m else 1


def families(ab_csv):
    """{family name: (verdict, ratio)} of an `opbench ab` table, and the HF step's case row
    where the peer ran (verdict, ratio), else None."""
    fams, step = {}, None
    try:
        with open(ab_csv, newline="") as f:
            for row in csv.DictReader(f):
                if row["level"] == "family":
                    fams[row["name"]] = (row["verdict"], float(row["ratio"] or "nan"))
                elif row["level"] == "case" and "/transformers/step/" in row["name"]:
                    step = (row["verdict"], float(row["ratio"] or "nan"), row["name"])
    except OSError:
        pass
    return fams, step


def step_ns(run_dir, case):
    """The base side's median ns of `case` (a case key) in its results.csv, or None."""
    try:
        with open(Path(run_dir) / "results.csv", newline="") as f:
            for row in csv.DictReader(f):
                key = "/".join(row[c] for c in ("op", "variant", "site", "model", "phase"))
                if case.startswith(f"{key}/b{row['batch']}/") and row.get("median_ns"):
                    return float(row["median_ns"])
    except OSError:
        pass
    return None


def touched(fams, crates):
    """The families of the crates a knob touches (`linear pipelined (host-bound)`, `linear
    pipelined from Python (host-bound)`, …: a family's name begins with its op), as cells."""
    names = sorted(n for n in fams if n.split(" ")[0] in crates)
    return "; ".join(f"{n}: {cell(fams, n)}" for n in names) or "-"


def cell(fams, name):
    v = fams.get(name)
    return "-" if v is None else f"{v[0]} ({(v[1] - 1) * 100:+.1f}%)"


def bench_knobs(args):
    """See the module's doc."""
    names, budget, price, filt = parse(args)
    env = knob_env()
    py = env["OPBENCH_TORCH_PYTHON"]
    which, arch = backend(py)
    path = r.ROOT / "knobs" / f"{which}.toml"
    cpus = side_cpus(env)
    plan, skips = [], []
    for k in chosen(load(path), names):
        acts, skipped = can_act(k, arch, cpus)
        plan += [(k, v) for v in acts]
        skips += skip_line(k, skipped)
    for line in skips:
        r.say(line)
    if not plan:
        r.fail(f"no knob value of {path.name} can act here ({arch or 'no GPU'}): nothing to pair", 2)
    share = budget if budget else PER_VALUE
    model = env.get("OPBENCH_MODEL", "qwen3-0.6b")
    filt = filt or f"/{model}/decode/b1/"
    peer = env.get("OPBENCH_PEER", "1") != "0"
    # the plan before anything is built or timed
    for line in plan_lines(plan, path, share, filt, peer, price is None, built(env)):
        r.say(line)
    opbench, exes, lay = tools(env)
    run_id = env.get("OPBENCH_RUN") or time.strftime(lay["run_id_format"], time.gmtime())
    out = Path(env.get("OPBENCH_OUT") or r.ROOT / "target" / "opbench")
    runs = out / lay["runs"]
    t0 = time.time()
    if price is None:
        every = f"/{model}/decode/b{batch_of(filt)}/|^floor/|^ceiling/"
        price = pricing_run(env, opbench, runs / f"{run_id}-price", every, peer)
    # on the CPU the cold modes run through scripts/bench only: ab times pipelined; on a
    # GPU a knob that acts on launches is timed by the launch measure too (`device`)
    user_modes = env.get("OPBENCH_MODES")
    rows = []
    for i, (k, value) in enumerate(plan, 1):
        crates = [c for c in k["crates"] if c in exes]
        name = f"{run_id}-{i}"
        r.say(f"knob {i} of {len(plan)}: {k['name']}={value} over {', '.join(crates)} "
              f"({time.time() - t0:.0f} s spent)")
        cmd = [str(opbench), "ab", "--out", str(out), "--run", name,
               "--base", *[exes[c] for c in crates], "--cand", *[exes[c] for c in crates],
               "--cand-env", f"{k['name']}={value}", "--filter", filt, "--budget", str(share),
               "--base-name", "unset", "--cand-name", f"{k['name']}={value}"]
        for v in p.side_vars(env):
            cmd += ["--base-env", v, "--cand-env", v]
        if peer:
            cmd += ["--base-python", py, "--cand-python", py]
        modes = user_modes or p.ab_modes({**env, "OPBENCH_MODES": ""}, launch=k["launch"]) or "pipelined"
        code = subprocess.run(cmd, env={**env, "OPBENCH_MODES": modes}).returncode
        fams, step = families(runs / f"{name}-ab.csv")
        rows.append((k, value, code, fams, step, runs / f"{name}-base"))
    table = summary(rows)
    priced = price_knobs(opbench, price, batch_of(filt), peer,
                         [runs / f"{run_id}-{i}-ab.csv" for i in range(1, len(plan) + 1)])
    text = f"{table}\n{priced}"
    dest = runs / f"{run_id}-knobs.md"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text)
    print(text)
    r.say(f"knobs: {dest} ({time.time() - t0:.0f} s in all)")
    return 0


# What a knobs run costs beyond its budgets (docs/experiments/knobs-2026-12-06, 2 cores and
# an H100): a value's pair its processes' start, warm-up and rounds, ~2.5 min; the pricing
# run ~5 min; and, where nothing is built yet, the release build (5m12s on 2 cores from a
# fresh clone, 2026-12-07).
VALUE_EXTRA_S = 150
PRICING_S = 300
BUILD_S = 300


def built(env):
    """Whether this workspace's tools are built (OPBENCH_BIN's are): else the plan's estimate
    adds the build."""
    return bool(env.get("OPBENCH_BIN")) or r.opbench_exe(env).exists()


def plan_lines(plan, path, share, filt, peer, pricing, is_built):
    """What `--knobs` will do, said before it builds or times anything: each knob value with
    the crates it touches, the pricing run, and the time in all, the build's included where
    nothing is built yet."""
    lines = [f"knobs plan: {len(plan)} value(s) of {path.name}, {share:.0f} s each, cases matching {filt}:"]
    for k, v in plan:
        touches = ", ".join(k["crates"]) + (" and the HF step (scripts/peer.py)" if peer else "")
        lines.append(f"  {k['name']}={v}: {touches}, ~{r.hms(share + VALUE_EXTRA_S)}")
    total = len(plan) * (share + VALUE_EXTRA_S)
    if pricing:
        lines.append(f"  then priced on a run of this machine made first, ~{r.hms(PRICING_S)} (--price RUN skips it)")
        total += PRICING_S
    build = (", opbench built here (a rebuild of what changed is not counted)" if is_built
             else f", the build first included (~{r.hms(BUILD_S)}: opbench is not built here)")
    lines.append(f"  estimated ~{r.hms(total + (0 if is_built else BUILD_S))} in all{build}")
    return lines


def pricing_run(env, opbench, run, filt, peer):
    """A run of this machine to price the knobs on: every crate's cases matching `filt`
    (the model's decode at the batch, the floor and the ceilings: `scripts/bench
    --workspace -- FILTER`), and where the peer runs, its rows at that batch. Made once per
    knobs run; --price gives one instead."""
    if env.get("OPBENCH_BIN"):
        r.fail("with OPBENCH_BIN give the run to price the knobs on: --price RUN_DIR")
    r.say(f"the run the knobs are priced on: {run} (every crate matching {filt})")
    e = dict(env, OPBENCH_RUN=run.name, OPBENCH_OUT=str(run.parent.parent), OPBENCH_PEER="0")
    rc = subprocess.run([sys.executable, str(Path(__file__).with_name("run.py")), "bench",
                         "--workspace", "--", filt], env=e).returncode
    if rc != 0:
        r.fail(f"the pricing run failed (exit {rc})", rc)
    if peer:
        subprocess.run([str(opbench), "peer", str(run), "--batches", str(batch_of(filt))], env=e)
    return run


def priced_ctx(price, batch, peer):
    """The cache length L to price at: the shortest the run measured its step at, at
    `batch` (the HF step's where the peer ran: it times one L), or None."""
    lengths = {}
    try:
        with open(Path(price) / "results.csv", newline="") as f:
            for row in csv.DictReader(f):
                if (row["op"], row["site"], row["batch"], row["status"]) == ("decode", "step", str(batch), "ok") \
                        and row["kv_len"]:
                    lengths.setdefault(row["variant"], set()).add(int(row["kv_len"]) - 1)
    except OSError:
        return None
    found = lengths.get("transformers" if peer else "hf-eager") or set().union(*lengths.values())
    return min(found) if found else None


def price_knobs(opbench, price, batch, peer, tables):
    """predict's answer with every knob's pair priced among what would help, as text."""
    have = [t for t in tables if t.is_file()]
    cmd = [str(opbench), "predict", str(price), "--batch", str(batch),
           "--profile", "transformers" if peer else "hf-eager"]
    ctx = priced_ctx(price, batch, peer)
    if ctx is not None:
        cmd += ["--ctx", str(ctx)]
    for t in have:
        cmd += ["--knob", str(t)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0 and peer:
        # a pricing run without the peer's rows: the tch step instead
        cmd[cmd.index("transformers")] = "hf-eager"
        out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return f"not priced: `{' '.join(cmd)}` said: {out.stderr.strip()}\n"
    return (f"priced on {price} (`opbench predict` with --knob for each pair):\n\n```\n"
            f"{answer_and_help(out.stdout)}```\n")


def summary(rows):
    """The knobs' table: per knob value what its pair found (the verdicts of the families of
    the crates it touches, of all its host-bound and device-timed cases beside them, and of
    the HF step) and, where the HF step ran, its tokens/s
    unset and set in the pair's two processes (one sequence: 1e9 / the step's ns). What to
    do is said once, by the priced rows below it (`opbench predict --knob`)."""
    lines = ["| knob | ab exit | its crates' families | all host-bound cases | all device cases | HF step "
             "| tokens/s unset → set (the pair) |",
             "|---|---|---|---|---|---|---|"]
    for k, value, code, fams, step, base in rows:
        tok = "-"
        if step is not None:
            ns = step_ns(base, step[2])
            if ns:
                tok = f"{1e9 / ns:.1f} → {1e9 / (ns * step[1]):.1f}"
        hf = "-" if step is None else f"{step[0]} ({(step[1] - 1) * 100:+.1f}%)"
        lines.append(f"| {k['name']}={value} | {code} | {touched(fams, k['crates'])} | "
                     f"{cell(fams, 'all host-bound cases')} | "
                     f"{cell(fams, 'all device cases')} | {hf} | {tok} |")
    return "\n".join(lines) + "\n"


def answer_and_help(text):
    """predict's answer (its first lines) and its "what would help" block, of its printout."""
    lines = text.splitlines()
    head = lines[: next((i for i, l in enumerate(lines) if not l.startswith(("answer", "  "))), len(lines))]
    at = next((i for i, l in enumerate(lines) if l.startswith("what would help")), len(lines))
    return "\n".join(head + [""] + lines[at:]) + "\n"


if __name__ == "__main__":
    helptext.answer(__doc__)
    sys.exit(bench_knobs(sys.argv[1:]))
