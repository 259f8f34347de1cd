"""What scripts/bench says to run next, at the end of a run: the predict that answers from
it, asked before it is suggested; or, where the run lacks what predict needs (a partial
run: `-p` or a filter), what it lacks and the one command that adds it into the same run,
on lines of its own to run as printed, with its plan: the cases and the time it takes, its
bench crates built first, so the estimate is timing alone and says so.

    python3 scripts/bench_next.py RUN_DIR WITH_PEER   (scripts/bench starts it; WITH_PEER 0 or 1)

The environment is the bench run's (run.py's build environment). Builds on run.py, which
starts this file as a process and never imports it."""
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import helptext
import run as r
from bench_plan import hms, read_plan

# run.py's say() leads each line with `run.py: `: the lines it says stay within 160
SAY_WIDTH = 160 - len("run.py: ")


def suggestion(text):
    """(what predict says the run lacks, the lines of the command it gives, or None): the
    command starts on a line of its own with its settings (`OPBENCH_…=`) and goes on while a
    line ends in ` \\`."""
    lines = text.rstrip("\n").splitlines()
    at = next((i for i, l in enumerate(lines) if l.startswith("OPBENCH_") and "scripts/bench" in text), None)
    if at is None:
        return " ".join(" ".join(lines).split()).removeprefix("opbench: "), None
    end = at
    while end + 1 < len(lines) and lines[end].endswith("\\"):
        end += 1
    why = " ".join(" ".join(lines[:at]).split()).removeprefix("opbench: ").rstrip(":")
    # the line above the command says it adds them
    why = why.removesuffix("; add them into the same run")
    return why, lines[at : end + 1]


def command_words(cmd_lines):
    """({VAR: value} the command sets, the arguments of scripts/bench)."""
    words = shlex.split(" ".join(l.rstrip("\\").strip() for l in cmd_lines))
    i = words.index("scripts/bench")
    return dict(w.split("=", 1) for w in words[:i]), words[i + 1 :]


def plan_of(env, cmd_lines, plan_file):
    """The command's plan as scripts/bench would print it first: (cases, seconds of timing,
    seconds its bench crates took to build now), or None where it cannot be listed."""
    sets, args = command_words(cmd_lines)
    e = dict(env, **sets)
    e.pop("OPBENCH_PLAN_CASES", None)
    t0 = time.monotonic()
    if r.cargo(e, "bench", "-q", "--no-run", *args, check=False,
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) != 0:
        return None
    built = time.monotonic() - t0
    list_args = args + (["--list"] if "--" in args else ["--", "--list"])
    listed, startup = r.list_cases(e, list_args, plan_file)
    rows = read_plan(str(plan_file)) if listed.returncode == 0 else []
    if not rows:
        return None
    return len(rows), sum(s for _, _, s, _ in rows) + startup, built


def next_lines(why, cmd_lines, plan):
    """The lines to print: what the run lacks (wrapped at 160), the plan of the command that
    adds it (the estimate is timing alone: its crates are built, and the line says so), then
    the command as it runs."""
    out = r.wrapped(f"next: predict cannot answer from this run yet: {why}", SAY_WIDTH).splitlines()
    if cmd_lines is None:
        return out
    if plan is None:
        est = "not estimated: its cases could not be listed here"
    else:
        cases, secs, built = plan
        done = f"were built just now, in {hms(built)}" if built >= 2 else "are built"
        est = f"plan: {cases} cases, ~{hms(secs)} of timing; no build left in it: its bench crates {done}"
    return out + r.wrapped(f"next, to add them into the same run ({est}):", SAY_WIDTH).splitlines() + list(cmd_lines)


def next_step(env, run, with_peer):
    """See the module's doc."""
    exe = str(r.opbench_exe(env))
    py = env.get("OPBENCH_TORCH_PYTHON") or sys.executable
    # doctor's checks in the run (stack_checks) say whether the peer could time generate()
    try:
        hf = json.loads((run / "stack.json").read_text())["transformers"]["importable"]
    except (OSError, ValueError, KeyError, TypeError):
        hf = True  # not checked: predict's own error says what is missing
    hf = with_peer and hf
    if with_peer and not hf:
        r.say(f"the peer timed no generate(): this Python lacks HF transformers (`{py} -m pip install "
              "transformers`,\n    then `opbench peer RUN` adds it); predict answers with the step")
    profile = ["--profile", "transformers"] if hf else []
    cmd = [exe, "predict", str(run), "--batch", "1", *profile]
    asked = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if asked.returncode == 0:
        r.say("next (where a token's time goes):")
        print(" ".join(shlex.quote(c) for c in cmd), file=sys.stderr)
        return
    why, cmd_lines = suggestion(asked.stderr or asked.stdout or f"exit {asked.returncode}")
    plan = None
    if cmd_lines is not None:
        r.say("planning the command that completes the run (its bench crates are built first)")
        plans = run.parent.parent / "plans"
        plans.mkdir(parents=True, exist_ok=True)
        plan = plan_of(env, cmd_lines, plans / f"{run.name}.next.csv")
    lines = next_lines(why, cmd_lines, plan)
    for line in lines[: len(lines) - len(cmd_lines or [])]:
        r.say(line)
    for line in cmd_lines or []:
        print(line, file=sys.stderr)


if __name__ == "__main__":
    helptext.answer(__doc__)
    if len(sys.argv) != 3:
        r.fail("usage: bench_next.py RUN_DIR WITH_PEER (0 or 1)")
    next_step(dict(r.os.environ), Path(sys.argv[1]), sys.argv[2] == "1")
