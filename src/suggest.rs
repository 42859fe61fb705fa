//! "Did you mean …?": close names for a tool name that does not exist.

use crate::reference::MAX_NAME_CHARS;

/// The most candidates scored for one name (each costs up to
/// `MAX_NAME_CHARS`² steps).
pub const MAX_SCORED: usize = 1024;

/// Whether `candidate` can reach the similarity [`close_names`] asks for:
/// the edit distance is at least the length difference, so a name more
/// than twice as long (or half as long) as the other is close only by
/// containment.
fn may_be_close(wanted_lower: &str, candidate: &str) -> bool {
    let (short, long) = if wanted_lower.len() <= candidate.len() {
        (wanted_lower.len(), candidate.len())
    } else {
        (candidate.len(), wanted_lower.len())
    };
    long - short <= long / 2
        || (short > 0 && candidate.to_ascii_lowercase().contains(wanted_lower))
        || (short > 0 && wanted_lower.contains(&candidate.to_ascii_lowercase()))
}

/// Up to `limit` candidates closest to `wanted`, best first.
///
/// A candidate counts as close when its normalised Damerau-Levenshtein
/// similarity is at least 0.5, or when one name contains the other.
///
/// The work is bounded whatever the input: a `wanted` longer than any tool
/// name gets no suggestion, candidates whose length alone rules them out
/// are skipped before scoring, and at most [`MAX_SCORED`] are scored.
pub fn close_names<'a>(
    wanted: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    limit: usize,
) -> Vec<&'a str> {
    if wanted.len() > MAX_NAME_CHARS {
        return Vec::new();
    }
    let wanted_lower = wanted.to_ascii_lowercase();
    let mut scored: Vec<(f64, &str)> = candidates
        .into_iter()
        .filter(|candidate| candidate.len() <= MAX_NAME_CHARS)
        .filter(|candidate| may_be_close(&wanted_lower, candidate))
        .take(MAX_SCORED)
        .filter_map(|candidate| {
            let lower = candidate.to_ascii_lowercase();
            let mut score = strsim::normalized_damerau_levenshtein(&wanted_lower, &lower);
            if !wanted_lower.is_empty()
                && (lower.contains(&wanted_lower) || wanted_lower.contains(&lower))
            {
                score = score.max(0.6);
            }
            (score >= 0.5).then_some((score, candidate))
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    scored.dedup_by(|a, b| a.1 == b.1);
    scored
        .into_iter()
        .take(limit)
        .map(|(_, name)| name)
        .collect()
}

/// A sentence for a model: `did you mean "a", "b" or "c"?`, or `None`.
pub fn did_you_mean(names: &[&str]) -> Option<String> {
    let quoted: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    match quoted.as_slice() {
        [] => None,
        [one] => Some(format!("did you mean {one}?")),
        [init @ .., last] => Some(format!("did you mean {} or {last}?", init.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOOLS: [&str; 6] = [
        "search_kb",
        "get_user_info",
        "get_current_time",
        "create_ticket",
        "send_email",
        "acc_echo",
    ];

    /// Typos, missing parts and case differences find the intended tool first.
    #[test]
    fn finds_close_names() {
        let cases = [
            ("serch_kb", "search_kb"),
            ("search", "search_kb"),
            ("get_user", "get_user_info"),
            ("Send_Email", "send_email"),
            ("acc_ech", "acc_echo"),
            ("create_tickets", "create_ticket"),
        ];
        for (wanted, expected) in cases {
            let found = close_names(wanted, TOOLS, 3);
            assert_eq!(found.first(), Some(&expected), "{wanted}: {found:?}");
        }
    }

    /// Names that share nothing get no suggestion, and the limit holds.
    #[test]
    fn unrelated_names_and_limits() {
        assert!(close_names("zzzzqqq", TOOLS, 3).is_empty());
        assert!(close_names("get", TOOLS, 1).len() <= 1);
    }

    /// The sentence reads naturally for one, two and three names.
    #[test]
    fn sentence() {
        assert_eq!(did_you_mean(&[]), None);
        assert_eq!(did_you_mean(&["a"]).unwrap(), "did you mean \"a\"?");
        assert_eq!(
            did_you_mean(&["a", "b", "c"]).unwrap(),
            "did you mean \"a\", \"b\" or \"c\"?"
        );
    }

    /// A name longer than any tool name gets no suggestion and no scoring;
    /// the length filter keeps containment matches.
    #[test]
    fn bounded_work() {
        let huge = "search_kb".repeat(200_000);
        assert!(close_names(&huge, TOOLS, 3).is_empty());
        assert_eq!(close_names("kb", ["search_kb"], 3), ["search_kb"]);
        assert!(may_be_close("abcd", "abcdef"));
        assert!(!may_be_close("ab", "zzzzzzzzzz"));
    }
}
