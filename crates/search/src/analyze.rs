//! Text analysis: words split at punctuation and camelCase, lowercased,
//! stop words dropped, English stems (Snowball's Porter2).

use rust_stemmers::{Algorithm, Stemmer};
use std::sync::LazyLock;

/// Words that carry no meaning for finding a tool: Lucene's English stop
/// set, the remnants of possessives and contractions ("customer's" splits
/// into "customer" and "s"), and the pronouns and question words of a
/// request in plain language ("how do I refund my order").
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with", // Lucene's set
    "s", "t", "d", "ll", "re", "ve", "m", // possessives and contractions
    "i", "me", "my", "we", "our", "you", "your", "its", "do", "does", "can", "how", "what",
    "which", "who", "from", "so", "some", "please",
];

/// The English stemmer (stateless, shared).
static STEMMER: LazyLock<Stemmer> = LazyLock::new(|| Stemmer::create(Algorithm::English));

/// The terms of `text` in order, repeats kept (a field's term frequencies
/// and length count them).
pub(crate) fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in words(text) {
        let lower = word.to_lowercase();
        if STOP_WORDS.contains(&lower.as_str()) {
            continue;
        }
        out.push(STEMMER.stem(&lower).into_owned());
    }
    out
}

/// The pairs of adjacent terms in `terms`, each as one term (`"refund
/// order"`: a space never occurs inside a term). A name's pairs and a
/// query's meet where the query says the name's words in its order.
pub(crate) fn pairs(terms: &[String]) -> impl Iterator<Item = String> + '_ {
    terms
        .windows(2)
        .map(|pair| format!("{} {}", pair[0], pair[1]))
}

/// The words of `text`: runs of letters and digits, each split again at
/// camelCase boundaries (`getUserById` → get, User, By, Id; `HTTPServer`
/// → HTTP, Server). `_ . - /`, spaces and every other punctuation separate.
pub(crate) fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|run| !run.is_empty())
        .flat_map(camel_parts)
}

/// `run` (letters and digits only) split where a lowercase letter or digit
/// meets an uppercase one, and before the last capital of an acronym that a
/// lowercase letter follows.
fn camel_parts(run: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = run.char_indices().collect();
    let mut parts = Vec::new();
    let mut start = 0;
    for i in 1..chars.len() {
        let (at, current) = chars[i];
        let previous = chars[i - 1].1;
        let next_is_lower = chars.get(i + 1).is_some_and(|(_, c)| c.is_lowercase());
        let lower_to_upper =
            (previous.is_lowercase() || previous.is_ascii_digit()) && current.is_uppercase();
        let acronym_end = previous.is_uppercase() && current.is_uppercase() && next_is_lower;
        if lower_to_upper || acronym_end {
            parts.push(&run[start..at]);
            start = at;
        }
    }
    parts.push(&run[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names split at `_ . - /` and at camelCase, acronyms kept whole.
    #[test]
    fn splits_names() {
        let split = |s| words(s).collect::<Vec<_>>();
        assert_eq!(split("get_user_info"), ["get", "user", "info"]);
        assert_eq!(split("kb.search-v2/items"), ["kb", "search", "v2", "items"]);
        assert_eq!(split("getUserById"), ["get", "User", "By", "Id"]);
        assert_eq!(split("HTTPServerError"), ["HTTP", "Server", "Error"]);
        assert_eq!(split("parseJSON"), ["parse", "JSON"]);
        assert_eq!(split("sha256Digest"), ["sha256", "Digest"]);
        assert_eq!(
            split("refund a customer's order"),
            ["refund", "a", "customer", "s", "order"]
        );
    }

    /// Terms are lowercased English stems with stop words dropped, so
    /// inflections meet: "refunds"/"refunded"/"refunding" → "refund".
    #[test]
    fn stems_and_drops_stop_words() {
        assert_eq!(
            terms("Refunds the customer's orders"),
            ["refund", "custom", "order"]
        );
        assert_eq!(terms("refunded"), terms("refunding"));
        assert_eq!(terms("searchArticles"), ["search", "articl"]);
        assert!(terms("how do I do this to it").is_empty());
    }
}
