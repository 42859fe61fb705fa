//! How a registry is tuned: lease bounds, history depth and health watching.

use std::path::PathBuf;
use std::time::Duration;

/// Settings of one [`Registry`](crate::Registry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryConfig {
    /// Lease granted when a registration asks for 0 ms.
    pub default_ttl: Duration,
    /// Shortest lease granted; shorter requests are raised to it.
    pub min_ttl: Duration,
    /// Longest lease granted; longer requests are lowered to it.
    pub max_ttl: Duration,
    /// How many recent snapshots `Registry::snapshot(version)` can return
    /// (at least 1: the newest).
    pub history: usize,
    /// Whether to watch each executor's `grpc.health.v1` status.
    pub watch_health: bool,
    /// Where disabled tools and tool owners are kept across restarts; `None`
    /// keeps them in memory only.
    pub data_dir: Option<PathBuf>,
    /// Most tools one registration may list.
    pub max_tools_per_executor: usize,
    /// Live executors one owner may have registered at once (each costs a
    /// health-watch connection); anonymous registrations are not counted.
    pub max_executors_per_owner: usize,
    /// TLS of the channels that watch executors' health.
    pub tls: toolmesh_transport::Tls,
    /// Where the registry's metrics are registered (the process' registry).
    pub metrics: toolmesh_telemetry::MetricsRegistry,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            default_ttl: Duration::from_secs(10),
            min_ttl: Duration::from_secs(1),
            max_ttl: Duration::from_secs(300),
            history: 64,
            watch_health: true,
            data_dir: None,
            max_tools_per_executor: 1024,
            max_executors_per_owner: 1000,
            tls: toolmesh_transport::Tls::none(),
            metrics: toolmesh_telemetry::MetricsRegistry::default(),
        }
    }
}

impl RegistryConfig {
    /// The lease granted for `asked_ms`: 0 means the default, anything else
    /// is clamped to `[min_ttl, max_ttl]`.
    pub fn grant_ttl(&self, asked_ms: u32) -> Duration {
        let (min, max) = if self.min_ttl <= self.max_ttl {
            (self.min_ttl, self.max_ttl)
        } else {
            (self.max_ttl, self.min_ttl)
        };
        let asked = match asked_ms {
            0 => self.default_ttl,
            ms => Duration::from_millis(ms.into()),
        };
        asked.clamp(min, max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Leases: 0 gives the default, others are clamped to [1 s, 300 s].
    #[test]
    fn lease_clamping() {
        let config = RegistryConfig::default();
        let cases = [
            (0, 10_000),
            (1, 1_000),
            (999, 1_000),
            (1_000, 1_000),
            (2_500, 2_500),
            (300_000, 300_000),
            (300_001, 300_000),
            (u32::MAX, 300_000),
        ];
        for (asked, granted) in cases {
            assert_eq!(
                config.grant_ttl(asked),
                Duration::from_millis(granted),
                "asked {asked}"
            );
        }
    }

    /// A default outside the bounds is clamped too, and swapped bounds do not panic.
    #[test]
    fn odd_configs_do_not_panic() {
        let config = RegistryConfig {
            default_ttl: Duration::from_secs(900),
            min_ttl: Duration::from_secs(5),
            max_ttl: Duration::from_secs(2),
            ..RegistryConfig::default()
        };
        assert_eq!(config.grant_ttl(0), Duration::from_secs(5));
        assert_eq!(config.grant_ttl(1), Duration::from_secs(2));
    }
}
