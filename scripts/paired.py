"""The paired runners' parts: bench executables of a workspace, whether a Python's torch
sees a GPU, the timing modes and side variables `opbench ab`'s workers take, and
`run.py bench --against` (two builds alive at once). scripts/knobs.py runs its knobs with
the same parts."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import helptext
import run as r


def bench_executables(env, cargo_args):
    """{bench target name: executable} of `cargo bench --no-run` in `env`'s workspace."""
    out = subprocess.run(
        ["cargo", "bench", "-q", "--no-run", "--message-format=json", *cargo_args],
        env=env, cwd=env["OPBENCH_WS"], capture_output=True, text=True,
    )
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        r.fail(f"cargo bench --no-run failed (exit {out.returncode})", out.returncode)
    exes = {}
    for line in out.stdout.splitlines():
        try:
            m = json.loads(line)
        except ValueError:
            continue
        if m.get("reason") == "compiler-artifact" and m.get("executable") and "bench" in m["target"]["kind"]:
            exes[m["target"]["name"]] = m["executable"]
    return exes


# whether a Python's torch sees a GPU: run.py's probe (the tests replace it here)
has_gpu = r.has_gpu


def ab_modes(env, launch=True):
    """The timing modes `opbench ab`'s workers take: OPBENCH_MODES where set; on a GPU,
    `pipelined,graph,device`: the kernels' time from graph replays, which carry no process's
    launch term (docs/method.md, "The process term"), and beside them the launch measure,
    the same kernels launched on the stream (`device`), whose time holds what each launch
    costs the device and which graph rows cannot see; `pipelined,graph` where `launch` is
    false (a knob that does not act on launches); else the workers' default."""
    if env.get("OPBENCH_MODES") or not has_gpu(Path(env["OPBENCH_TORCH_PYTHON"])):
        return env.get("OPBENCH_MODES")
    modes = "pipelined,graph,device" if launch else "pipelined,graph"
    r.say(f"a GPU: device-timed cases as graph replays{' and stream launches (the launch measure)' if launch else ''} (OPBENCH_MODES={modes}; set it to choose)")
    return modes


def side_vars(env):
    """The variables a side's workers need beyond the driver's: where its torch's shared
    libraries are (the loader's path on Linux, PATH on Windows)."""
    lib = str(r.torch_of(Path(env["OPBENCH_TORCH_PYTHON"]))[1] / "lib")
    if r.WINDOWS:
        return [f"PATH={env['PATH']}"]
    old = os.environ.get("LD_LIBRARY_PATH", "")
    return [f"LD_LIBRARY_PATH={lib}" + (os.pathsep + old if old else "")]


def split_filter(args):
    """(the arguments before `--`, the first filter after it or None): `[...] [-- FILTER]`,
    as `cargo bench` takes it."""
    if "--" not in args:
        return list(args), None
    i = args.index("--")
    after = [a for a in args[i + 1 :] if not a.startswith("-")]
    return list(args[:i]), (after[0] if after else None)


def bench_against(args, against):
    """Two builds alive at once, compared in pairs: `run.py bench --against OLD_PYTHON
    [--cand-env NAME=VALUE]... [--budget SECONDS] [cargo bench args] [-- FILTER]`. The
    candidate is the Python found as usual (the new build); OLD_PYTHON the one to compare
    against. Each side's bench binaries are built with its own tch, then `opbench ab` runs
    them as workers that take turns sample by sample (docs/method.md) and writes
    runs/<RUN>-base, -cand, -ab.csv and -compare.md. With OPBENCH_PEER unset or 1, each
    side's Python runs scripts/peer.py as a worker too (your stack from Python: the HF step,
    a decoder layer, the op calls), paired the same way. The exit code is opbench ab's (1
    on a regression). No trace pass."""
    old = Path(against)
    if not r.torch_of(old):
        r.fail(f"--against {old}: that Python cannot import torch")
    ours = []
    rest = list(args)
    for flag in ("--cand-env", "--budget", "--processes", "--tolerance"):
        while flag in rest:
            i = rest.index(flag)
            if i + 1 >= len(rest):
                r.fail(f"{flag} needs a value")
            ours += [flag, rest[i + 1]]
            del rest[i : i + 2]
    rest, filt = split_filter(rest)
    cand = r.build_env()
    base = r.build_env(old)
    modes = ab_modes(cand)
    if modes:
        cand["OPBENCH_MODES"] = modes
    lay = r.layout(cand)
    run_id = cand.get("OPBENCH_RUN") or time.strftime(lay["run_id_format"], time.gmtime())
    out = Path(cand.get("OPBENCH_OUT") or r.ROOT / "target" / "opbench")
    cargo_args = rest or ["--workspace"]
    exes = {}
    for side, env in (("base", base), ("cand", cand)):
        env.pop("OPBENCH_TRACE", None)
        r.say(f"building the {side} side (torch {env['OPBENCH_TORCH']})")
        exes[side] = bench_executables(env, cargo_args)
    names = sorted(set(exes["base"]) & set(exes["cand"]))
    if not names:
        r.fail("no bench binary was built on both sides")
    cmd = [str(r.opbench_exe(cand)), "ab", "--out", str(out), "--run", run_id]
    cmd += ["--base", *[exes["base"][n] for n in names], "--cand", *[exes["cand"][n] for n in names]]
    for v in side_vars(base):
        cmd += ["--base-env", v]
    for v in side_vars(cand):
        cmd += ["--cand-env", v]
    if filt:
        cmd += ["--filter", filt]
    if cand.get("OPBENCH_PEER", "1") != "0":
        cmd += ["--base-python", str(old), "--cand-python", cand["OPBENCH_TORCH_PYTHON"]]
    cmd += ours
    cmd += ["--base-name", f"torch {base['OPBENCH_TORCH']} ({old})",
            "--cand-name", f"torch {cand['OPBENCH_TORCH']} ({cand['OPBENCH_TORCH_PYTHON']})"]
    r.say(f"comparing {', '.join(names)} in pairs")
    return subprocess.run(cmd, env=cand).returncode


if __name__ == "__main__":
    helptext.answer(bench_against.__doc__)
    # `run.py bench --against OLD_PYTHON [args...]` starts this as `paired.py OLD_PYTHON [args...]`
    sys.exit(bench_against(sys.argv[2:], sys.argv[1]))
