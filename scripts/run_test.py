"""scripts/run.py's decisions that need no build: whether scripts/bench runs the HF peer
after timing, the timing modes `--against` gives its workers, and `--knobs`' knob lists,
choice and table."""
import contextlib
import io
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import helptext  # noqa: E402
import knobs  # noqa: E402
import paired  # noqa: E402
import run  # noqa: E402


def main():
    helptext.answer(__doc__)
    # the whole workspace: the peer runs; a selection: it does not, and says how to run it
    assert run.peer_wanted([], {}) == (True, None)
    assert run.peer_wanted(["--workspace"], {}) == (True, None)
    wanted, why = run.peer_wanted(["-p", "rmsnorm", "--", "final_norm"], {})
    assert not wanted and "OPBENCH_PEER=1" in why and "opbench peer RUN" in why, why
    # OPBENCH_PEER decides where set
    assert run.peer_wanted(["-p", "rmsnorm"], {"OPBENCH_PEER": "1"}) == (True, None)
    assert run.peer_wanted([], {"OPBENCH_PEER": "0"}) == (False, None)
    # --against keeps the modes the user set, and without a GPU leaves the default
    paired.has_gpu = lambda py: False
    assert paired.ab_modes({"OPBENCH_MODES": "pipelined,device", "OPBENCH_TORCH_PYTHON": "x"}) == "pipelined,device"
    assert paired.ab_modes({"OPBENCH_TORCH_PYTHON": "x"}) is None
    paired.has_gpu = lambda py: True
    run.say = lambda *a, **k: None
    assert paired.ab_modes({"OPBENCH_TORCH_PYTHON": "x"}) == "pipelined,graph,device"
    assert paired.ab_modes({"OPBENCH_TORCH_PYTHON": "x"}, launch=False) == "pipelined,graph"
    # help is text: scripts/bench's -h/--help, with --knobs or --against too, runs nothing;
    # after `--` they are criterion's
    assert run.wants_help(["--knobs", "--help"]) and run.wants_help(["-h"])
    assert not run.wants_help(["-p", "sdpa", "--", "--help"])
    assert "--budget" in run.bench_help(["--knobs", "--help"])
    assert "OLD_PYTHON" in run.bench_help(["--against", "x", "-h"])
    with contextlib.redirect_stdout(io.StringIO()) as shown:
        assert run.main(["bench", "--knobs", "--help"]) == 0
    assert shown.getvalue().startswith("`scripts/bench --knobs"), shown.getvalue()[:80]
    # -p names a bench crate, else exit 2 listing them; each unsupported reason once
    assert "linear" in run.bench_crates() and "opbench" not in run.bench_crates()
    assert exits_2(run.check_packages, ["-p", "nosuchcrate"])
    assert exits_2(run.check_packages, ["--package=nosuchcrate", "--", "x"])
    run.check_packages(["-p", "linear", "-p", "sdpa", "--", "-p"])
    said = []
    run.say = said.append
    with tempfile.TemporaryDirectory() as d:
        res = Path(d) / "results.csv"
        res.write_text("case,status,note\na,unsupported,graphs need a GPU\nb,unsupported,graphs need a GPU\n"
                       "c,ok,\nd,error,out of memory\n")
        run.unsupported_reasons(res)
    assert said == ["2 unsupported row(s): graphs need a GPU", "1 error row(s): out of memory"], said
    every_script_answers_help()
    newcomer_screens()
    knobs_decided_once()
    next_command_on_its_own_lines()
    tch_for_versions()
    knob_lists()
    print("run_test: ok")


def every_script_answers_help():
    """Help is text: every script of scripts/ (bash and Python, the tests too) answers -h and
    --help with its text on stdout, exit 0, lines of at most 100 characters, and starts
    nothing: with cargo, nvidia-smi and the torch Python replaced by traps that leave a mark,
    none is called (scripts/doctor --help built opbench first, issue 81)."""
    if run.WINDOWS:
        return
    scripts = sorted(p for p in (run.ROOT / "scripts").iterdir() if p.is_file() and p.suffix in ("", ".py", ".sh"))
    assert len(scripts) > 25, scripts
    with tempfile.TemporaryDirectory() as d:
        mark = Path(d) / "called"
        for tool in ("cargo", "nvidia-smi", "rocm-smi", "torch-python"):
            trap = Path(d) / tool
            trap.write_text(f"#!/bin/sh\necho {tool} \"$@\" >> {mark}\nexit 3\n")
            trap.chmod(0o755)
        env = {k: v for k, v in run.os.environ.items() if k not in ("VIRTUAL_ENV", "CONDA_PREFIX")}
        env.update(PATH=f"{d}{run.os.pathsep}{env['PATH']}", OPBENCH_PYTHON=str(Path(d) / "torch-python"))
        for script in scripts:
            cmd = [sys.executable, str(script)] if script.suffix == ".py" else ["bash", str(script)]
            for flag in ("--help", "-h"):
                out = subprocess.run(cmd + [flag], capture_output=True, text=True, timeout=60, env=env)
                lines = out.stdout.splitlines()
                assert out.returncode == 0 and len(lines) >= 2, (script.name, flag, out.returncode, out.stderr[-300:])
                assert max(map(len, lines)) <= 100, (script.name, max(lines, key=len))
                assert not mark.exists(), (script.name, flag, mark.read_text())


def knobs_decided_once():
    """doctor lists as a knob to try only what `--knobs` would pair (knobs.can_act decides
    for both), and `--knobs` prints its plan, with the build's time where nothing is built,
    before it builds or times anything."""
    import doctor

    cpu = {k["name"]: k for k in knobs.load(run.ROOT / "knobs" / "cpu.toml")}
    said, calls = [], []
    saved = (run.say, knobs.knob_env, knobs.backend, knobs.tools, dict(run.os.environ))

    def tools(env):
        calls.append(len(said))
        raise KeyboardInterrupt  # the build: where this test stops

    try:
        run.say, knobs.backend, knobs.tools = said.append, (lambda py: ("cpu", None)), tools
        with tempfile.TemporaryDirectory() as ws:
            for cpus, omp in (("0", False), ("0-3", True)):
                run.os.environ["OPBENCH_CPUS"] = cpus
                env = dict(run.os.environ, OPBENCH_TORCH_PYTHON="python3", OPBENCH_WS=ws, OPBENCH_PEER="0")
                knobs.knob_env = lambda: env
                facts = {k["name"]: k for k in doctor.knob_facts("cpu", None)["knobs"]}
                assert facts["OMP_NUM_THREADS"]["applies"] == omp, (cpus, facts)
                acts, skipped = knobs.can_act(cpu["OMP_NUM_THREADS"], None, knobs.side_cpus(env))
                assert bool(acts) == omp and (facts["OMP_NUM_THREADS"]["why"] is None) == omp, facts
                del said[:], calls[:]
                try:
                    knobs.bench_knobs(["--budget", "60"])
                except KeyboardInterrupt:
                    pass
                shown = "\n".join(said[: calls[0]])
                assert shown.count("knobs plan: ") == 1 and "ATEN_CPU_CAPABILITY=avx2: linear, rmsnorm" in shown, shown
                assert ("OMP_NUM_THREADS=1: linear" in shown) == omp, shown
                assert ("OMP_NUM_THREADS=1 skipped: each side runs on 1 CPU(s)" in shown) != omp, shown
                # nothing built in this workspace: the estimate says it has the build in it
                assert "the build first included" in shown and "priced on a run" in shown, shown
                assert max(map(len, said)) <= 160, said
            # --knobs OMP_NUM_THREADS where a side has one CPU: refused, as doctor says
            run.os.environ["OPBENCH_CPUS"] = "0"
            env["OPBENCH_CPUS"] = "0"
            assert exits_2(knobs.bench_knobs, ["OMP_NUM_THREADS"])
            assert not doctor.knob_facts("cpu", None)["knobs"][1]["applies"]
    finally:
        run.say, knobs.knob_env, knobs.backend, knobs.tools = saved[:4]
        run.os.environ.clear()
        run.os.environ.update(saved[4])


def next_command_on_its_own_lines():
    """After a partial run, scripts/bench says what predict lacks, then the plan of the
    command that adds it (whose estimate says the build is done: its crates were built to
    list it), then the command itself on lines of its own, as predict printed them to run."""
    import bench_next

    err = ("opbench: /o/runs/nb1: qwen3-0.6b's hf-eager step at B=1 L=128 f32 cpu pipelined lacks rows of linear\n"
           "    (14 case(s): linear/aten/q_proj B=1 and 13 more); add them into the same run:\n"
           "OPBENCH_RUN=nb1 OPBENCH_PROFILE=quick OPBENCH_SAMPLES=12 OPBENCH_DEVICE=cpu scripts/bench -p harness \\\n"
           "    -p linear -- '/decode/b1/'\n")
    why, cmd = bench_next.suggestion(err)
    assert why.startswith("/o/runs/nb1: qwen3") and why.endswith("13 more)") and "  " not in why, why
    assert cmd == err.splitlines()[2:], cmd
    sets, args = bench_next.command_words(cmd)
    assert sets == {"OPBENCH_RUN": "nb1", "OPBENCH_PROFILE": "quick", "OPBENCH_SAMPLES": "12",
                    "OPBENCH_DEVICE": "cpu"}, sets
    assert args == ["-p", "harness", "-p", "linear", "--", "/decode/b1/"], args
    lines = bench_next.next_lines(why, cmd, (100, 104.0, 13.0))
    assert lines[-2:] == cmd and all(len(l) <= bench_next.SAY_WIDTH for l in lines[:-2]), lines
    plan = " ".join(lines[:-2])
    assert "100 cases, ~1m44s of timing; no build left in it: its bench crates were built just now, in 13s" in plan
    assert "not estimated" in " ".join(bench_next.next_lines(why, cmd, None))
    # an error without a command (bad input): the line alone
    why, cmd = bench_next.suggestion("opbench: --batch 3: no profile of grid.toml times B = 3\n")
    assert cmd is None and why == "--batch 3: no profile of grid.toml times B = 3", why
    assert len(bench_next.next_lines(why, None, None)) == 1


def newcomer_screens():
    # --knobs takes no -p: it would read the crate's name as a knob's
    assert exits_2(knobs.parse, ["OMP_NUM_THREADS", "-p", "rmsnorm", "--", "/decode/b1/"])
    assert knobs.parse(["OMP_NUM_THREADS", "--budget", "20", "--", "/decode/b1/"])[0] == ["OMP_NUM_THREADS"]
    """The peer follows the bench's filter; GPU-only modes are refused on a CPU; a verb's help
    is its own and short; long lines are wrapped."""
    assert run.peer_filter(["-p", "rmsnorm", "--", "/decode/b1/"]) == ["--filter", "/decode/b1/"]
    assert run.peer_filter(["-p", "rmsnorm"]) == [] and run.peer_filter(["--", "--list"]) == []
    cpu = {"OPBENCH_DEVICE": "cpu"}
    assert "has none" in run.gpu_modes_without_gpu(dict(cpu, OPBENCH_MODES="graph,device"))
    assert run.gpu_modes_without_gpu(dict(cpu, OPBENCH_MODES="pipelined,graph")) is None
    assert run.gpu_modes_without_gpu(cpu) is None
    for verb in ("setup", "test", "test-torch", "env", "workspace"):
        text = run.verb_help(verb)
        assert text.startswith("usage: ") and verb in text.splitlines()[0], text
        assert max(map(len, text.splitlines())) <= 100, text
    assert max(map(len, run.__doc__.splitlines())) <= 100
    long = "word " * 100
    lines = run.wrapped(long).splitlines()
    assert len(lines) > 1 and max(map(len, lines)) <= 160 and lines[1].startswith("    ")


def tch_for_versions():
    # torch-sys compares torch.__version__ less "+..." with its own as text: only that is
    # exact; pre-releases, dev builds and self-built torches get the bypass
    cases = {
        "2.11.0": ("0.24.0", "exact"),
        "2.11.0+cu130": ("0.24.0", "exact"),
        "2.9.1+rocm7.11.0a20251101": ("0.22.0", "patch"),
        "2.10.0a0+git1234abc": ("0.23.0", "patch"),
        "2.11.0.dev20260101": ("0.24.0", "patch"),
        "2.12.0rc1": ("0.24.0", "nearest"),
    }
    for version, want in cases.items():
        assert run.match_tch(version) == want, (version, run.match_tch(version))
    for version in cases:
        _, match = run.match_tch(version)
        assert (match != "exact") == run.needs_bypass(version), version


def exits_2(f, *args):
    try:
        f(*args)
    except SystemExit as e:
        return e.code == 2
    return False


def knob_lists():
    # every backend's list loads, each knob with its fields, a name once, a source named
    for backend in ("cuda", "rocm", "cpu"):
        ks = knobs.load(run.ROOT / "knobs" / f"{backend}.toml")
        names = [k["name"] for k in ks]
        assert ks and len(names) == len(set(names)), backend
        assert all(k["source"] and k["said"] and k["ran"] for k in ks), backend
    # knobs by arch: hipBLASLt and AOTriton's knobs do not apply on the RX 6650 XT's gfx1032,
    # nor on an unknown GPU; they do on gfx1100 (its gcnArchName may carry features)
    rocm = {k["name"]: k for k in knobs.load(run.ROOT / "knobs" / "rocm.toml")}
    for name in ("TORCH_BLAS_PREFER_HIPBLASLT", "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL"):
        ok, why = knobs.applies(rocm[name], "gfx1032")
        assert not ok and "gfx1032" in why, (name, why)
        assert knobs.applies(rocm[name], "gfx1100:xnack-") == (True, None), name
        assert not knobs.applies(rocm[name], None)[0], name
    assert knobs.applies(rocm["HIP_FORCE_DEV_KERNARG"], "gfx1032") == (True, None)
    # a thread count that a side's CPUs already impose is skipped, with why
    cpu = {k["name"]: k for k in knobs.load(run.ROOT / "knobs" / "cpu.toml")}
    assert knobs.side_cpus({}, cores=2) == 1 and knobs.side_cpus({"OPBENCH_CPUS": "2-3,5"}) == 3
    acts, why = knobs.value_acts(cpu["OMP_NUM_THREADS"], "1", 1)
    assert not acts and "1 CPU(s)" in why, why
    assert knobs.value_acts(cpu["OMP_NUM_THREADS"], "1", 4) == (True, None)
    assert knobs.value_acts(cpu["ATEN_CPU_CAPABILITY"], "default", 1) == (True, None)
    cuda = knobs.load(run.ROOT / "knobs" / "cuda.toml")
    assert [k["name"] for k in knobs.chosen(cuda, ["CUDA_MODULE_LOADING"])] == ["CUDA_MODULE_LOADING"]
    assert len(knobs.chosen(cuda, [])) == len(cuda)
    assert exits_2(knobs.chosen, cuda, ["HIP_FORCE_DEV_KERNARG"])
    with tempfile.TemporaryDirectory() as d:
        bad = Path(d) / "bad.toml"
        bad.write_text('[[knob]]\nname = "X"\nvalues = ["1"]\n')
        assert exits_2(knobs.load, bad)
        # an ab table whose HF step ran 1.25x slower with the knob: "leave unset", 40 -> 32
        ab = Path(d) / "k-ab.csv"
        ab.write_text(
            "level,name,kind,verdict,ratio,ratio_low,ratio_high,pairs,resolution_pct,note\n"
            'family,"all host-bound cases","host-bound",slower,1.10,1.08,1.12,,,""\n'
            'family,"linear pipelined (host-bound)","host-bound",slower,1.104,1.074,1.119,,,""\n'
            'family,"rmsnorm pipelined (host-bound)","host-bound",same,0.999,0.99,1.01,,,""\n'
            'case,"decode/transformers/step/qwen3-0.6b/decode/b1/q1/kv1025/f16/cuda:0/pipelined",'
            '"host-bound",slower,1.25,1.2,1.3,16,,""\n')
        base = Path(d) / "k-base"
        base.mkdir()
        (base / "results.csv").write_text(
            "op,variant,site,model,phase,batch,median_ns\n"
            "decode,transformers,step,qwen3-0.6b,decode,1,25000000\n")
        # --price takes a run directory; the filter's batch is the one priced
        assert knobs.parse(["A", "--budget", "30", "--price", str(base), "--", "/m/decode/b8/"]) == (
            ["A"], 30.0, base, "/m/decode/b8/")
        assert exits_2(knobs.parse, ["--price", str(Path(d) / "none")])
        assert knobs.batch_of("/m/decode/b8/") == 8 and knobs.batch_of("/m/decode/") == 1
        # priced at the shortest L the step was measured at (the HF step's where the peer ran)
        (base / "results.csv").write_text(
            "op,variant,site,model,phase,batch,kv_len,status,median_ns\n"
            "decode,hf-eager,step,m,decode,1,4097,skipped,\n"
            "decode,hf-eager,step,m,decode,1,1025,ok,2\n"
            "decode,transformers,step,m,decode,1,129,ok,3\n")
        assert knobs.priced_ctx(base, 1, True) == 128 and knobs.priced_ctx(base, 1, False) == 1024
        assert knobs.priced_ctx(base, 8, True) is None
        (base / "results.csv").write_text(
            "op,variant,site,model,phase,batch,median_ns\n"
            "decode,transformers,step,qwen3-0.6b,decode,1,25000000\n")
        fams, step = knobs.families(ab)
        assert fams["all host-bound cases"] == ("slower", 1.10) and step[0] == "slower"
        table = knobs.summary([(cuda[0], "1", 1, fams, step, base)])
        assert "slower (+10.0%)" in table and "40.0 → 32.0" in table, table
        # a knob on linear: its crates' family beside the global line, not rmsnorm's
        row = next(l for l in table.splitlines() if l.startswith(f"| {cuda[0]['name']}"))
        assert cuda[0]["crates"] == ["linear"], cuda[0]
        assert "linear pipelined (host-bound): slower (+10.4%)" in row and "rmsnorm" not in row, row
        faster = knobs.summary([(cuda[0], "1", 0, fams, ("faster", 0.8, step[2]), base)])
        assert "faster (-20.0%)" in faster and "40.0 → 50.0" in faster, faster
        # the priced rows keep predict's answer and its "what would help", not the rest
        shown = knobs.answer_and_help("answer: 1\n  first: x\nqwen3 decode\nsplit\n"
                                      "what would help your 1 sequence:\n  knob K=1 (slower) leave it unset\n")
        assert "answer: 1" in shown and "knob K=1" in shown and "split" not in shown, shown


if __name__ == "__main__":
    main()
