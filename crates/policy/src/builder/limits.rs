//! `[[limits]]`: rate limits and concurrency quotas by tool and scope.

use super::Builder;
use crate::config;
use crate::limits::LimitRule;
use crate::policy::MAX_RATE_PER_SEC;
use std::num::NonZeroU32;
use toml::Spanned;
use toolmesh::ToolPattern;

impl Builder<'_> {
    /// The `[[limits]]` entries: a tool pattern, a rate with its burst, a concurrency cap.
    pub(super) fn limits(&mut self, raw: Vec<Spanned<config::RawLimit>>) -> Vec<LimitRule> {
        let mut rules = Vec::new();
        for (i, entry) in raw.into_iter().enumerate() {
            let n = i + 1;
            let span = entry.span();
            let l = entry.into_inner();
            let field = |key: &str| format!("[[limits]] #{n} {key}");
            let tool = match l.tool {
                None => ToolPattern::parse("*").ok(),
                Some(t) => {
                    let span = t.span();
                    match ToolPattern::parse(t.get_ref()) {
                        Ok(p) => Some(p),
                        Err(e) => {
                            self.problem(Some(span), field("tool"), e.to_string());
                            None
                        }
                    }
                }
            };
            let rate = l.rate_per_sec.map(|r| (*r.get_ref(), r.span()));
            if let Some((rate, span)) = &rate
                && !(rate.is_finite() && *rate > 0.0 && *rate <= MAX_RATE_PER_SEC)
            {
                let message = format!(
                    "{rate} is out of range: use a number above 0 and at most {MAX_RATE_PER_SEC} \
                     (0.5 = one call every 2 s)"
                );
                self.problem(Some(span.clone()), field("rate_per_sec"), message);
            }
            let burst = match (&l.burst, &rate) {
                (Some(b), None) => {
                    self.problem(
                        Some(b.span()),
                        field("burst"),
                        "needs rate_per_sec: a burst is the size of a rate bucket; add rate_per_sec or remove burst",
                    );
                    None
                }
                (Some(b), Some(_)) => {
                    let burst = NonZeroU32::new(*b.get_ref());
                    if burst.is_none() {
                        self.problem(
                            Some(b.span()),
                            field("burst"),
                            "is 0: use at least 1 (calls that may go at once after a quiet spell)",
                        );
                    }
                    burst
                }
                (None, Some((rate, _))) => {
                    NonZeroU32::new(rate.ceil().clamp(1.0, f64::from(u32::MAX)) as u32)
                }
                (None, None) => None,
            };
            if let Some(m) = &l.max_concurrent
                && *m.get_ref() == 0
            {
                self.problem(
                    Some(m.span()),
                    field("max_concurrent"),
                    "is 0, which would refuse every call: use at least 1, or leave it out",
                );
            }
            if rate.is_none() && l.max_concurrent.is_none() {
                self.problem(
                    Some(span),
                    field("rate_per_sec"),
                    "is missing, and so is max_concurrent: this limit limits nothing; add either or remove the entry",
                );
            }
            if let Some(tool) = tool {
                rules.push(LimitRule {
                    index: n,
                    tool,
                    scope: l.per,
                    rate: rate.zip(burst).map(|((r, _), b)| (r, b)),
                    max_concurrent: l.max_concurrent.map(|m| *m.get_ref()),
                });
            }
        }
        rules
    }
}
