//! CPU time of the processes a target's calls pass through, read from `/proc` around a throughput window: what one call costs each process, whatever else the shared machine is doing meanwhile.

/// The processes whose CPU one target's calls cost, in groups (its proxy,
/// its executor); no groups measures nothing.
#[derive(Debug, Clone, Default)]
pub(crate) struct Meter {
    groups: Vec<Vec<i32>>,
}

impl Meter {
    /// Measures each group of processes apart.
    pub(crate) fn new(groups: Vec<Vec<i32>>) -> Self {
        Meter { groups }
    }

    /// CPU time of each group so far, in ns: user and system time of all
    /// its threads, exited ones included (Linux; 0 elsewhere, and for a
    /// process that is gone).
    pub(crate) fn read(&self) -> Vec<u64> {
        let ns_per_tick = 1_000_000_000 / rustix::param::clock_ticks_per_second().max(1);
        self.groups
            .iter()
            .map(|group| group.iter().map(|&pid| cpu_ticks(pid)).sum::<u64>() * ns_per_tick)
            .collect()
    }
}

/// The fields of `/proc/PID/stat` after the command name.
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let (_, rest) = text.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// utime + stime of `pid`, in clock ticks.
pub(crate) fn cpu_ticks(pid: i32) -> u64 {
    let Some(fields) = stat_fields(pid) else {
        return 0;
    };
    let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    field(11).unwrap_or(0) + field(12).unwrap_or(0)
}

/// The processes of process group `group` (nginx: its master and workers).
pub(crate) fn process_group(group: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            stat_fields(pid)
                .and_then(|f| f.get(2)?.parse::<i32>().ok())
                .is_some_and(|pgrp| pgrp == group)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process' CPU time grows while it spins, and a process group
    /// holds its leader.
    #[test]
    fn reads_this_process() {
        let me = i32::try_from(std::process::id()).unwrap();
        let meter = Meter::new(vec![vec![me], vec![]]);
        let before = meter.read();
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < std::time::Duration::from_millis(100) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let after = meter.read();
        assert!(after[0] > before[0], "{before:?} -> {after:?}");
        assert_eq!(after[1], 0);
        let group = rustix::process::getpgrp().as_raw_nonzero().get();
        assert!(process_group(group).contains(&me));
    }
}
