//! The report header: when, on what machine, with which binaries (and
//! whether they are optimised builds).

use serde::Serialize;
use std::path::{Component, Path};
use std::time::SystemTime;

/// How a binary was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Build {
    /// Optimised (`--release`).
    Release,
    /// Unoptimised: figures are meaningless.
    Debug,
    /// Could not tell (not under a `release` or `debug` directory).
    Unknown,
}

impl Build {
    /// "release build", "DEBUG build", "unknown build".
    pub fn describe(self) -> &'static str {
        match self {
            Build::Release => "release build",
            Build::Debug => "DEBUG build",
            Build::Unknown => "build profile unknown",
        }
    }
}

/// Where and with what the bench ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Machine {
    /// When the run started, UTC (RFC 3339).
    pub date_utc: String,
    /// Cores available to this process.
    pub nproc: usize,
    /// The CPU model from /proc/cpuinfo.
    pub cpu_model: String,
    /// The kernel release.
    pub kernel: String,
    /// The toolmesh binary that was started.
    pub toolmesh_exe: String,
    /// How that binary was built.
    pub toolmesh_build: Build,
    /// How the bench itself (the load generator) was built.
    pub bench_build: Build,
}

impl Machine {
    /// Reads the machine and classifies `toolmesh_exe`.
    pub(crate) fn read(toolmesh_exe: &Path) -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|k| format!("Linux {}", k.trim()))
            .unwrap_or_else(|_| std::env::consts::OS.to_owned());
        Machine {
            date_utc: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model: cpu_model(&cpuinfo).unwrap_or_else(|| "unknown CPU".to_owned()),
            kernel,
            toolmesh_exe: toolmesh_exe.display().to_string(),
            toolmesh_build: build_of(toolmesh_exe),
            bench_build: own_build(),
        }
    }
}

impl Machine {
    /// A report's first lines: `title`, when, and the machine.
    pub(crate) fn heading(&self, f: &mut std::fmt::Formatter<'_>, title: &str) -> std::fmt::Result {
        writeln!(f, "{title}, {}", self.date_utc)?;
        writeln!(
            f,
            "machine   {} cores, {}, {}",
            self.nproc, self.cpu_model, self.kernel
        )
    }
}

/// This crate's own profile.
fn own_build() -> Build {
    if cfg!(debug_assertions) {
        Build::Debug
    } else {
        Build::Release
    }
}

/// The running executable is known exactly; any other by the cargo
/// profile directory it sits in.
fn build_of(exe: &Path) -> Build {
    let same = std::env::current_exe()
        .ok()
        .and_then(|me| me.canonicalize().ok())
        .zip(exe.canonicalize().ok())
        .is_some_and(|(me, exe)| me == exe);
    if same {
        own_build()
    } else {
        build_by_path(exe)
    }
}

/// `…/release/…` or `…/debug/…`, nearest directory first.
pub(crate) fn build_by_path(exe: &Path) -> Build {
    let parent = exe.parent().unwrap_or(Path::new(""));
    parent
        .components()
        .rev()
        .find_map(|c| match c {
            Component::Normal(name) if name == "release" => Some(Build::Release),
            Component::Normal(name) if name == "debug" => Some(Build::Debug),
            _ => None,
        })
        .unwrap_or(Build::Unknown)
}

/// The first `model name` of /proc/cpuinfo.
pub(crate) fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(key, _)| key.trim() == "model name")
        .map(|(_, value)| value.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The profile comes from the nearest cargo profile directory.
    #[test]
    fn build_from_path() {
        assert_eq!(
            build_by_path(Path::new("/w/target/release/toolmesh")),
            Build::Release
        );
        assert_eq!(
            build_by_path(Path::new("/w/target/debug/toolmesh")),
            Build::Debug
        );
        assert_eq!(
            build_by_path(Path::new("/release/x/target/debug/deps/toolmesh")),
            Build::Debug
        );
        assert_eq!(
            build_by_path(Path::new("/usr/bin/toolmesh")),
            Build::Unknown
        );
    }

    /// The model name line is found wherever it is.
    #[test]
    fn cpu_model_line() {
        let info = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n";
        assert_eq!(
            cpu_model(info).as_deref(),
            Some("Intel(R) Xeon(R) CPU @ 2.20GHz")
        );
        assert_eq!(cpu_model("processor: 0\n"), None);
    }
}
