"""The test suite, as CI runs it (`scripts/test`, `run.py test`), and `run.py test-torch
VERSION`: builds against another torch from PyPI and tests it. See scripts/run.py for the
build environment these use; run.py starts this file as a process (`suite.py test`,
`suite.py test-torch VERSION`) and never imports it."""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import helptext
import run as r

DEBIAN_HIP = Path("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5")


def install_test_packages():
    """Debian's packages the tests use where apt can install them (root, CI): a real HIP
    runtime with no GPU (libamdhip64-5: the "ROCm runtime, no AMD GPU" answer) and clang
    (MSVC name mangling, scripts/check-windows --names)."""
    want = []
    if sys.platform.startswith("linux") and not DEBIAN_HIP.exists():
        want.append("libamdhip64-5")
    if not shutil.which("clang++"):
        want.append("clang")
    if not want or not shutil.which("apt-get") or not hasattr(os, "geteuid") or os.geteuid() != 0:
        return
    print(f"\n== apt-get install {' '.join(want)}", flush=True)
    quiet = dict(stdout=subprocess.DEVNULL)
    if subprocess.run(["apt-get", "install", "-y", "-qq", *want], **quiet).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], **quiet)
        subprocess.run(["apt-get", "install", "-y", "-qq", *want], check=True, **quiet)


def test(env=None):
    env = env or r.build_env()
    # a from-scratch build gains nothing from incremental state, which is GBs of disk
    env.setdefault("CARGO_INCREMENTAL", "0")
    install_test_packages()

    def step(name):
        print(f"\n== {name}", flush=True)

    step("rustfmt")
    r.cargo(env, "fmt", "--all", "--", "--check")
    step("clippy")
    r.cargo(env, "clippy", "--workspace", "--all-targets", "--all-features", "--", "-D", "warnings")
    step("docs")
    r.cargo(dict(env, RUSTDOCFLAGS="-D warnings"), "doc", "--workspace", "--all-features", "--no-deps", "--quiet")
    step("tests")
    r.cargo(env, "test", "--workspace", "--all-features")
    step("crosscheck.py")
    # with the Python that has torch: the cross-check rebuilds cases in PyTorch
    subprocess.run([env["OPBENCH_TORCH_PYTHON"], str(r.ROOT / "scripts" / "crosscheck_test.py")], env=env, check=True)
    step("peer.py")
    subprocess.run([env["OPBENCH_TORCH_PYTHON"], str(r.ROOT / "scripts" / "peer_test.py")], env=env, check=True)
    step("cpu_slices.py")
    subprocess.run([sys.executable, str(r.ROOT / "scripts" / "cpu_slices_test.py")], env=env, check=True)
    step("run.py")
    subprocess.run([sys.executable, str(r.ROOT / "scripts" / "run_test.py")], env=env, check=True)
    step("process_term.py")
    subprocess.run([sys.executable, str(r.ROOT / "scripts" / "process_term_test.py")], env=env, check=True)
    step("bench cases once (quick grid)")
    r.cargo(
        dict(env, OPBENCH_PROFILE="quick", OPBENCH_DEVICE=env.get("OPBENCH_DEVICE", "cpu")),
        "bench", "--workspace", "--benches", "--", "--test",
    )
    step("doctor (this machine: no GPU)")
    doctor_says_no_gpu(env)
    if shutil.which("clang++") and shutil.which("llvm-nm"):
        step("check-windows --names (MSVC mangling of the symbols the Rust side declares)")
        subprocess.run(["bash", str(r.ROOT / "scripts" / "check-windows"), "--names"], env=env, check=True)
    step("ok")


def doctor_says_no_gpu(env):
    """`opbench doctor` on this GPU-less machine: exit 0 for the CPU, exit 1 naming why for
    OPBENCH_DEVICE=gpu, and, where Debian's HIP runtime is installed, its answer."""
    r.layout(env)
    exe = str(r.opbench_exe(env))
    t0 = time.monotonic()
    ok = subprocess.run([exe, "doctor"], env=env, capture_output=True, text=True)
    took = time.monotonic() - t0
    print(ok.stdout, end="")
    if ok.returncode != 0 or "verdict    ok: scripts/bench can measure cpu" not in ok.stdout:
        r.fail(f"opbench doctor: exit {ok.returncode}, expected 0 and the CPU measurable: {ok.stderr}", 1)
    if DEBIAN_HIP.exists() and "a ROCm runtime is here" not in ok.stdout:
        r.fail(f"opbench doctor: {DEBIAN_HIP} is installed but doctor does not say so", 1)
    gpu = subprocess.run([exe, "doctor", "--device", "gpu"], env=env, capture_output=True, text=True)
    if gpu.returncode != 1 or "no GPU is usable" not in gpu.stdout:
        r.fail(f"opbench doctor --device gpu: exit {gpu.returncode}, expected 1 and why", 1)
    check = subprocess.run([exe, "doctor", "--check", "--device", "gpu"], env=env, capture_output=True, text=True)
    if check.returncode != 1 or len(check.stderr.strip().splitlines()) != 1:
        r.fail(f"opbench doctor --check --device gpu: exit {check.returncode}, expected 1 and one line", 1)
    print(f"doctor: {took:.1f} s; --device gpu: exit 1 ({check.stderr.strip()})", flush=True)


def test_torch(version):
    for var in ("OPBENCH_PYTHON", "VIRTUAL_ENV", "CONDA_PREFIX", "OPBENCH_VENV"):
        os.environ.pop(var, None)
    os.environ["OPBENCH_TORCH_VERSION"] = version
    env = r.build_env()
    tag = f"(torch {env['OPBENCH_TORCH']}, tch {env['OPBENCH_TCH']})"
    print(f"\n== tests {tag}", flush=True)
    r.cargo(env, "test", "--workspace", "--all-features")
    print(f"\n== bench cases once (quick grid) {tag}", flush=True)
    r.cargo(dict(env, OPBENCH_PROFILE="quick", OPBENCH_DEVICE="cpu"), "bench", "--workspace", "--benches", "--", "--test")
    print(f"\n== a quick CPU run {tag}", flush=True)
    lay = r.layout(env)
    run = f"test-torch-{version}-{time.strftime(lay['run_id_format'], time.gmtime())}"
    out = r.ROOT / "target" / "opbench"
    small = dict(
        env,
        OPBENCH_OUT=str(out),
        OPBENCH_RUN=run,
        OPBENCH_PROFILE="quick",
        OPBENCH_DEVICE="cpu",
        OPBENCH_SAMPLES="10",
        OPBENCH_WARMUP_MS="20",
        OPBENCH_MEASURE_MS="40",
    )
    r.cargo(small, "bench", "-p", "linear", "-p", "rmsnorm", "--benches", "--", "/decode/b1/")
    results = r.run_dir(lay, out, run) / lay["results"]
    if not results.exists() or results.stat().st_size == 0:
        r.fail(f"{results}: not written", 1)
    subprocess.run([str(r.opbench_exe(env)), "report", str(r.run_dir(lay, out, run))], check=True)
    print(f"\n== ok: run directory {out / 'runs' / run} {tag}", flush=True)


def main(argv):
    helptext.answer(__doc__, argv)
    if argv == ["test"]:
        test()
    elif len(argv) == 2 and argv[0] == "test-torch":
        test_torch(argv[1])
    else:
        r.fail("usage: suite.py test | suite.py test-torch VERSION (e.g. 2.10.0)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
