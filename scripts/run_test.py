"""scripts/run.py's decisions that need no build: whether scripts/bench runs the HF peer
after timing, and the timing modes `--against` gives its workers."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import run  # noqa: E402


def main():
    # the whole workspace: the peer runs; a selection: it does not, and says how to run it
    assert run.peer_wanted([], {}) == (True, None)
    assert run.peer_wanted(["--workspace"], {}) == (True, None)
    wanted, why = run.peer_wanted(["-p", "rmsnorm", "--", "final_norm"], {})
    assert not wanted and "OPBENCH_PEER=1" in why and "opbench peer RUN" in why, why
    # OPBENCH_PEER decides where set
    assert run.peer_wanted(["-p", "rmsnorm"], {"OPBENCH_PEER": "1"}) == (True, None)
    assert run.peer_wanted([], {"OPBENCH_PEER": "0"}) == (False, None)
    # --against keeps the modes the user set, and without a GPU leaves the default
    run.has_gpu = lambda py: False
    assert run.ab_modes({"OPBENCH_MODES": "pipelined,device", "OPBENCH_TORCH_PYTHON": "x"}) == "pipelined,device"
    assert run.ab_modes({"OPBENCH_TORCH_PYTHON": "x"}) is None
    run.has_gpu = lambda py: True
    run.say = lambda *a, **k: None
    assert run.ab_modes({"OPBENCH_TORCH_PYTHON": "x"}) == "pipelined,graph"
    print("run_test: ok")


if __name__ == "__main__":
    main()
