"""A site as built (`Case`), and the families cases are built in."""


from peerlib.base import rel_err


class Case:
    """One site as built: `run` (one call), or `timed(n)` (a sample of n units, per call)
    where a sample is more than n calls of one function; `before` runs ahead of each sample,
    outside it; `calls` calls a unit makes. Its error against float64 (`check`: `op`, `step`
    or None) is judged by Rust; `status` other than ok says why it cannot run."""

    def __init__(self, run=None, err=None, check="op", note="", dims="", calls=1, before=None, timed=None,
                 status="ok"):
        self.run, self.err, self.check, self.note, self.dims = run, err, check, note, dims
        self.calls, self.before, self.timed, self.status = calls, before, timed, status

    def sample(self, c, n):
        if self.timed is not None:
            return self.timed(n)
        if self.before is not None:
            self.before()
        return c.timer.sample(self.run, n)


def refused(status, reason, dims=""):
    """A case that does not run, and why."""
    return Case(status=status, note=reason, dims=dims, check=None)


class Family:
    """Cases built together (they share tensors, a cache or a check): their keys with how
    each is sampled, listed without building, and `build()` → {key: Case}, run on the
    first `prepare` of any of them."""

    def __init__(self, specs, build):
        self.specs = [(tuple(str(v) for v in k), s) for k, s in specs]
        self.build = build
        self.built = None


def alone(keys, max_iters=None):
    return [(k, {"max_iters": max_iters} if max_iters else {}) for k in keys]


def op_case(run, ref, note, c):
    """An op call checked against its float64 reference `ref()` (its output's), timed alone."""
    return Case(run, rel_err(run(), ref()), "op", f"{note}; {c.note_base}")
