//! The `process_*` metrics every Prometheus client exports (CPU time,
//! memory, file descriptors, start time), read from `/proc` at scrape time
//! on Linux; elsewhere none are exported.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// The process' own figures, read when scraped.
#[derive(Debug, Default)]
pub(crate) struct ProcessCollector;

/// What one read of `/proc` found; a figure that could not be read is `None`.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct ProcessStats {
    /// User and system CPU time, in seconds.
    pub(crate) cpu_seconds: Option<f64>,
    /// Resident set size, in bytes.
    pub(crate) resident_bytes: Option<f64>,
    /// Virtual memory size, in bytes.
    pub(crate) virtual_bytes: Option<f64>,
    /// File descriptors open now.
    pub(crate) open_fds: Option<f64>,
    /// The soft limit on open file descriptors.
    pub(crate) max_fds: Option<f64>,
    /// Start time, in seconds since the Unix epoch.
    pub(crate) start_time_seconds: Option<f64>,
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let stats = ProcessStats::read();
        if let Some(seconds) = stats.cpu_seconds {
            let cpu = ConstCounter::new(seconds);
            let metric = encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                cpu.metric_type(),
            )?;
            cpu.encode(metric)?;
        }
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                stats.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                stats.virtual_bytes,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                stats.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                stats.max_fds,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                stats.start_time_seconds,
            ),
        ];
        for (name, help, value) in gauges {
            let Some(value) = value else { continue };
            let gauge = ConstGauge::new(value);
            let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
            gauge.encode(metric)?;
        }
        Ok(())
    }
}

impl ProcessStats {
    /// Reads this process' figures from `/proc`.
    #[cfg(target_os = "linux")]
    pub(crate) fn read() -> ProcessStats {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        let ticks = rustix::param::clock_ticks_per_second() as f64;
        let page = rustix::param::page_size() as f64;
        let boot = read("/proc/stat").as_deref().and_then(boot_time);
        let mut stats = read("/proc/self/stat")
            .as_deref()
            .map(|stat| parse_stat(stat, ticks, page, boot))
            .unwrap_or_default();
        stats.open_fds = std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|entries| entries.count() as f64);
        stats.max_fds = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .map(|limit| limit as f64);
        stats
    }

    /// Nothing is read where there is no `/proc`.
    #[cfg(not(target_os = "linux"))]
    pub(crate) fn read() -> ProcessStats {
        ProcessStats::default()
    }
}

/// The figures of a `/proc/PID/stat` line: CPU time from `utime` and
/// `stime` (in `ticks` per second), memory from `vsize` (bytes) and `rss`
/// (pages of `page` bytes), the start time from `starttime` (ticks after
/// `boot`, the boot time in Unix seconds). Fields are counted after the
/// command name's closing parenthesis, since the name may hold spaces.
pub(crate) fn parse_stat(stat: &str, ticks: f64, page: f64, boot: Option<f64>) -> ProcessStats {
    let Some((_, after_name)) = stat.rsplit_once(')') else {
        return ProcessStats::default();
    };
    // Field 3 (state) is the first after the name: field N is at N - 3.
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<f64>().ok());
    let cpu_seconds = match (field(14), field(15)) {
        (Some(user), Some(system)) => Some((user + system) / ticks),
        _ => None,
    };
    ProcessStats {
        cpu_seconds,
        virtual_bytes: field(23),
        resident_bytes: field(24).map(|pages| pages * page),
        start_time_seconds: boot
            .zip(field(22))
            .map(|(boot, start)| boot + start / ticks),
        ..ProcessStats::default()
    }
}

/// The boot time (Unix seconds) from `/proc/stat`'s `btime` line.
pub(crate) fn boot_time(proc_stat: &str) -> Option<f64> {
    proc_stat
        .lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|value| value.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stat line whose command name holds spaces and a parenthesis.
    const STAT: &str = "4242 (tool (mesh) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 150 0 0 20 0 9 0 12000 104857600 2560 18446744073709551615 1 1 0 0 0 0 0 4096 17987 0 0 0 17 1 0 0 0 0 0";

    /// Every figure comes from its field, scaled to seconds and bytes.
    #[test]
    fn stat_fields_scale_to_seconds_and_bytes() {
        let stats = parse_stat(STAT, 100.0, 4096.0, Some(1_700_000_000.0));
        assert_eq!(stats.cpu_seconds, Some(4.0));
        assert_eq!(stats.virtual_bytes, Some(104_857_600.0));
        assert_eq!(stats.resident_bytes, Some(2560.0 * 4096.0));
        assert_eq!(stats.start_time_seconds, Some(1_700_000_120.0));
        assert_eq!(stats.open_fds, None);
    }

    /// A truncated or garbled line yields the figures it has, never a panic.
    #[test]
    fn broken_stat_lines_yield_what_they_have() {
        assert_eq!(
            parse_stat("garbage", 100.0, 4096.0, None),
            ProcessStats::default()
        );
        let short = parse_stat("1 (x) S 1 1 1 0 -1 0 0 0 0 0 7 3", 10.0, 4096.0, None);
        assert_eq!(short.cpu_seconds, Some(1.0));
        assert_eq!(short.resident_bytes, None);
        let no_boot = parse_stat(STAT, 100.0, 4096.0, None);
        assert_eq!(no_boot.start_time_seconds, None);
    }

    /// `btime` is found among `/proc/stat`'s lines.
    #[test]
    fn boot_time_is_the_btime_line() {
        let text = "cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 9\n";
        assert_eq!(boot_time(text), Some(1_700_000_000.0));
        assert_eq!(boot_time("cpu 1\n"), None);
    }

    /// This process, read for real: some memory, some descriptors under
    /// a limit, a start in the past.
    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_reads_sensibly() {
        let stats = ProcessStats::read();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(stats.resident_bytes.unwrap() > 0.0, "{stats:?}");
        assert!(stats.virtual_bytes.unwrap() >= stats.resident_bytes.unwrap());
        assert!(stats.cpu_seconds.unwrap() >= 0.0);
        let open = stats.open_fds.unwrap();
        assert!(open >= 3.0 && open <= stats.max_fds.unwrap(), "{stats:?}");
        let start = stats.start_time_seconds.unwrap();
        assert!(
            start <= now + 1.0 && start > now - 86_400.0 * 365.0,
            "{stats:?}"
        );
    }
}
