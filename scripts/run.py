#!/usr/bin/env python3
"""opbench's runner: the one code path for setup, bench and test on Linux and Windows.

    python3 scripts/run.py setup              the Python whose torch is built against
    python3 scripts/run.py workspace VERSION  `TCH MATCH WORKSPACE` for a torch version
    python3 scripts/run.py env                what the build needs, as `export` lines
    python3 scripts/run.py bench [cargo bench args...]
    python3 scripts/run.py bench --against OLD_PYTHON [--cand-env N=V] [--budget S] [-- FILTER]
                                              two builds alive at once, compared in pairs
    python3 scripts/run.py bench --knobs [NAME...] [--budget S] [--price RUN] [-- FILTER]
                                              this backend's runtime knobs, each against unset
    python3 scripts/run.py doctor [--device D] what this torch stack is and what opbench can measure
    python3 scripts/run.py test               the test suite, as CI runs it
    python3 scripts/run.py test-torch VERSION build and test against torch VERSION (PyPI)

scripts/setup, doctor, bench, test and test-torch are one-line wrappers of these
for a POSIX shell; on Windows run `python scripts\\run.py bench` (Python ≥ 3.9, standard
library only). Environment variables are those the README lists (OPBENCH_*).

Which Python (setup): OPBENCH_PYTHON if set (it must import torch); else an activated
virtualenv or conda env whose python has torch; else a venv of our own outside the repo,
${XDG_CACHE_HOME:-~/.cache}/opbench/venv-torch<OPBENCH_TORCH_VERSION, default 2.11.0>,
made once with torch from PyPI and reused by every clone.

Which tch (workspace): the matrix below, the one place it is written. The repository pins
tch 0.24 (torch 2.11); for another torch a workspace is generated under
target/torch-ws/tch-<ver>-torch<major.minor>/: the same crates (a symlink, a junction on Windows), a
Cargo.toml pinning that tch, its own Cargo.lock and target. The checkout is not edited.
"""
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import helptext
from bench_plan import hms, leaves_out, read_plan, summary

ROOT = Path(__file__).resolve().parent.parent
WINDOWS = os.name == "nt"
DEFAULT_TORCH = "2.11.0"
NEWEST_TESTED = "2.15.0"

# (major, minor) -> (tch release, the torch version its torch-sys was generated for)
MATRIX = {
    (2, 9): ("0.22.0", "2.9.0"),
    (2, 10): ("0.23.0", "2.10.0"),
    (2, 11): ("0.24.0", "2.11.0"),
    (2, 12): ("0.24.0", "2.11.0"),
    (2, 13): ("0.26.0", "2.13.0"),
    (2, 14): ("0.26.0", "2.13.0"),
    (2, 15): ("0.26.0", "2.13.0"),
}


def say(msg):
    print(f"run.py: {msg}", file=sys.stderr, flush=True)


def fail(msg, code=2):
    say(msg)
    sys.exit(code)


# ---------------------------------------------------------------- setup: which Python


def venv_python(venv):
    for p in (venv / "Scripts" / "python.exe", venv / "bin" / "python"):
        if p.exists():
            return p
    return venv / ("Scripts/python.exe" if WINDOWS else "bin/python")


def torch_of(py):
    """(version, torch package folder) of `py`'s torch, or None."""
    try:
        out = subprocess.run(
            [str(py), "-c", "import os, torch; print(torch.__version__); print(os.path.dirname(torch.__file__))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\n")
        return out[0].strip(), Path(out[1].strip())
    except (OSError, subprocess.CalledProcessError, IndexError):
        return None


def setup():
    """The Python to build against: see the module's doc."""
    if os.environ.get("OPBENCH_PYTHON"):
        py = Path(os.environ["OPBENCH_PYTHON"])
        if not torch_of(py):
            fail(f"OPBENCH_PYTHON={py} cannot import torch")
        return py
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        if os.environ.get(var):
            base = Path(os.environ[var])
            for py in (base / "bin" / "python", base / "python.exe", base / "Scripts" / "python.exe"):
                if py.exists() and torch_of(py):
                    return py
    ver = os.environ.get("OPBENCH_TORCH_VERSION", DEFAULT_TORCH)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "opbench"
    venv = Path(os.environ.get("OPBENCH_VENV") or cache / f"venv-torch{ver}")
    py = venv_python(venv)
    have = torch_of(py) if py.exists() else None
    if have and have[0].split("+")[0] == ver:
        return py
    say(f"creating {venv} with torch=={ver} from PyPI (once; several GB)")
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv_python(venv)
    pip = [str(py), "-m", "pip", "install", "--quiet"]
    subprocess.run(pip + ["--upgrade", "pip"], check=True, stdout=sys.stderr)
    subprocess.run(pip + [f"torch=={ver}"], check=True, stdout=sys.stderr)
    if not torch_of(py):
        fail(f"torch did not import from {venv}", 1)
    say(f"ready: {py}")
    return py


# ---------------------------------------------------------------- workspace: which tch


def match_tch(version):
    """(tch, match) for a torch version: match is exact | patch | nearest | newer.

    exact means torch-sys's own check passes: it compares `torch.__version__` less its
    local part (`+cu130`, `+rocm7.11.0a…`) with the version it was generated for, as text.
    A pre-release or self-built torch (`2.9.0a0+git…`, `2.11.0.dev20260101`, `2.12.0rc1`)
    is never exact, so the build sets LIBTORCH_BYPASS_VERSION_CHECK for it."""
    public = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if not public:
        fail(f"torch {version}: not a version")
    major, minor = int(public.group(1)), int(public.group(2))
    if (major, minor) in MATRIX:
        tch, made_for = MATRIX[(major, minor)]
        if version.strip().split("+")[0] == made_for:
            return tch, "exact"
        return tch, "patch" if made_for.startswith(f"{major}.{minor}.") else "nearest"
    if (major, minor) > (2, 15):
        say(
            f"torch {version} is newer than any tested (newest tested: {NEWEST_TESTED}); "
            "building with tch 0.26.0 and LIBTORCH_BYPASS_VERSION_CHECK=1"
        )
        return "0.26.0", "newer"
    fail(
        f"torch {version} is not supported; supported: 2.9.x, 2.10.x, 2.11.x, 2.13.x "
        "(a tch made for them), 2.12.x, 2.14.x, 2.15.x (the nearest tch)"
    )


def needs_bypass(version):
    """Whether torch-sys's version check must be bypassed for this torch."""
    return match_tch(version)[1] != "exact"


def link_dir(link, target):
    """A directory link: a symlink, or on Windows (where symlinks need a privilege) a
    junction."""
    if link.is_symlink() or link.exists():
        if link.resolve() == target.resolve():
            return
        if link.is_symlink() or (WINDOWS and not any(link.iterdir())):
            link.unlink() if link.is_symlink() else link.rmdir()
        else:
            shutil.rmtree(link)
    if WINDOWS:
        import _winapi

        _winapi.CreateJunction(str(target), str(link))
    else:
        link.symlink_to(target, target_is_directory=True)


def workspace(tch, version):
    """The cargo workspace that builds with `tch` against torch `version`: the repository,
    or a generated one per tch and torch minor version (two torches never share a target
    folder, whose build scripts may not notice that libtorch changed)."""
    manifest = (ROOT / "Cargo.toml").read_text()
    pinned = re.search(r'^tch = "=(.*)"$', manifest, re.M).group(1)
    if tch == pinned:
        return ROOT
    minor = ".".join(re.findall(r"\d+", version)[:2])
    ws = ROOT / "target" / "torch-ws" / f"tch-{tch}-torch{minor}"
    ws.mkdir(parents=True, exist_ok=True)
    for name in ("crates", "shapes"):
        link_dir(ws / name, ROOT / name)
    text = re.sub(r'^(tch|torch-sys) = "=.*"$', lambda m: f'{m.group(1)} = "={tch}"', manifest, flags=re.M)
    if not (ws / "Cargo.toml").exists() or (ws / "Cargo.toml").read_text() != text:
        (ws / "Cargo.toml").write_text(text)
    lock = ws / "Cargo.lock"
    if not lock.exists() or (ROOT / "Cargo.lock").stat().st_mtime > lock.stat().st_mtime:
        # start from the repository's lock; cargo moves tch and torch-sys to the pin
        shutil.copy2(ROOT / "Cargo.lock", lock)
    return ws


# ---------------------------------------------------------------- env: what cargo needs


def build_env(py=None):
    """The environment for cargo: the Python's folder first on PATH, LIBTORCH_USE_PYTORCH,
    the version-check bypass where the tch was not made for this very torch, C++20 where
    torch's headers require it, and OPBENCH_TORCH / OPBENCH_TCH / OPBENCH_WS /
    OPBENCH_TORCH_PYTHON (that Python)."""
    py = py or setup()
    info = torch_of(py)
    if not info:
        fail(f"{py} cannot import torch")
    version, torch_dir = info
    tch, match = match_tch(version)
    ws = workspace(tch, version)
    env = dict(os.environ)
    env["PATH"] = str(py.parent) + os.pathsep + env.get("PATH", "")
    env["LIBTORCH_USE_PYTORCH"] = "1"
    if needs_bypass(version):
        # torch-sys refuses a libtorch it was not generated for unless told
        env["LIBTORCH_BYPASS_VERSION_CHECK"] = "1"
    aten = torch_dir / "include" / "ATen" / "ATen.h"
    if aten.exists() and "C++20 or later" in aten.read_text(errors="replace"):
        # torch 2.15's headers refuse C++17; torch-sys and atenx ask for C++17, and cc-rs
        # lets CXXFLAGS have the last word
        flag = "/std:c++20" if WINDOWS else "-std=c++20"
        if "c++2" not in env.get("CXXFLAGS", ""):
            env["CXXFLAGS"] = (env.get("CXXFLAGS", "") + " " + flag).strip()
    if not (torch_dir / "include" / "ATen" / "ops" / "cholesky.h").exists():
        # a torch that removed ops tch's bindings still call (2.15: cholesky, qr)
        compat = ROOT / "scripts" / "compat" / "torch_removed_ops.h"
        flag = f"/FI{compat}" if WINDOWS else f"-include {compat}"
        if str(compat) not in env.get("CXXFLAGS", ""):
            env["CXXFLAGS"] = (env.get("CXXFLAGS", "") + " " + flag).strip()
    if WINDOWS:
        # the executables link torch's DLLs at start-up: its lib folder must be on PATH
        env["PATH"] = str(torch_dir / "lib") + os.pathsep + env["PATH"]
    env.update(OPBENCH_TORCH=version, OPBENCH_TCH=tch, OPBENCH_WS=str(ws), OPBENCH_TORCH_PYTHON=str(py))
    say(f"torch {version}, tch {tch} ({match}), workspace {ws}")
    return env


def cargo(env, *args, check=True, **kw):
    rc = subprocess.run(["cargo", *args], env=env, cwd=env["OPBENCH_WS"], **kw).returncode
    if check and rc != 0:
        fail(f"cargo {' '.join(args[:2])} failed (exit {rc})", rc)
    return rc


# ---------------------------------------------------------------- the run directory


def opbench_exe(env):
    """The release opbench of `env`'s workspace (built by the caller)."""
    return Path(env["OPBENCH_WS"]) / "target" / "release" / ("opbench.exe" if WINDOWS else "opbench")


def layout(env, exe=None):
    """The run directory's layout as `opbench layout` prints it (the one description):
    folder and file names, the default run id's format. `exe`: an opbench built
    elsewhere; else this workspace's, built first."""
    if exe is None:
        if not opbench_exe(env).exists():
            say("building opbench with libtorch (a first build takes a few minutes)")
        # with libtorch: `opbench env` and `opbench doctor` describe this machine through it
        cargo(env, "build", "-q", "--release", "-p", "opbench", "--features", "torch")
        exe = opbench_exe(env)
    out = subprocess.run([str(exe), "layout"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def run_dir(lay, out, run_id, execution=None):
    d = Path(out) / lay["runs"] / run_id
    return d / lay["executions"] / str(execution) if execution else d


# ---------------------------------------------------------------- bench


def peer_wanted(args, env):
    """(whether scripts/bench runs `opbench peer` after timing, the line saying why not):
    OPBENCH_PEER where set; else yes for the whole workspace, and no for a selection (`-p`,
    a filter after `--`), which picks bench cases the peer's would outlast by minutes."""
    if "OPBENCH_PEER" in env:
        return env["OPBENCH_PEER"] != "0", None
    if list(args) in ([], ["--workspace"]):
        return True, None
    return False, ("opbench peer (the HF stack from Python) not run: a selection (-p, a filter) times\n"
                   "    those bench cases only; OPBENCH_PEER=1 runs it too, or `opbench peer RUN` after")



def peer_filter(args):
    """The `--filter` of `opbench peer` for scripts/bench's arguments: the filter after `--`
    (criterion's, a regular expression on the case keys, which the peer's keys share)."""
    tail = [a for a in args[args.index("--") + 1 :] if not a.startswith("-")] if "--" in args else []
    return ["--filter", tail[0]] if len(tail) == 1 else []


def run_peer(env, into, args=()):
    """`opbench peer` into a run directory, on the cases the bench's filter selects; its
    time in seconds (a failure keeps the timed rows)."""
    # without transformers it writes the Python op rows and says what it skipped
    t1 = time.monotonic()
    rc = subprocess.run([str(opbench_exe(env)), "peer", str(into), *peer_filter(args)], env=env).returncode
    took = time.monotonic() - t1
    if rc != 0:
        say(f"opbench peer failed (exit {rc}); the timed rows are kept")
    else:
        say(f"peer rows took {hms(took)}")
    return took


def stack_checks(env, run):
    """doctor's checks of this stack (scripts/doctor.py --checks) into the run as stack.json:
    what would help says from them whether each remedy can run here."""
    py = env.get("OPBENCH_TORCH_PYTHON") or sys.executable
    dev = "cpu" if env.get("OPBENCH_DEVICE") == "cpu" else "all"
    out = subprocess.run([py, str(ROOT / "scripts" / "doctor.py"), "--checks", "--device", dev,
                          "--gpu", env.get("OPBENCH_GPU", "0")], capture_output=True, text=True, env=env)
    if out.returncode == 0 and run.is_dir():
        (run / "stack.json").write_text(out.stdout)


def doctor(args):
    """`opbench doctor` (built with libtorch) for the Python builds use: its exit code."""
    env = build_env()
    layout(env)
    return subprocess.run([str(opbench_exe(env)), "doctor", *args], env=env).returncode


def bench_crates():
    """The crates `scripts/bench -p` takes: those with benches."""
    return sorted(d.name for d in (ROOT / "crates").iterdir() if (d / "benches").is_dir())


def check_packages(args):
    """Exit 2 naming the crates where `-p`/`--package` names one that has no benches."""
    own = args[: args.index("--")] if "--" in args else args
    known = bench_crates()
    for i, a in enumerate(own):
        name = own[i + 1] if a in ("-p", "--package") and i + 1 < len(own) else None
        if a.startswith("--package="):
            name = a.split("=", 1)[1]
        if name is not None and name not in known:
            fail(f"-p {name}: not a bench crate; the crates: {', '.join(known)}")


def unsupported_reasons(results):
    """Print each reason the run's `unsupported` and `error` rows give, once, with a count."""
    if not results.exists():
        return
    with open(results, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("status") in ("unsupported", "error")]
    for (status, note), n in Counter((r["status"], r.get("note") or "") for r in rows).most_common():
        say(f"{n} {status} row(s): {note or 'no reason recorded'}")


def no_match(env, args, every):
    """A filter that matches nothing: exit 2 with names it could have matched."""
    every.write_text("")
    cargo(dict(env, OPBENCH_PLAN_FILE=str(every)), "bench", "-q", *args[: args.index("--")], "--", "--list",
          stdout=subprocess.DEVNULL)
    keys = [k for _, k, _, _ in read_plan(every)]
    fail(wrapped(f"no case matches {' '.join(args[args.index('--') + 1:])!r}; cases are named like "
         f"{', '.join(keys[:3]) or '(none: these crates have no cases in this profile)'} "
         f"({len(keys)} in all; `scripts/bench {' '.join(args[: args.index('--')])} -- --list` lists them)"))


CRITERION_CHATTER = ("Benchmarking ", "Warning: Unable to complete", "Found ", "Gnuplot not found")


def bench_cargo(env, args, log):
    """cargo bench with criterion's console (stdout, and its `Benchmarking …` and warning
    lines on stderr) in `log`; opbench's own lines (progress, errors) still reach stderr."""
    if log is None:
        return cargo(env, "bench", *args, check=False)
    p = subprocess.Popen(["cargo", "bench", *args], env=env, cwd=env["OPBENCH_WS"], stdout=log,
                         stderr=subprocess.PIPE, text=True, errors="replace")
    for line in p.stderr:
        # criterion's warnings name its own settings: OPBENCH_SAMPLES / OPBENCH_MEASURE_MS are ours
        if line.lstrip().startswith(CRITERION_CHATTER) or line.startswith(("  ", "\t")) and "outlier" in line:
            log.write(line)
        else:
            sys.stderr.write(line)
    return p.wait()


def criterion_log(args, path):
    """Where criterion's console (hundreds of lines) goes: a log, unless `-- --verbose` asks
    for it here (None); the CSV and the progress lines carry what it says."""
    if "--" in args and "--verbose" in args[args.index("--"):]:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    say(f"criterion's console: {path} (`-- --verbose` prints it here)")
    return open(path, "a")


def rows_in(lay, d):
    """The rows a run directory's results.csv holds (0 without one)."""
    f = d / lay["results"]
    return max(0, sum(1 for _ in f.open()) - 1) if f.exists() else 0


def executions(env, args, lay, out, run_id, n, with_peer, log):
    """OPBENCH_EXECUTIONS=N: N processes of every case, each execution's peer beside it, then
    merged; the seconds the peer took."""
    peer_secs = 0.0
    run = run_dir(lay, out, run_id)

    seed = int(env.get("OPBENCH_SEED") or time.time())
    failed = 0
    for i in range(1, n + 1):
        say(f"execution {i} of {n} (seed {seed + i})")
        e = dict(
            env,
            OPBENCH_EXECUTION=str(i),
            OPBENCH_SEED=str(seed + i),
            OPBENCH_PLAN_BASE=str(rows_in(lay, run_dir(lay, out, run_id, i))),
            OPBENCH_PLAN_START=str(int(time.time())),
        )
        if bench_cargo(e, args, log) != 0:
            say(f"execution {i} failed; the others are kept")
            failed += 1
        elif with_peer:
            # the HF step beside the tch step of the same execution, minutes apart rather
            # than the whole run apart: the host drifts between them (docs/findings.md)
            peer_secs += run_peer(env, run_dir(lay, out, run_id, i), args)
    subprocess.run([str(opbench_exe(env)), "merge", str(run)], check=True)
    if failed:
        say(f"{failed} of {n} executions failed")
    return peer_secs


def has_gpu(py):
    """Whether `py`'s torch sees a GPU (CUDA or ROCm)."""
    try:
        return subprocess.run(
            [str(py), "-c", "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"],
            capture_output=True,
        ).returncode == 0
    except OSError:
        return False


GPU_MODES = {"device", "device_cold", "graph", "graph_cold"}


def gpu_modes_without_gpu(env):
    """The line refusing OPBENCH_MODES that only a GPU can time where none is seen, or None."""
    modes = {m.strip() for m in env.get("OPBENCH_MODES", "").split(",") if m.strip()}
    if not modes or not modes <= GPU_MODES:
        return None
    if env.get("OPBENCH_DEVICE") != "cpu" and has_gpu(env.get("OPBENCH_TORCH_PYTHON") or sys.executable):
        return None
    return (f"OPBENCH_MODES={env['OPBENCH_MODES']}: these modes time a GPU (device events, graph "
            "replays) and this machine has none; on the CPU use pipelined, synced or pipelined_cold")


def list_cases(env, list_args, path):
    """`cargo bench -q LIST_ARGS` (they end in `--list`) with the plan written to `path`
    (OPBENCH_PLAN_FILE): the finished process and its wall time, which is the start-up cost of
    the bench binaries (the listing starts each once)."""
    path.write_text("")
    t0 = time.monotonic()
    listed = subprocess.run(["cargo", "bench", "-q", *list_args], cwd=env["OPBENCH_WS"],
                            env=dict(env, OPBENCH_PLAN_FILE=str(path)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return listed, time.monotonic() - t0


def bench(args):
    args = list(args) or ["--workspace"]
    check_packages(args)
    env = build_env()
    refusal = gpu_modes_without_gpu(env)
    if refusal:
        fail(refusal)
    # a trace pass runs after timing, in its own processes: never in a timed one
    trace = env.pop("OPBENCH_TRACE", "")
    lay = layout(env)
    # the GPU asked for must be usable from Rust too: one line and stop, not a CPU-only run
    check = subprocess.run([str(opbench_exe(env)), "doctor", "--check"], env=env)
    if check.returncode != 0:
        sys.exit(check.returncode)
    run_id = env.setdefault("OPBENCH_RUN", time.strftime(lay["run_id_format"], time.gmtime()))
    out = Path(env.get("OPBENCH_OUT") or ROOT / "target" / "opbench")
    env["OPBENCH_OUT"] = str(out)
    n = env.get("OPBENCH_EXECUTIONS", "1")
    if not n.isdigit() or int(n) < 1:
        fail(f"OPBENCH_EXECUTIONS={n}: expected a whole number ≥ 1")
    n = int(n)
    max_min = env.get("OPBENCH_MAX_MIN", "15")
    if not max_min.isdigit():
        fail(f"OPBENCH_MAX_MIN={max_min}: expected whole minutes")
    # criterion's arguments go after `--`: add --list to them
    if "--" in args and "--list" in args[args.index("--"):]:
        # the cases' names, as criterion lists them: nothing is timed
        return cargo(env, "bench", "-q", *args, check=False)
    list_args = args + (["--list"] if "--" in args else ["--", "--list"])
    cargo(env, "bench", "-q", "--no-run", *args, stdout=subprocess.DEVNULL)
    plans = out / "plans"
    plans.mkdir(parents=True, exist_ok=True)

    def plan_for(profile, path):
        listed, took = list_cases(dict(env, OPBENCH_PROFILE=profile), list_args, path)
        if listed.returncode != 0:
            # a bad OPBENCH_* value: the bench binary's one line, not cargo's "to rerun pass"
            ours = [l for l in listed.stderr.splitlines() if l.startswith("opbench:")]
            sys.stderr.write("\n".join(ours or listed.stderr.splitlines()[-5:]) + "\n")
            sys.exit(2 if ours else listed.returncode)
        return took

    plan = plans / f"{run_id}.csv"
    startup = plan_for(env.get("OPBENCH_PROFILE", "default"), plan)
    if not read_plan(str(plan)) and "--" in args:
        no_match(env, args, plans / f"{run_id}.all.csv")
    cases, secs = summary(str(plan), n, startup)
    if "OPBENCH_PROFILE" not in env and secs > int(max_min) * 60:
        quick = plans / f"{run_id}.quick.csv"
        startup = plan_for("quick", quick)
        say(f"the default grid would take longer than {max_min} minutes here; running the quick profile")
        say("(OPBENCH_PROFILE=default runs the whole grid; OPBENCH_MAX_MIN moves the limit)")
        leaves_out(str(plan), str(quick))
        env["OPBENCH_PROFILE"] = "quick"
        plan = quick
        cases, secs = summary(str(plan), n, startup)
    env.update(OPBENCH_PLAN_CASES=str(cases), OPBENCH_PLAN_FILE=str(plan))

    # the user's own stack: HF transformers from Python, into the same run (OPBENCH_PEER=0: not)
    with_peer, why = peer_wanted(args, env)
    if why:
        say(why)

    t0 = time.monotonic()
    peer_secs = 0.0
    run = run_dir(lay, out, run_id)
    log = criterion_log(args, out / "logs" / f"{run_id}-criterion.log")
    if n == 1:
        start = dict(env, OPBENCH_PLAN_BASE=str(rows_in(lay, run)), OPBENCH_PLAN_START=str(int(time.time())))
        rc = bench_cargo(start, args, log)
        if rc != 0:
            fail(f"cargo bench failed (exit {rc})", rc)
    else:
        peer_secs = executions(env, args, lay, out, run_id, n, with_peer, log)
    took = time.monotonic() - t0 - peer_secs
    say(f"timing took {hms(took)} (estimated {hms(secs)})")
    if with_peer and n == 1:
        run_peer(env, run, args)
    if trace not in ("", "0"):
        say(f"trace pass (OPBENCH_TRACE={trace}): traces.csv and kernels.csv, no timing")
        t = dict(env, OPBENCH_TRACE=trace)
        t.pop("OPBENCH_PLAN_FILE", None)
        if cargo(t, "bench", *args, check=False) != 0:
            say("the trace pass failed; the timed rows are kept")
    unsupported_reasons(run / lay["results"])
    stack_checks(env, run)
    # a machine busy with other work is named at the end and in env.json (analysis::busy)
    if (run / lay["env"]).exists():
        subprocess.run([str(opbench_exe(env)), "state", str(run), "--busy"], env=env)
    print(f"opbench: run directory: {run}")
    # what to run next: bench_next.py builds on this module, so it runs as its own process
    subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_next.py"), str(run), str(int(with_peer))],
                   env=env)


def wrapped(text, width=160):
    """`text` as lines of at most `width` characters, the later ones indented."""
    import textwrap

    return "\n".join(textwrap.wrap(text, width, subsequent_indent="    ", break_on_hyphens=False))


# ---------------------------------------------------------------- main


# whether `-h`/`--help` is among a verb's own arguments (before any `--`, after which they
# are criterion's): help is text, it never builds, probes torch or starts a run
wants_help = helptext.asked

DOCTOR_HELP = """usage: scripts/doctor [--device cpu|gpu|all] [--gpu N] [--check] [--python PY]

What this torch stack is and what opbench can measure on it: `opbench doctor`, built with
libtorch for the Python builds use (a first build takes a few minutes), then run.
  --device D   what scripts/bench would be asked to measure: cpu, gpu or all (default:
               $OPBENCH_DEVICE, else all)
  --gpu N      which GPU `gpu` and `all` mean (default: $OPBENCH_GPU, else 0)
  --check      only the check scripts/bench makes first: one line, exit 1 when the device
               asked for is not usable
  --python PY  the Python whose torch is checked (default: the one scripts/setup picks)
Exit 0 when what scripts/bench is asked to measure works, 1 with the reason, 2 on bad input."""


def docstring(script, function=None):
    """The doc of scripts/`script` (or of its `function`), read without importing it."""
    import ast

    tree = ast.parse((ROOT / "scripts" / script).read_text())
    if function:
        tree = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    return ast.get_docstring(tree, clean=False)


def bench_help(args):
    """scripts/bench's help: --knobs' or --against's where asked, else the plain job's."""
    # read from the files, not imported: knobs.py and paired.py build on this module
    if "--knobs" in args:
        return docstring("knobs.py")
    if "--against" in args:
        doc = docstring("paired.py", "bench_against")
        return doc.replace("`run.py bench --against", "`scripts/bench --against")
    return ("scripts/bench [cargo bench args...] [-- FILTER]: every op crate (or -p CRATE...), the\n"
            "default grid, all visible devices; prints a plan and progress, then runs the HF peer.\n"
            "  --against OLD_PYTHON ...   two builds compared in pairs (scripts/bench --against --help)\n"
            "  --knobs [NAME...] ...      this backend's knobs against unset (scripts/bench --knobs --help)\n"
            "Settings: OPBENCH_* variables (opbench settings). First: scripts/doctor.")


def verb_help(verb):
    """A verb's own help: its usage line from this module's doc, and for setup which Python."""
    lines = __doc__.splitlines()
    usage = [l.strip() for l in lines if re.search(rf"run\.py {re.escape(verb)}(\s|$)", l)]
    text = "usage: " + usage[0] if usage else f"usage: python3 scripts/run.py {verb}"
    if verb == "setup":
        text += "\n\n" + __doc__.split("Which Python (setup): ", 1)[1].split("\n\n", 1)[0]
    if verb == "test":
        text += "\n\nArguments after `test` go to the suite (scripts/suite.py); scripts/test-gpu: the GPU's."
    return text + "\n\nEvery verb: python3 scripts/run.py --help"


def script(name, args):
    """scripts/`name` run with `args` in this Python: its exit code."""
    return subprocess.run([sys.executable, str(ROOT / "scripts" / name), *args]).returncode


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    verb, rest = argv[0], argv[1:]
    if verb in ("setup", "workspace", "env", "test", "test-torch", "doctor") and wants_help(rest):
        print(DOCTOR_HELP if verb == "doctor" else verb_help(verb))
        return 0
    if verb == "setup":
        print(setup())
    elif verb == "workspace":
        if len(rest) != 1:
            fail("usage: run.py workspace TORCH_VERSION")
        tch, match = match_tch(rest[0])
        print(tch, match, workspace(tch, rest[0]))
    elif verb == "env":
        env = build_env()
        keys = ["PATH", "LIBTORCH_USE_PYTORCH", "LIBTORCH_BYPASS_VERSION_CHECK", "CXXFLAGS",
                "OPBENCH_TORCH", "OPBENCH_TCH", "OPBENCH_WS", "OPBENCH_TORCH_PYTHON"]
        for k in keys:
            if k in env:
                val = env[k].replace("'", "'\\''")
                print(f"export {k}='{val}'")
    elif verb == "bench":
        if wants_help(rest):
            print(bench_help(rest))
            return 0
        # knobs.py and paired.py build on this module: each runs as its own process
        if "--knobs" in rest:
            return script("knobs.py", rest[rest.index("--knobs") + 1 :])
        if "--against" in rest:
            i = rest.index("--against")
            if i + 1 >= len(rest):
                fail("--against needs the path of the other Python (its venv's bin/python)")
            return script("paired.py", [rest[i + 1], *rest[:i], *rest[i + 2 :]])
        bench(rest)
    elif verb == "doctor":
        return doctor(rest)
    elif verb in ("test", "test-torch"):
        # scripts/suite.py builds on this module: run as its own process, not imported back
        return script("suite.py", [verb, *rest])
    else:
        fail(f"unknown verb `{verb}`; verbs: setup, workspace, env, doctor, bench, test, test-torch")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
