//! Executor `support`: `create_ticket` and `send_email`, recorded in memory and de-duplicated by call id.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};
use toolmesh_executor::{CallCx, Executor, RiskLevel, Tool, ToolFailure, ToolInfo, ToolOutput};

/// The `support` executor.
pub fn executor() -> Executor {
    Executor::new("support")
        .tool(CreateTicket::default())
        .tool(SendEmail::default())
}

/// How urgent it is: low (whenever someone has time), normal (the usual),
/// high (today) or urgent (now: the customer is blocked or losing money).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Priority {
    Low,
    Normal,
    High,
    Urgent,
}

impl Priority {
    /// The lower-case name the schema uses.
    fn as_str(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Normal => "normal",
            Priority::High => "high",
            Priority::Urgent => "urgent",
        }
    }
}

/// Records numbered from a first number and indexed by call id, so a
/// repeated call (same `call_id`: a retry) gets the first answer instead of
/// doing the work twice.
struct Ledger<T> {
    first: u64,
    records: Vec<T>,
    by_call: HashMap<String, usize>,
}

impl<T: Clone> Ledger<T> {
    fn new(first: u64) -> Self {
        Ledger {
            first,
            records: Vec::new(),
            by_call: HashMap::new(),
        }
    }

    /// The record for `call_id`, made with `make(number)` the first time;
    /// `true` when it already existed. An empty call id never matches.
    fn once(&mut self, call_id: &str, make: impl FnOnce(u64) -> T) -> (T, bool) {
        if let Some(existing) = self.by_call.get(call_id).and_then(|&i| self.records.get(i)) {
            return (existing.clone(), true);
        }
        let record = make(self.first + self.records.len() as u64);
        if !call_id.is_empty() {
            self.by_call.insert(call_id.to_owned(), self.records.len());
        }
        self.records.push(record.clone());
        (record, false)
    }
}

/// Arguments of `create_ticket`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CreateTicketArgs {
    /// One line saying what is wrong, e.g. "Refund not received for invoice 1234".
    #[schemars(length(min = 1, max = 200))]
    title: String,
    /// The details: what the customer did, what happened, what they expected.
    #[schemars(length(min = 1, max = 10000))]
    body: String,
    /// How urgent the ticket is.
    priority: Priority,
    /// The customer the ticket is about ("u_" and digits), if known.
    #[serde(default)]
    #[schemars(regex(pattern = r"^u_[0-9]+$"))]
    customer_id: Option<String>,
}

/// A ticket as the support desk stores it.
#[derive(Debug, Clone, Serialize)]
struct Ticket {
    ticket_id: String,
    title: String,
    body: String,
    priority: Priority,
    customer_id: Option<String>,
    status: &'static str,
}

/// `create_ticket`.
struct CreateTicket {
    tickets: Arc<Mutex<Ledger<Ticket>>>,
}

impl Default for CreateTicket {
    fn default() -> Self {
        CreateTicket {
            tickets: Arc::new(Mutex::new(Ledger::new(1001))),
        }
    }
}

impl Tool for CreateTicket {
    type Args = CreateTicketArgs;

    fn info(&self) -> ToolInfo {
        ToolInfo::new(
            "create_ticket",
            "1.0.0",
            "Open a support ticket for a problem you cannot solve in the conversation, so a \
             person follows up. Give a one-line title, the details in body, a priority (low, \
             normal, high, urgent; use urgent only when the customer is blocked) and the \
             customer's user id when known. Returns the ticket id (like T-1001) to quote to the \
             customer. Creates a record: call it once per problem.",
        )
        .risk(RiskLevel::Medium)
        .idempotent(false)
        .owner("support-team")
        .tags(["support", "write"])
    }

    async fn call(&self, args: CreateTicketArgs, cx: CallCx) -> Result<ToolOutput, ToolFailure> {
        if args.title.trim().is_empty() {
            return Err(ToolFailure::new(
                "title is blank; say in one line what the problem is",
            ));
        }
        let (ticket, repeated) = self
            .tickets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .once(cx.call_id(), |n| Ticket {
                ticket_id: format!("T-{n}"),
                title: args.title.trim().to_owned(),
                body: args.body.clone(),
                priority: args.priority,
                customer_id: args.customer_id.clone(),
                status: "open",
            });
        let text = format!(
            "Created ticket {} ({} priority): {}",
            ticket.ticket_id,
            ticket.priority.as_str(),
            ticket.title
        );
        Ok(ToolOutput::text(text)
            .with_data(&ticket)
            .with_metadata("deduplicated", repeated.to_string()))
    }
}

/// Arguments of `send_email`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SendEmailArgs {
    /// The recipient's email address, e.g. "ada@example.com".
    #[schemars(
        email,
        regex(pattern = r"^[^@\s]+@[^@\s]+\.[^@\s]+$"),
        length(max = 254)
    )]
    to: String,
    /// The subject line.
    #[schemars(length(min = 1, max = 200))]
    subject: String,
    /// The message, in plain text.
    #[schemars(length(min = 1, max = 20000))]
    body: String,
    /// How urgent the email is; "urgent" marks it high-importance.
    priority: Priority,
}

/// An email as the outbox records it.
#[derive(Debug, Clone, Serialize)]
struct Email {
    message_id: String,
    to: String,
    subject: String,
    body: String,
    priority: Priority,
    status: &'static str,
}

/// `send_email`.
struct SendEmail {
    outbox: Arc<Mutex<Ledger<Email>>>,
}

impl Default for SendEmail {
    fn default() -> Self {
        SendEmail {
            outbox: Arc::new(Mutex::new(Ledger::new(1))),
        }
    }
}

impl Tool for SendEmail {
    type Args = SendEmailArgs;

    fn info(&self) -> ToolInfo {
        ToolInfo::new(
            "send_email",
            "1.0.0",
            "Send an email to a customer. Irreversible: once sent it cannot be recalled, so it \
             needs approval; show the customer the text first. Give the recipient address, a \
             subject, the plain-text body and a priority (low, normal, high, urgent). Returns \
             the message id.",
        )
        .risk(RiskLevel::High)
        .idempotent(false)
        .owner("support-team")
        .tags(["support", "email", "write"])
    }

    async fn call(&self, args: SendEmailArgs, cx: CallCx) -> Result<ToolOutput, ToolFailure> {
        // The example never sends anything: the outbox is the record.
        let (email, repeated) = self
            .outbox
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .once(cx.call_id(), |n| Email {
                message_id: format!("msg-{n:06}"),
                to: args.to.clone(),
                subject: args.subject.clone(),
                body: args.body.clone(),
                priority: args.priority,
                status: "queued",
            });
        Ok(ToolOutput::text(format!(
            "Email {} to {} queued: {}",
            email.message_id, email.to, email.subject
        ))
        .with_data(&email)
        .with_metadata("deduplicated", repeated.to_string()))
    }
}
