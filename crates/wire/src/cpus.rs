//! Which CPUs this process runs on: [`allowed`] reads the set, [`pin`] sets it, for the
//! process and every thread it has or starts.
//!
//! `opbench ab` puts both sides' workers on the same CPUs (`OPBENCH_CPUS`). They take
//! turns, so they never contend; and each side's samples then run on the CPUs the other's
//! ran on a moment before. Left to the scheduler, the two processes sat on different
//! cores of a 2-core VM whose speed differed by up to 1.7× for seconds at a time, and a
//! pair's ratio read that difference (docs/method.md, "CPUs").

/// A CPU list as `taskset -c` writes it: `3`, `0,2`, `4-7`, `0-1,6`. Sorted, no repeats.
pub fn parse(list: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in list.split(',').map(str::trim) {
        let num = |s: &str| {
            s.trim()
                .parse::<usize>()
                .map_err(|_| format!("`{part}` is not a CPU number or range (like 2 or 4-7)"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("`{part}`: the range runs backwards"));
                }
                out.extend(a..=b);
            }
            None => out.push(num(part)?),
        }
    }
    out.sort_unstable();
    out.dedup();
    if out.is_empty() {
        return Err("no CPU named".into());
    }
    Ok(out)
}

/// A CPU list in [`parse`]'s form, ranges joined.
pub fn format(cpus: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if j == i {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// The CPUs this process may run on; where the OS does not say, all of them by count.
pub fn allowed() -> Vec<usize> {
    os::allowed().unwrap_or_else(|| {
        let n = std::thread::available_parallelism().map_or(1, usize::from);
        (0..n).collect()
    })
}

/// Whether [`pin`] can work on this OS.
pub const CAN_PIN: bool = cfg!(any(target_os = "linux", windows));

/// Whether `cpus` can be pinned to here: an OS [`pin`] works on, and each CPU one of
/// [`allowed`].
pub fn usable(cpus: &[usize]) -> Result<(), String> {
    let may = allowed();
    if let Some(c) = cpus.iter().find(|c| !may.contains(c)) {
        return Err(format!(
            "CPU {c} is not one this process may use ({})",
            format(&may)
        ));
    }
    if cpus.is_empty() {
        return Err("no CPU named".into());
    }
    if !CAN_PIN {
        return Err("pinning to CPUs is done on Linux and Windows only".into());
    }
    Ok(())
}

/// Run this process, every thread it has and every thread it starts, on `cpus` only
/// (each one of [`allowed`]).
pub fn pin(cpus: &[usize]) -> Result<(), String> {
    usable(cpus)?;
    os::pin(cpus)
}

/// Run the calling thread only on `cpus`; the process's other threads keep theirs. Not
/// checked against [`allowed`], which is this thread's own set (a thread pinned to one CPU
/// must be able to go back): the OS refuses a set it may not use. A worker times a GPU
/// case's sample this way on one CPU, the same one on both sides (docs/method.md, "CPUs").
pub fn pin_thread(cpus: &[usize]) -> Result<(), String> {
    if cpus.is_empty() {
        return Err("no CPU named".into());
    }
    os::pin_thread(cpus)
}

#[cfg(target_os = "linux")]
mod os {
    fn set_of(cpus: &[usize]) -> libc::cpu_set_t {
        // SAFETY: cpu_set_t is a plain bit array; all zeros is the empty set
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &c in cpus {
            // SAFETY: CPU_SET only writes bit `c` of `set`; c < CPU_SETSIZE is checked
            if c < libc::CPU_SETSIZE as usize {
                unsafe { libc::CPU_SET(c, &mut set) };
            }
        }
        set
    }

    pub fn allowed() -> Option<Vec<usize>> {
        // SAFETY: as in set_of
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is this thread
        let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
        if rc != 0 {
            return None;
        }
        // SAFETY: CPU_ISSET only reads bit `c` of `set`
        let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect();
        (!cpus.is_empty()).then_some(cpus)
    }

    /// Every thread of the process (each task of /proc/self/task), then this one, which
    /// the threads it starts later inherit.
    pub fn pin(cpus: &[usize]) -> Result<(), String> {
        let set = set_of(cpus);
        let tasks: Vec<i32> = std::fs::read_dir("/proc/self/task")
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        for tid in tasks.into_iter().chain([0]) {
            // SAFETY: `set` is a valid cpu_set_t of the size passed
            let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of_val(&set), &set) };
            // a thread that ended since the listing is no error
            if rc != 0 && tid == 0 {
                return Err(format!(
                    "sched_setaffinity: {}",
                    std::io::Error::last_os_error()
                ));
            }
        }
        Ok(())
    }

    /// The calling thread (tid 0) only.
    pub fn pin_thread(cpus: &[usize]) -> Result<(), String> {
        let set = set_of(cpus);
        // SAFETY: `set` is a valid cpu_set_t of the size passed; 0 is the calling thread
        if unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) } != 0 {
            return Err(format!(
                "sched_setaffinity: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(())
    }
}

#[cfg(windows)]
mod os {
    use windows_sys::Win32::System::Threading::{
        GetCurrentProcess, GetCurrentThread, GetProcessAffinityMask, SetProcessAffinityMask,
        SetThreadAffinityMask,
    };

    pub fn allowed() -> Option<Vec<usize>> {
        let (mut process, mut system) = (0usize, 0usize);
        // SAFETY: both pointers are valid for a write of a usize
        let ok = unsafe { GetProcessAffinityMask(GetCurrentProcess(), &mut process, &mut system) };
        (ok != 0 && process != 0).then(|| {
            (0..usize::BITS as usize)
                .filter(|c| process >> c & 1 == 1)
                .collect()
        })
    }

    /// One processor group's mask: the first 64 CPUs.
    fn mask_of(cpus: &[usize]) -> usize {
        cpus.iter()
            .filter(|&&c| c < usize::BITS as usize)
            .fold(0usize, |m, &c| m | 1 << c)
    }

    /// The process's mask covers every thread it has and starts.
    pub fn pin(cpus: &[usize]) -> Result<(), String> {
        let mask = mask_of(cpus);
        // SAFETY: a mask of CPUs the process may use, on its own handle
        if unsafe { SetProcessAffinityMask(GetCurrentProcess(), mask) } == 0 {
            return Err(format!(
                "SetProcessAffinityMask: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(())
    }

    /// The calling thread's mask only (a subset of the process's).
    pub fn pin_thread(cpus: &[usize]) -> Result<(), String> {
        // SAFETY: a mask of CPUs the process may use, on this thread's pseudo-handle
        if unsafe { SetThreadAffinityMask(GetCurrentThread(), mask_of(cpus)) } == 0 {
            return Err(format!(
                "SetThreadAffinityMask: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(())
    }
}

#[cfg(not(any(target_os = "linux", windows)))]
mod os {
    pub fn allowed() -> Option<Vec<usize>> {
        None
    }

    pub fn pin(_cpus: &[usize]) -> Result<(), String> {
        Err("pinning to CPUs is done on Linux and Windows only".into())
    }

    pub fn pin_thread(cpus: &[usize]) -> Result<(), String> {
        pin(cpus)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn a_thread_pinned_alone_leaves_the_others_where_they_were() {
        let all = allowed();
        // `allowed` falls back to every CPU by count: never empty
        let last = all.last().copied().unwrap_or_default();
        let home = all.clone();
        let inside = std::thread::spawn(move || {
            pin_thread(&[last]).map(|()| (allowed(), pin_thread(&home).map(|()| allowed())))
        })
        .join();
        assert!(
            matches!(&inside, Ok(Ok((alone, Ok(back)))) if *alone == vec![last] && *back == all),
            "{inside:?}"
        );
        // the thread that started it was never moved
        assert_eq!(allowed(), all);
        assert!(pin_thread(&[usize::MAX - 1]).is_err());
    }

    #[test]
    fn lists_read_and_write_as_taskset_has_them() {
        assert_eq!(parse("3").unwrap(), vec![3]);
        assert_eq!(parse("0-1,6, 4").unwrap(), vec![0, 1, 4, 6]);
        assert_eq!(format(&parse("0-1,6,4,5,5").unwrap()), "0-1,4-6");
        for bad in ["", "a", "3-1", "1,,2", "-2"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
