//! The kinds of case a family is made of: what a case's time is made of.

/// What a host-timed case's time is made of, for its family: host-bound (dispatch) cases
/// move with every torch call, the others with the kernels or the CPU's compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Host-timed, bound by the host's dispatch ([`rundir::bound_by_host`]).
    HostBound,
    /// Host-timed, bound by the device or by compute.
    HostTimedBound,
    /// Timed by GPU events, launched without the stream's per-launch path: graph
    /// replays (and the cold device mode).
    Device,
    /// Timed by GPU events around stream launches (the `device` mode): the launch
    /// measure. What each launch costs the device (kernel arguments, the command
    /// processor's path, queue setup) is in its time, as in an eager decode's; a graph
    /// replay carries none of it.
    Launch,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::HostBound => "host-bound",
            Kind::HostTimedBound => "host-timed, device- or compute-bound",
            Kind::Device => "device",
            Kind::Launch => "stream-launched device",
        }
    }

    /// The measure a family of this kind is judged by, for the printout.
    pub fn measure(self) -> &'static str {
        match self {
            Kind::HostBound => "host time of calls bound by the host's dispatch",
            Kind::HostTimedBound => "host time of calls bound by the device or compute",
            Kind::Device => {
                "device time of graph replays (blind to what each launch costs the device)"
            }
            Kind::Launch => "device time of stream launches (each launch's device cost in it)",
        }
    }
}
