"""The worker's clock: a sample of n calls with its own clock around its own loop, and
the host's state over it (the controls, the process's counters, the stretches). Rust
gives the span and chunks of the torch control and the stretches a sample is cut in."""

import math
import statistics
import sys
import time

import torch


def _control_work():
    """The build-independent host control from Python: fixed interpreter work (integer
    hashing into a small dict) that never calls torch, ~0.1–0.3 ms."""
    h, seen = 0x811C9DC5, {}
    for i in range(1500):
        h = ((h ^ i) * 16777619) & 0xFFFFFFFF
        seen[h & 511] = i
    return h


def host_control_ns():
    """The control's time: the faster of two passes (as the Rust control's)."""
    best = math.inf
    for _ in range(2):
        t0 = time.perf_counter_ns()
        _control_work()
        best = min(best, time.perf_counter_ns() - t0)
    return best


class TorchControl:
    """The torch control from Python: the dispatch floor's call (a one-element add, py-add)
    back to back for the span Rust gives, in its chunks, synchronized at both ends, per
    call (as the harness's `control_ns`)."""

    def __init__(self, device, dtype, sync, span_ns, chunk):
        self.sync, self.span_ns, self.chunk = sync, span_ns, chunk
        self.a = torch.ones(1, device=device, dtype=dtype)
        self.b = torch.ones(1, device=device, dtype=dtype)

    def ns(self):
        a, b = self.a, self.b
        self.sync()
        t0 = time.perf_counter_ns()
        calls = 0
        while calls == 0 or time.perf_counter_ns() - t0 < self.span_ns:
            for _ in range(self.chunk):
                torch.add(a, b)
            calls += self.chunk
        self.sync()
        return (time.perf_counter_ns() - t0) / calls


def _nivcsw():
    try:
        import resource  # Unix only
        return resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
    except (ImportError, AttributeError):
        return None


def _this_cpu():
    """The CPU this thread runs on (Linux's sched_getcpu), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        cpu = ctypes.CDLL(None).sched_getcpu()
        return cpu if cpu >= 0 else None
    except (OSError, AttributeError):
        return None


def _steal(cpu):
    """The steal ticks of CPU `cpu` (its /proc/stat line), where Linux tells."""
    if cpu is None:
        return None
    try:
        with open("/proc/stat") as f:
            for line in f:
                fields = line.split()
                if fields and fields[0] == f"cpu{cpu}":
                    return int(fields[8]) if len(fields) > 8 else None
    except (OSError, ValueError):
        return None
    return None


class State:
    """The host's state over one sample: the Python control and the torch control before
    and after it, the process's CPU time, its involuntary context switches, the steal
    ticks of the CPU the thread ran on (None where the OS does not tell, or the thread
    moved), and the slowest and the median stretch of its calls per call."""

    def __init__(self, control):
        self.control = control
        self.control_ns = control.ns()
        self.host_ns = host_control_ns()
        self.on = _this_cpu()
        self.cpu, self.sw, self.st = time.process_time_ns(), _nivcsw(), _steal(self.on)

    def close(self, paces=()):
        on = _this_cpu()
        cpu, sw, st = time.process_time_ns(), _nivcsw(), _steal(self.on)
        steal = None if st is None or self.st is None or on != self.on else st - self.st
        return {"host_ns": self.host_ns, "cpu_ns": cpu - self.cpu,
                "nivcsw": None if sw is None else sw - self.sw, "steal": steal,
                "host_after_ns": host_control_ns(), **stretches(paces),
                "control_ns": self.control_ns, "control_after_ns": self.control.ns()}


class Timed(float):
    """A per-call time with the host's state over its sample (`State`)."""

    def __new__(cls, ns, state):
        t = super().__new__(cls, ns)
        t.state = state
        return t

    def scaled(self, k):
        state = dict(self.state)
        for col in STRETCH_COLUMNS:
            if state.get(col) is not None:
                state[col] *= k
        return Timed(self * k, state)

    def with_stretches(self, paces):
        """This time with its stretches read from `paces` (ns each, in this time's unit)."""
        return Timed(self, dict(self.state, **stretches(paces)))

    @staticmethod
    def total(parts):
        """Samples taken one after another, as one: their sum, the control before the first
        and after the last, their CPU time, switches and steal added up (no stretches: the
        parts are different calls, whose stretches do not add up to one pace)."""
        state = {k: (None if any(p.state.get(k) is None for p in parts) else sum(p.state[k] for p in parts))
                 for k in ("cpu_ns", "nivcsw", "steal")}
        state.update({k: parts[0].state.get(k) for k in ("host_ns", "control_ns")})
        state.update({k: parts[-1].state.get(k) for k in ("host_after_ns", "control_after_ns")})
        return Timed(sum(parts), state)


class Timer:
    """The worker's clock: a sample of n calls back to back, one synchronize at its end."""

    def __init__(self, device, dtype, span_ns, chunk, stretches_):
        self.device = device
        self.stretches = stretches_
        self.control = TorchControl(device, dtype, self.sync, span_ns, chunk)

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def sample(self, fn, n):
        """Per-call ns of n calls back to back with the host's state: the calls run in up to
        `stretches` stretches, the clock read between them, the last ending with the
        device, and the slowest and the median stretch's time per call are kept where there
        are at least 4 (as in Rust's harness)."""
        self.sync()
        state = State(self.control)
        per = max(1, -(-n // self.stretches))
        paces, done = [], 0
        t0 = at = time.perf_counter_ns()
        while done < n:
            k = min(per, n - done)
            for _ in range(k):
                fn()
            if done + k == n:
                self.sync()
            now = time.perf_counter_ns()
            paces.append((now - at) / k)
            at, done = now, done + k
        return Timed((at - t0) / n, state.close(paces))


STRETCH_COLUMNS = ("slowest_ns", "typical_ns")


def stretches(paces):
    """`slowest_ns` and `typical_ns` (the median) of a sample's stretches, per call, where
    there are at least 4 (as in Rust's harness); else none."""
    kept = len(paces) >= 4
    return dict(zip(STRETCH_COLUMNS, (max(paces), statistics.median(paces)) if kept else (None, None)))
