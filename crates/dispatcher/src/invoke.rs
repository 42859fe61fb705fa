//! One Invoke, start to end: resolve the tool, check the arguments, then
//! attempts within one deadline, retrying only what the rules allow.

use crate::DispatcherConfig;
use crate::balance::{self, NoInstance};
use crate::endpoints::{Endpoints, Health};
use crate::error::InvokeError;
use crate::governance::Governance;
use crate::retry::{self, AttemptFailure};
use crate::view::SnapshotView;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use toolmesh::pb::{
    ErrorCode, ExecuteRequest, InvokeRequest, InvokeResponse, ToolResult, ToolSpec,
    executor_client::ExecutorClient,
};
use toolmesh::{Snapshot, ToolDef, ToolEntry, ToolErrorExt, ToolRef, schema, suggest};
use toolmesh_governance::audit::{AuditKind, AuditRecord, outcome_of};
use toolmesh_governance::{
    ApprovalNeed, Decision, Permit, Policy, Principal, approval_summary, value_digest,
};
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
    pub(crate) governance: Governance,
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

/// A call that passed every check and may be sent.
struct Prepared {
    entry: Arc<ToolEntry>,
    arguments: Value,
    rule: String,
    /// Held while the call runs: the caller's concurrency slot.
    _permit: Permit,
}

/// What an audit record needs to know about a refusal or a run.
struct Trail {
    rule: Option<String>,
    approval_id: Option<String>,
}

impl Invoker {
    /// Runs one call for `who`. `snapshot` is the pinned or newest snapshot
    /// and `caller_timeout` the caller's gRPC deadline, if it sent one.
    pub(crate) async fn invoke(
        &self,
        snapshot: Arc<Snapshot>,
        who: &Principal,
        request: InvokeRequest,
        caller_timeout: Option<Duration>,
    ) -> InvokeResponse {
        let started = Instant::now();
        let call_id = if request.call_id.is_empty() {
            // From the thread-local generator: no system call per call.
            uuid::Builder::from_random_bytes(rand::random())
                .into_uuid()
                .to_string()
        } else {
            request.call_id.clone()
        };
        let mut response = InvokeResponse {
            call_id: call_id.clone(),
            snapshot_version: snapshot.version(),
            ..InvokeResponse::default()
        };
        let policy = self.governance.policy();
        let mut trail = Trail {
            rule: None,
            approval_id: (!request.approval_id.is_empty()).then(|| request.approval_id.clone()),
        };
        let def;
        // The arguments as parsed once by `prepare`, reused by the audit.
        let mut parsed = None;
        let outcome = match self.prepare(&snapshot, &policy, who, &request) {
            Err((refusal, entry)) => {
                def = entry.map(|e| e.def.clone());
                if let InvokeError::ApprovalRequired { approval_id, .. } = &refusal {
                    trail.approval_id = Some(approval_id.clone());
                }
                Outcome::Refused(refusal)
            }
            Ok(prepared) => {
                def = Some(prepared.entry.def.clone());
                trail.rule = Some(prepared.rule.clone());
                response.tool_version = prepared.entry.def.version().to_string();
                let outcome = self
                    .attempts(
                        &prepared.entry,
                        &request,
                        &call_id,
                        started,
                        caller_timeout,
                        &mut response,
                    )
                    .await;
                if let Outcome::Answered(result) = &outcome
                    && result.error.as_ref().is_none_or(|e| e.code == 0)
                {
                    let session = request
                        .context
                        .as_ref()
                        .map_or("", |c| c.session_id.as_str());
                    self.governance.sessions.record(
                        who,
                        session,
                        prepared.entry.def.name(),
                        &prepared.arguments,
                        &self.governance.sessions.declared_for(&snapshot),
                    );
                }
                parsed = Some(prepared.arguments);
                outcome
            }
        };
        let refusal_kind = match &outcome {
            Outcome::Refused(
                InvokeError::PermissionDenied { .. } | InvokeError::RateLimited { .. },
            ) => Some(AuditKind::Denied),
            Outcome::Refused(InvokeError::ApprovalRequired { .. }) => {
                Some(AuditKind::ApprovalRequested)
            }
            _ => None,
        };
        let mut result = match outcome {
            Outcome::Answered(result) => result,
            Outcome::Refused(refusal) => refusal.to_tool_error().into_result(),
            Outcome::Failed(failure) => {
                retry::final_error(failure, &request.tool, response.attempts).into_result()
            }
        };
        if let Some(def) = &def {
            let deprecated = &def.spec().deprecated;
            if !deprecated.is_empty() {
                result
                    .metadata
                    .insert("toolmesh.deprecated".into(), deprecated.clone());
            }
        }
        debug!(
            %call_id,
            tool = %request.tool,
            attempts = response.attempts,
            code = result.error.as_ref().map_or(0, |e| e.code),
            elapsed_us = started.elapsed().as_micros() as u64,
            "invoke done"
        );
        self.governance.audit(|| {
            let kind = refusal_kind.unwrap_or(AuditKind::Invoke);
            let mut record = match &def {
                Some(def) => {
                    AuditRecord::for_def(kind, who, def, &request.arguments, parsed.as_ref())
                }
                None => {
                    let spec = ToolSpec {
                        name: request.tool.clone(),
                        ..ToolSpec::default()
                    };
                    AuditRecord::new(kind, who, &spec, &request.arguments)
                }
            };
            let context = request.context.clone().unwrap_or_default();
            record.call_id = call_id.clone();
            record.trace_id = context.trace_id;
            record.session_id = context.session_id;
            record.snapshot_version = response.snapshot_version;
            record.executor_id = response.executor_id.clone();
            record.attempts = response.attempts;
            record.outcome = outcome_of(&result);
            record.duration_ms = started.elapsed().as_millis() as u64;
            record.approval_id = trail.approval_id;
            record.rule = trail.rule;
            record.reason = result
                .error
                .as_ref()
                .filter(|e| e.code != 0 && refusal_kind.is_some())
                .map(|e| e.message.clone());
            record
        });
        response.result = Some(result);
        response
    }

    /// Resolves the tool and runs every check, in the order a model can act
    /// on: exists, may be used, enabled, arguments, preconditions, approval,
    /// rate. Nothing is sent yet.
    #[allow(clippy::result_large_err)]
    fn prepare(
        &self,
        snapshot: &Snapshot,
        policy: &Policy,
        who: &Principal,
        request: &InvokeRequest,
    ) -> Result<Prepared, (InvokeError, Option<Arc<ToolEntry>>)> {
        let bare = |e: InvokeError| (e, None);
        let reference = ToolRef::parse(&request.tool)
            .map_err(|e| bare(InvokeError::BadReference(e.to_string())))?;
        let entry = snapshot.resolve(&reference).map_err(|e| match e {
            toolmesh::snapshot::ResolveError::UnknownTool { name } => {
                // Only names this caller may use are offered.
                let visible = snapshot.names().filter(|n| {
                    snapshot
                        .versions(n)
                        .last()
                        .is_some_and(|e| policy.decide(who, e.def.spec()).is_allowed())
                });
                bare(InvokeError::UnknownTool {
                    suggestions: suggest::close_names(&name, visible, 3)
                        .into_iter()
                        .map(str::to_owned)
                        .collect(),
                    name,
                })
            }
            other => bare(InvokeError::BadReference(other.to_string())),
        })?;
        let fail = |e: InvokeError| (e, Some(entry.clone()));
        let def = &entry.def;
        let label = || format!("{}@{}", def.name(), def.version());
        let (rule, approval) = match policy.decide(who, def.spec()) {
            Decision::Deny { reason } => {
                return Err(fail(InvokeError::PermissionDenied {
                    tool: label(),
                    reason,
                }));
            }
            Decision::Allow { rule, approval } => (rule, approval),
        };
        if let Some(reason) = &entry.disabled {
            return Err(fail(InvokeError::Disabled {
                tool: label(),
                reason: reason.to_string(),
            }));
        }
        if request.arguments.len() > self.config.max_argument_bytes {
            return Err(fail(InvokeError::ArgumentsTooLarge {
                size: request.arguments.len(),
                limit: self.config.max_argument_bytes,
            }));
        }
        let text = if request.arguments.trim().is_empty() {
            "{}"
        } else {
            &request.arguments
        };
        let arguments: Value = serde_json::from_str(text)
            .map_err(|e| fail(InvokeError::ArgumentsNotJson(e.to_string())))?;
        schema::check(def.validator(), &arguments).map_err(|violations| {
            fail(InvokeError::ArgumentsInvalid {
                tool: label(),
                violations,
            })
        })?;
        let session = request
            .context
            .as_ref()
            .map_or("", |c| c.session_id.as_str());
        self.governance
            .sessions
            .check(
                who,
                session,
                def.name(),
                &def.spec().preconditions,
                &arguments,
            )
            .map_err(|e| fail(InvokeError::PreconditionFailed(e.to_string())))?;
        if approval == ApprovalNeed::Required {
            self.check_approval(def, who, request, &arguments)
                .map_err(fail)?;
        }
        // Without [[limits]] there is nothing to count (and no lock to take).
        let limits = policy.limits();
        let permit = if limits.is_empty() {
            Permit::unlimited()
        } else {
            limits.check(def.name(), &who.key()).map_err(|limited| {
                fail(InvokeError::RateLimited {
                    message: limited.message,
                    retry_after: limited.retry_after,
                })
            })?
        };
        Ok(Prepared {
            entry: entry.clone(),
            arguments,
            rule,
            _permit: permit,
        })
    }

    /// Consumes the approval the call carries, or asks for one.
    fn check_approval(
        &self,
        def: &ToolDef,
        who: &Principal,
        request: &InvokeRequest,
        arguments: &Value,
    ) -> Result<(), InvokeError> {
        let digest = value_digest(arguments);
        let version = def.version().to_string();
        let approvals = &self.governance.approvals;
        if !request.approval_id.is_empty() {
            return approvals
                .consume(&request.approval_id, def.name(), &version, &digest, who)
                .map_err(|e| InvokeError::ApprovalUnusable(e.to_string()));
        }
        let summary = approval_summary(
            &format!("{}@{version}", def.name()),
            who,
            def.input_schema(),
            arguments,
            &digest,
        );
        let ticket = approvals
            .request(def.name(), &version, &digest, who, &summary)
            .map_err(|e| InvokeError::ApprovalUnusable(e.to_string()))?;
        Err(InvokeError::ApprovalRequired {
            tool: format!("{}@{version}", def.name()),
            approval_id: ticket.id,
            summary,
        })
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
        let (budget, bound) = toolmesh::grpc::call_budget(caller_timeout, def.timeout());
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
                // The channel enforces the request's grpc-timeout itself
                // (tonic's GrpcTimeout layer): no second timer per call.
                match client.execute(rpc).await {
                    Err(status) => AttemptFailure::from_status(&status),
                    Ok(answer) => {
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
                    if attempt_budget == remaining && bound == toolmesh::grpc::Bound::Caller =>
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
        // Walking the tool's instances matters only when a failure may eject.
        let may_eject = health == Health::Bad && balance::may_eject(entry, &self.pool, address);
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
