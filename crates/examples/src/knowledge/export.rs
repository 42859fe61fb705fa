//! `export_report`: a slow export of the help-centre articles, one section per article, reporting progress and each section as it goes.

use super::{ARTICLES, Article, words};
use schemars::JsonSchema;
use serde::Deserialize;
use std::time::Duration;
use toolmesh_executor::{CallCx, RiskLevel, Tool, ToolFailure, ToolInfo, ToolOutput};

/// Arguments of `export_report`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ExportReportArgs {
    /// Only the articles about this topic, in plain words (e.g. "billing
    /// refund"); every article when absent.
    #[serde(default)]
    #[schemars(length(min = 1, max = 200))]
    topic: Option<String>,
    /// Milliseconds spent on each article (0 to 2000, default 250): the
    /// export is slow on purpose, to show its progress.
    #[serde(default = "default_pace")]
    #[schemars(range(max = 2000))]
    pace_ms: u64,
}

fn default_pace() -> u64 {
    250
}

/// `export_report`.
pub(super) struct ExportReport;

impl Tool for ExportReport {
    type Args = ExportReportArgs;

    fn info(&self) -> ToolInfo {
        ToolInfo::new(
            "export_report",
            "1.0.0",
            "Export the help-centre articles (all of them, or those about a topic) as one \
             Markdown report, a section per article. Slow: it takes pace_ms per article and \
             reports its progress while it runs. Returns the report and the ids it covers. \
             Read-only.",
        )
        .risk(RiskLevel::Low)
        .read_only(true)
        .idempotent(true)
        .streams_progress(true)
        .timeout(Duration::from_secs(30))
        .owner("knowledge-team")
        .tags(["support", "export", "read-only"])
    }

    async fn call(&self, args: ExportReportArgs, cx: CallCx) -> Result<ToolOutput, ToolFailure> {
        let chosen = articles_about(args.topic.as_deref())?;
        let total = chosen.len();
        let progress = cx.progress();
        let mut report = String::new();
        for (done, article) in chosen.iter().enumerate() {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(args.pace_ms)) => {}
                () = cx.cancelled() => {
                    return Err(ToolFailure::new(format!(
                        "export cancelled after {done} of {total} articles"
                    )));
                }
            }
            let section = format!(
                "## [{}] {}\n\n{}\n\n",
                article.id, article.title, article.body
            );
            progress.partial(section.clone()).await;
            report.push_str(&section);
            let message = format!("exported {} ({} of {total})", article.id, done + 1);
            progress
                .report((done + 1) as f64, Some(total as f64), message)
                .await;
        }
        let ids: Vec<&str> = chosen.iter().map(|a| a.id).collect();
        Ok(
            ToolOutput::text(report.trim_end()).with_data(serde_json::json!({
                "topic": args.topic,
                "articles": ids,
            })),
        )
    }
}

/// The articles sharing a word with `topic` (every article without one),
/// or why there are none.
fn articles_about(topic: Option<&str>) -> Result<Vec<&'static Article>, ToolFailure> {
    let Some(topic) = topic else {
        return Ok(ARTICLES.iter().collect());
    };
    let wanted = words(topic);
    let chosen: Vec<&Article> = ARTICLES
        .iter()
        .filter(|a| {
            let text = words(&format!("{} {}", a.title, a.body));
            wanted.iter().any(|w| text.contains(w))
        })
        .collect();
    if chosen.is_empty() {
        return Err(ToolFailure::new(format!(
            "no article is about {topic:?}; try other words, or leave topic out to export everything"
        )));
    }
    Ok(chosen)
}
