//! rmcp's log lines that are not news: an answer it could not deliver to a
//! client that hung up (a cancellation, which rmcp logs as an ERROR), and
//! every JSON-RPC error answered to a client (logged at WARN with a debug
//! dump; the client reads it in the answer, and the door logs the errors
//! that are the server's own).

use std::fmt::Debug;
use tracing::field::{Field, Visit};
use tracing::{Event, Metadata};
use tracing_subscriber::layer::{Context, Filter};

/// The messages of rmcp's lines this filter drops.
const NOT_NEWS: [&str; 3] = [
    // A client hung up: its answer has no one to go to.
    "fail to response message",
    "failed to send pending response during drain",
    // A JSON-RPC error answered to the client.
    "response error",
];

/// A log filter dropping rmcp's lines that are not news (see the module);
/// every other event passes.
#[derive(Debug, Clone, Copy, Default)]
pub struct QuietRmcp;

impl<S> Filter<S> for QuietRmcp {
    fn enabled(&self, _: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        true
    }

    fn event_enabled(&self, event: &Event<'_>, _: &Context<'_, S>) -> bool {
        if !event.metadata().target().starts_with("rmcp") {
            return true;
        }
        let mut message = Message::default();
        event.record(&mut message);
        !NOT_NEWS.contains(&message.0.as_str())
    }
}

/// The `message` of an event.
#[derive(Default)]
struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            value.clone_into(&mut self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::{Layer, Registry};

    /// Collects the messages of the events it is given.
    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<Vec<String>>>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Seen {
        fn on_event(&self, event: &Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
            let mut message = Message::default();
            event.record(&mut message);
            self.0.lock().unwrap().push(message.0);
        }
    }

    /// rmcp's hang-up and answered-error lines are dropped; its other
    /// lines and everyone else's with the same words pass.
    #[test]
    fn drops_only_rmcp_lines_that_are_not_news() {
        let seen = Seen::default();
        let subscriber = Registry::default().with(seen.clone().with_filter(QuietRmcp));
        tracing::subscriber::with_default(subscriber, || {
            tracing::error!(target: "rmcp::service", error = "channel closed", "failed to send pending response during drain");
            tracing::error!(target: "rmcp::service", "fail to response message");
            tracing::warn!(target: "rmcp::service", id = 1, "response error");
            tracing::error!(target: "rmcp::service", "fail to close sink");
            tracing::warn!(target: "toolmesh_mcp", "response error");
        });
        assert_eq!(
            *seen.0.lock().unwrap(),
            ["fail to close sink", "response error"]
        );
    }
}
