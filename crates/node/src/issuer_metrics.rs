//! The keys of the policy's `[[issuers]]` as metrics: keys held, their age, whether they are stale, and failed fetches.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use toolmesh_governance::Identity;
use toolmesh_identity::issuers::KeyStatus;

/// A gauge: its name, its help and its value for one issuer.
type Gauge = (&'static str, &'static str, fn(&KeyStatus) -> f64);

/// The issuer a series is about.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IssuerLabel {
    issuer: String,
}

/// Scrape-time values of every issuer's keys.
#[derive(Debug)]
pub(crate) struct IssuerMetrics(pub(crate) Identity);

impl Collector for IssuerMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let status = self.0.issuer_status();
        if status.is_empty() {
            return Ok(());
        }
        let gauges: [Gauge; 3] = [
            (
                "toolmesh_issuer_keys",
                "Verification keys held for each [[issuers]] entry (0: its tokens are refused).",
                |s| s.keys as f64,
            ),
            (
                "toolmesh_issuer_keys_stale",
                "1 when the last fetch of an issuer's keys failed and older keys still serve.",
                |s| f64::from(u8::from(s.stale)),
            ),
            (
                "toolmesh_issuer_keys_age_seconds",
                "Time since an issuer's keys were last fetched.",
                |s| s.age.map_or(f64::NAN, |a| a.as_secs_f64()),
            ),
        ];
        for (name, help, value) in gauges {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for s in &status {
                let labels = IssuerLabel {
                    issuer: s.issuer.clone(),
                };
                ConstGauge::new(value(s)).encode(family.encode_family(&labels)?)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "toolmesh_issuer_keys_fetch_failures",
            "Fetches of an issuer's keys (discovery or JWKS) that failed.",
            None,
            MetricType::Counter,
        )?;
        for s in &status {
            let labels = IssuerLabel {
                issuer: s.issuer.clone(),
            };
            ConstCounter::new(s.failures).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}
