//! One Invoke, start to end: resolve the tool, check the arguments, then
//! attempts within one deadline, retrying only what the rules allow.

use crate::DispatcherConfig;
use crate::balance::{self, NoInstance};
use crate::endpoints::{Endpoints, Health};
use crate::error::InvokeError;
use crate::retry::{self, AttemptFailure};
use crate::view::SnapshotView;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use toolmesh::pb::{
    ErrorCode, ExecuteRequest, InvokeRequest, InvokeResponse, ToolResult,
    executor_client::ExecutorClient,
};
use toolmesh::{Snapshot, ToolEntry, ToolErrorExt, ToolRef, schema, suggest};
use tower::retry::budget::{Budget, TpsBudget};
use tracing::{debug, warn};

/// Everything an Invoke needs, shared by every call.
pub(crate) struct Invoker {
    pub(crate) view: Arc<SnapshotView>,
    pub(crate) pool: Arc<Endpoints>,
    pub(crate) config: DispatcherConfig,
    pub(crate) budget: TpsBudget,
    /// Woken when an instance is ejected, so tool health is recomputed.
    pub(crate) ejections: Arc<Notify>,
}

/// How the attempts ended.
enum Outcome {
    /// The executor answered; its result may carry a tool error.
    Answered(ToolResult),
    /// The dispatcher refused or gave up.
    Refused(InvokeError),
    /// The last attempt failed this way.
    Failed(AttemptFailure),
}

impl Invoker {
    /// Runs one call. `snapshot` is the pinned or newest snapshot and
    /// `caller_timeout` the caller's gRPC deadline, if it sent one.
    pub(crate) async fn invoke(
        &self,
        snapshot: Arc<Snapshot>,
        request: InvokeRequest,
        caller_timeout: Option<Duration>,
    ) -> InvokeResponse {
        let started = Instant::now();
        let call_id = if request.call_id.is_empty() {
            uuid::Uuid::new_v4().to_string()
        } else {
            request.call_id.clone()
        };
        let mut response = InvokeResponse {
            call_id: call_id.clone(),
            snapshot_version: snapshot.version(),
            ..InvokeResponse::default()
        };
        let outcome = match self.prepare(&snapshot, &request) {
            Err(refusal) => Outcome::Refused(refusal),
            Ok(entry) => {
                response.tool_version = entry.def.version().to_string();
                self.attempts(
                    &entry,
                    &request,
                    &call_id,
                    started,
                    caller_timeout,
                    &mut response,
                )
                .await
            }
        };
        let result = match outcome {
            Outcome::Answered(result) => result,
            Outcome::Refused(refusal) => refusal.to_tool_error().into_result(),
            Outcome::Failed(failure) => {
                retry::final_error(failure, &request.tool, response.attempts).into_result()
            }
        };
        debug!(
            %call_id,
            tool = %request.tool,
            attempts = response.attempts,
            code = result.error.as_ref().map_or(0, |e| e.code),
            elapsed_us = started.elapsed().as_micros() as u64,
            "invoke done"
        );
        response.result = Some(result);
        response
    }

    /// Resolves the tool and checks the arguments; nothing is sent yet.
    fn prepare(
        &self,
        snapshot: &Snapshot,
        request: &InvokeRequest,
    ) -> Result<Arc<ToolEntry>, InvokeError> {
        let reference =
            ToolRef::parse(&request.tool).map_err(|e| InvokeError::BadReference(e.to_string()))?;
        let entry = snapshot.resolve(&reference).map_err(|e| match e {
            toolmesh::snapshot::ResolveError::UnknownTool { name } => InvokeError::UnknownTool {
                suggestions: suggest::close_names(&name, snapshot.names(), 3)
                    .into_iter()
                    .map(str::to_owned)
                    .collect(),
                name,
            },
            other => InvokeError::BadReference(other.to_string()),
        })?;
        let label = || format!("{}@{}", entry.def.name(), entry.def.version());
        if let Some(reason) = &entry.disabled {
            return Err(InvokeError::Disabled {
                tool: label(),
                reason: reason.to_string(),
            });
        }
        if request.arguments.len() > self.config.max_argument_bytes {
            return Err(InvokeError::ArgumentsTooLarge {
                size: request.arguments.len(),
                limit: self.config.max_argument_bytes,
            });
        }
        let text = if request.arguments.trim().is_empty() {
            "{}"
        } else {
            &request.arguments
        };
        let arguments: Value =
            serde_json::from_str(text).map_err(|e| InvokeError::ArgumentsNotJson(e.to_string()))?;
        schema::check(entry.def.validator(), &arguments).map_err(|violations| {
            InvokeError::ArgumentsInvalid {
                tool: label(),
                violations,
            }
        })?;
        Ok(entry.clone())
    }

    /// Sends attempts until one answers, the rules forbid another, or the
    /// deadline leaves too little for one more.
    async fn attempts(
        &self,
        entry: &ToolEntry,
        request: &InvokeRequest,
        call_id: &str,
        started: Instant,
        caller_timeout: Option<Duration>,
        response: &mut InvokeResponse,
    ) -> Outcome {
        let def = &entry.def;
        let budget = match caller_timeout {
            Some(t) => t
                .saturating_sub(self.config.deadline_margin)
                .min(def.timeout()),
            None => def.timeout(),
        };
        let deadline = started + budget;
        let policy = def.retry();
        let mut tried: Vec<Arc<str>> = Vec::new();
        let mut last: Option<AttemptFailure> = None;
        self.budget.deposit();
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining < self.config.min_attempt_budget {
                return match last {
                    Some(failure) if failure != AttemptFailure::Timeout => Outcome::Failed(failure),
                    _ => Outcome::Refused(InvokeError::DeadlineExceeded {
                        tool: request.tool.clone(),
                        budget,
                    }),
                };
            }
            let pick = match balance::pick(
                entry,
                &self.pool,
                &tried,
                self.config.max_in_flight_per_instance,
            ) {
                Ok(pick) => pick,
                Err(NoInstance {
                    registered,
                    retry_after,
                }) => {
                    return match last {
                        Some(failure) => Outcome::Failed(failure),
                        None => Outcome::Refused(InvokeError::NoHealthyInstance {
                            tool: format!("{}@{}", def.name(), def.version()),
                            registered,
                            retry_after,
                        }),
                    };
                }
            };
            response.attempts += 1;
            response.executor_id = pick.instance.executor_id.to_string();
            tried.push(pick.instance.endpoint.clone());
            let execute = ExecuteRequest {
                call_id: call_id.to_owned(),
                tool: def.name().to_owned(),
                version: def.spec().version.clone(),
                arguments: request.arguments.clone(),
                attempt: response.attempts,
                context: request.context.clone(),
            };
            // Envoy's per_try_timeout: a hung instance costs one slice.
            let attempt_budget = policy
                .attempt_timeout
                .map_or(remaining, |t| t.min(remaining));
            let mut rpc = tonic::Request::new(execute);
            rpc.set_timeout(attempt_budget);
            let failure = {
                let _in_flight = pick.endpoint.start_call();
                let mut client = ExecutorClient::new(pick.endpoint.channel())
                    .max_decoding_message_size(toolmesh::grpc::MAX_CALL_MESSAGE_BYTES)
                    .max_encoding_message_size(toolmesh::grpc::MAX_CALL_MESSAGE_BYTES);
                match tokio::time::timeout(attempt_budget, client.execute(rpc)).await {
                    Err(_) => AttemptFailure::Timeout,
                    Ok(Err(status)) => AttemptFailure::from_status(&status),
                    Ok(Ok(answer)) => {
                        let result = answer.into_inner().result.unwrap_or_default();
                        match &result.error {
                            Some(e) if e.error_code() != ErrorCode::Unspecified => {
                                let failure = AttemptFailure::Reported(e.clone());
                                if !failure.may_retry(def.idempotent())
                                    || response.attempts >= policy.max_attempts
                                {
                                    self.record(
                                        entry,
                                        &pick.instance.endpoint,
                                        &pick.endpoint,
                                        failure.health(),
                                    );
                                    return Outcome::Answered(result);
                                }
                                failure
                            }
                            _ => {
                                self.record(
                                    entry,
                                    &pick.instance.endpoint,
                                    &pick.endpoint,
                                    Health::Good,
                                );
                                return Outcome::Answered(result);
                            }
                        }
                    }
                }
            };
            // A timeout set by a caller's tight deadline says nothing about
            // the instance; one at the tool's own or per-attempt timeout does.
            let health = match failure {
                AttemptFailure::Timeout
                    if attempt_budget == remaining && budget < def.timeout() =>
                {
                    Health::Neutral
                }
                _ => failure.health(),
            };
            self.record(entry, &pick.instance.endpoint, &pick.endpoint, health);
            debug!(%call_id, attempt = response.attempts, ?failure, "attempt failed");
            if response.attempts >= policy.max_attempts || !failure.may_retry(def.idempotent()) {
                return Outcome::Failed(failure);
            }
            if !self.budget.withdraw() {
                warn!(%call_id, tool = def.name(), "retry budget exhausted; not retrying");
                return Outcome::Failed(failure);
            }
            let pause = retry::backoff(&policy, response.attempts + 1)
                .max(failure.retry_after().unwrap_or_default());
            let left = deadline.saturating_duration_since(Instant::now());
            if pause + self.config.min_attempt_budget > left {
                return Outcome::Failed(failure);
            }
            tokio::time::sleep(pause).await;
            last = Some(failure);
        }
    }

    fn record(
        &self,
        entry: &ToolEntry,
        address: &str,
        endpoint: &crate::endpoints::Endpoint,
        health: Health,
    ) {
        let may_eject = balance::may_eject(entry, &self.pool, address);
        if self.pool.record(endpoint, health, may_eject) {
            warn!(
                endpoint = address,
                tool = entry.def.name(),
                "instance ejected after repeated failures"
            );
            self.ejections.notify_one();
        }
    }
}
