//! Executor `knowledge`: `search_kb`, word-overlap search over a small in-process set of help-centre articles, and `export_report`, a slow export of them that streams its progress.

mod export;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::{collections::HashSet, time::Duration};
use toolmesh_executor::{CallCx, Executor, RiskLevel, Tool, ToolFailure, ToolInfo, ToolOutput};

/// The `knowledge` executor.
pub fn executor() -> Executor {
    Executor::new("knowledge")
        .tool(SearchKb)
        .tool(export::ExportReport)
}

struct Article {
    id: &'static str,
    title: &'static str,
    body: &'static str,
}

const ARTICLES: [Article; 8] = [
    Article {
        id: "KB-101",
        title: "Reset your password",
        body: "Open Settings, choose Security, then Reset password. A reset link is emailed to you and expires after 30 minutes. If the email does not arrive, check spam or ask support to verify your account.",
    },
    Article {
        id: "KB-102",
        title: "Enable two-factor authentication",
        body: "Two-factor authentication adds a code from an authenticator app at sign in. Go to Settings, Security, Two-factor and scan the QR code. Keep the recovery codes somewhere safe.",
    },
    Article {
        id: "KB-103",
        title: "Change your billing plan",
        body: "Upgrade or downgrade between Free, Pro and Enterprise plans under Billing. Upgrades apply at once and are prorated; downgrades apply at the end of the billing period.",
    },
    Article {
        id: "KB-104",
        title: "Request a refund",
        body: "Refunds are available within 14 days of a charge for annual plans. Open a support ticket with the invoice number; refunds return to the original payment method within 5 to 10 business days.",
    },
    Article {
        id: "KB-105",
        title: "Export your data",
        body: "Export projects, comments and attachments as a ZIP archive from Settings, Data, Export. Large exports are prepared in the background and a download link is emailed when ready.",
    },
    Article {
        id: "KB-106",
        title: "Invite teammates to a workspace",
        body: "Admins can invite teammates by email from Workspace, Members, Invite. Invitations expire after 7 days. Each seat is billed on the Pro and Enterprise plans.",
    },
    Article {
        id: "KB-107",
        title: "Troubleshoot login problems",
        body: "If you cannot sign in, clear the browser cache, check that caps lock is off and try resetting your password. Accounts lock for 15 minutes after 5 failed login attempts.",
    },
    Article {
        id: "KB-108",
        title: "API rate limits",
        body: "The REST API allows 100 requests per minute per token on Pro and 1000 on Enterprise. Responses over the limit return HTTP 429 with a Retry-After header in seconds.",
    },
];

/// Words too common to say anything about relevance.
const STOP_WORDS: [&str; 24] = [
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "for", "how", "i", "in", "is",
    "it", "my", "of", "on", "or", "the", "to", "what", "you",
];

fn words(text: &str) -> HashSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !STOP_WORDS.contains(&w.as_str()))
        .collect()
}

/// Arguments of `search_kb`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SearchKbArgs {
    /// What to look for, in plain words, e.g. "reset password" or "refund annual plan".
    #[schemars(length(min = 1, max = 500))]
    query: String,
    /// How many articles to return at most, best match first (1 to 10, default 3).
    #[serde(default = "default_limit")]
    #[schemars(range(min = 1, max = 10))]
    limit: u32,
}

fn default_limit() -> u32 {
    3
}

/// One search hit.
#[derive(Debug, Serialize)]
struct Hit {
    id: &'static str,
    title: &'static str,
    score: u32,
    snippet: String,
}

/// `search_kb`.
struct SearchKb;

impl Tool for SearchKb {
    type Args = SearchKbArgs;

    fn info(&self) -> ToolInfo {
        ToolInfo::new(
            "search_kb",
            "1.0.0",
            "Search the help-centre knowledge base for articles that answer a customer's \
             question (passwords, sign-in, two-factor, billing plans, refunds, data export, \
             teammates, API limits). Returns the best-matching articles with their id, title \
             and a snippet; cite the article id when you answer. Read-only.",
        )
        .risk(RiskLevel::Low)
        .read_only(true)
        .idempotent(true)
        .timeout(Duration::from_secs(3))
        .owner("knowledge-team")
        .tags(["support", "search", "read-only"])
    }

    async fn call(&self, args: SearchKbArgs, _cx: CallCx) -> Result<ToolOutput, ToolFailure> {
        let wanted = words(&args.query);
        if wanted.is_empty() {
            return Err(ToolFailure::new(format!(
                "query {:?} has no searchable words; use a few keywords such as \"reset password\"",
                args.query
            )));
        }
        let mut hits: Vec<Hit> = ARTICLES
            .iter()
            .filter_map(|article| {
                let title = words(article.title);
                let body = words(article.body);
                // A title word counts double: titles say what an article is about.
                let score: u32 = wanted
                    .iter()
                    .map(|w| 2 * u32::from(title.contains(w)) + u32::from(body.contains(w)))
                    .sum();
                (score > 0).then(|| Hit {
                    id: article.id,
                    title: article.title,
                    score,
                    snippet: snippet(article.body),
                })
            })
            .collect();
        hits.sort_by(|a, b| b.score.cmp(&a.score).then_with(|| a.id.cmp(b.id)));
        hits.truncate(args.limit.clamp(1, 10) as usize);

        let text = if hits.is_empty() {
            format!(
                "No articles matched {:?}. Try other keywords, or open a support ticket.",
                args.query
            )
        } else {
            let lines: Vec<String> = hits
                .iter()
                .enumerate()
                .map(|(i, h)| format!("{}. [{}] {}: {}", i + 1, h.id, h.title, h.snippet))
                .collect();
            format!(
                "{} article(s) for {:?}:\n{}",
                hits.len(),
                args.query,
                lines.join("\n")
            )
        };
        Ok(ToolOutput::text(text).with_data(serde_json::json!({
            "query": args.query,
            "results": hits,
        })))
    }
}

/// The first sentence of an article.
fn snippet(body: &str) -> String {
    match body.find(". ") {
        Some(end) => body[..=end].to_owned(),
        None => body.to_owned(),
    }
}
