//! Which text format `/metrics` answers in: the Prometheus text format
//! 0.0.4 when the scraper's `Accept` prefers it by name (`text/plain`, as
//! promtool-fed scripts and older scrapers ask), OpenMetrics otherwise
//! (Prometheus asks for it first; no header and wildcards get it too).

/// A text exposition format of the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exposition {
    /// OpenMetrics 1.0.0 (`# EOF`, `# UNIT`, info and counter families).
    OpenMetrics,
    /// The Prometheus text format, version 0.0.4.
    PrometheusText,
}

/// The media type of OpenMetrics.
const OPENMETRICS_TYPE: &str = "application/openmetrics-text";
/// The OpenMetrics versions a scraper may ask for that the 1.0.0 text
/// answers (0.0.1 is what Prometheus 2.x names its earlier parser; the
/// syntax it reads is the same).
const OPENMETRICS_VERSIONS: [&str; 2] = ["1.0.0", "0.0.1"];

impl Exposition {
    /// The format an `Accept` header asks for: the acceptable range with
    /// the highest `q` (the earliest among equals), the text format only
    /// when such a range names `text/plain`; no header, wildcards, or a
    /// header that names neither format get OpenMetrics.
    pub fn negotiate(accept: Option<&str>) -> Exposition {
        let Some(accept) = accept else {
            return Exposition::OpenMetrics;
        };
        let mut best: Option<(f32, Exposition)> = None;
        for range in accept.split(',') {
            let Some((format, q)) = Self::of_range(range) else {
                continue;
            };
            if q > 0.0 && best.is_none_or(|(best_q, _)| q > best_q) {
                best = Some((q, format));
            }
        }
        best.map_or(Exposition::OpenMetrics, |(_, format)| format)
    }

    /// The format one media range of an `Accept` header names and its `q`
    /// (1 when absent); `None` for a range this server cannot answer or
    /// that does not parse.
    fn of_range(range: &str) -> Option<(Exposition, f32)> {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next()?.to_ascii_lowercase();
        let mut q = 1.0f32;
        let mut version = None;
        for param in parts {
            let (name, value) = param.split_once('=')?;
            let value = value.trim().trim_matches('"');
            match name.trim().to_ascii_lowercase().as_str() {
                "q" => q = value.parse().ok().filter(|q| (0.0..=1.0).contains(q))?,
                "version" => version = Some(value.to_owned()),
                _ => {}
            }
        }
        let format = match media.as_str() {
            OPENMETRICS_TYPE
                if version
                    .as_deref()
                    .is_none_or(|v| OPENMETRICS_VERSIONS.contains(&v)) =>
            {
                Exposition::OpenMetrics
            }
            "text/plain" if version.as_deref().is_none_or(|v| v == "0.0.4") => {
                Exposition::PrometheusText
            }
            "text/*" | "*/*" => Exposition::OpenMetrics,
            _ => return None,
        };
        Some((format, q))
    }

    /// The `Content-Type` of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Exposition::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Exposition::PrometheusText => {
                prometheus_client::encoding::prometheus_text::CONTENT_TYPE
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Exposition::{OpenMetrics, PrometheusText};
    use super::*;

    /// What Prometheus 2.x sends gets OpenMetrics, and so do no header and
    /// curl's `*/*`; an explicit `text/plain` (0.0.4) gets the text format.
    #[test]
    fn scrapers_get_what_they_prefer() {
        let cases = [
            (
                Some(
                    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
                ),
                OpenMetrics,
            ),
            (None, OpenMetrics),
            (Some("*/*"), OpenMetrics),
            (Some("text/plain; version=0.0.4"), PrometheusText),
            (Some("Application/OpenMetrics-Text"), OpenMetrics),
            (
                Some("text/plain;version=0.0.4;q=0.5, application/openmetrics-text;q=0.9"),
                OpenMetrics,
            ),
            (
                Some("application/openmetrics-text;q=0.3, text/plain;q=0.9"),
                PrometheusText,
            ),
            // The earliest of equals wins.
            (
                Some("text/plain, application/openmetrics-text"),
                PrometheusText,
            ),
            (
                Some("application/openmetrics-text, text/plain"),
                OpenMetrics,
            ),
        ];
        for (accept, expected) in cases {
            assert_eq!(Exposition::negotiate(accept), expected, "{accept:?}");
        }
    }

    /// Ranges this server cannot answer, refused ones (q=0) and broken
    /// ones are passed over; with nothing left OpenMetrics answers.
    #[test]
    fn unanswerable_ranges_are_passed_over() {
        let cases = [
            (Some("application/json"), OpenMetrics),
            (
                Some("application/openmetrics-text;version=2.0.0"),
                OpenMetrics,
            ),
            (Some("application/openmetrics-text;q=0"), OpenMetrics),
            (
                Some("application/openmetrics-text;q=abc, text/plain;q=0.1"),
                PrometheusText,
            ),
            (Some("application/openmetrics-text;q=7"), OpenMetrics),
            (
                Some("text/plain;version=0.0.5, application/openmetrics-text;q=0.2"),
                OpenMetrics,
            ),
            (
                Some("text/plain;version=0.0.5, text/plain;q=0.2"),
                PrometheusText,
            ),
            (
                Some("application/openmetrics-text;version=\"1.0.0\""),
                OpenMetrics,
            ),
            (Some(""), OpenMetrics),
            (Some(",;,=;"), OpenMetrics),
        ];
        for (accept, expected) in cases {
            assert_eq!(Exposition::negotiate(accept), expected, "{accept:?}");
        }
    }

    /// Each format names its own content type.
    #[test]
    fn content_types() {
        assert!(OpenMetrics.content_type().starts_with(OPENMETRICS_TYPE));
        assert!(
            PrometheusText
                .content_type()
                .starts_with("text/plain; version=0.0.4")
        );
    }
}
