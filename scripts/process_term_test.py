"""scripts/process_term.py's rounds and table on fake workers with a planted truth: every
process draws its own launch cost, added to every stream-launched call (not to the graph's),
as a GPU's processes do. The probe must print that term for the small kernels, next to
nothing for the graph and the large add, and say so in its table. No torch needed."""
import math
import random
import statistics as st
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import helptext  # noqa: E402
import process_term as pt  # noqa: E402

US = {"mul": 2.0, "mul@s1": 2.0, "mul@s2": 2.0, "mul@s3": 2.0, "rmsnorm": 3.0,
      "kvrow": 3.0, "gemv": 5.0, "bigadd": 70.0, "graph": 1.2}


class Fake:
    """A process whose stream launches each cost `launch` µs more than another's."""

    def __init__(self, env, rng):
        self.launch = rng.gauss(0.0, 0.1)
        self.rng = rng

    def ask(self, kind):
        extra = 0.0 if kind == "graph" else self.launch
        return (US[kind] + extra) * (1 + self.rng.gauss(0.0, 0.0005))

    def stop(self):
        pass


def main():
    helptext.answer(__doc__)
    rng = random.Random(7)
    terms, within, us = pt.probe(12, ["alone", "pair"], start=lambda env: Fake(env, rng),
                                 say=lambda s: None)
    for d in ("alone", "pair"):
        sd = {k: st.pstdev(v) for k, v in terms[d].items()}
        # a ratio of two processes: √2 × 0.1 µs over the kernel's time
        for k in ("mul", "gemv"):
            want = 100 * math.sqrt(2) * 0.1 / US[k]
            assert want / 2 < sd[k] < want * 2, (d, k, sd[k], want)
        assert sd["graph"] < 0.1, (d, sd["graph"])
        assert sd["bigadd"] < sd["gemv"] / 5, (d, sd)
        assert max(within[d]["mul"]) < 0.2, within[d]["mul"]
    text = pt.table(terms, within, us)
    assert text.splitlines()[0].startswith("process term: sd over 12 rounds"), text
    assert len(text.splitlines()) == 5, text
    # the lead is LEAD_MS in the sleep kernel's measured clock: an H100's 1.98 GHz, gfx11's
    # 100 MHz wall clock
    assert pt.lead_cycles(1.98e6) == int(pt.LEAD_MS * 1.98e6)
    assert pt.lead_cycles(1e5) == int(pt.LEAD_MS * 1e5)
    # every design names both runtimes' variable for what it changes
    assert pt.DESIGNS["eager"][1]["HIP_ENABLE_DEFERRED_LOADING"] == "0"
    assert pt.DESIGNS["conn1"][1]["GPU_MAX_HW_QUEUES"] == "1"
    print("process_term_test: ok")


if __name__ == "__main__":
    main()
