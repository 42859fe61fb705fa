//! `[approval]`: who approves, how long tickets live, and which calls need one.

use super::Builder;
use crate::approval::{ApprovalSettings, DEFAULT_MAX_OPEN_PER_CALLER, DEFAULT_TTL, MAX_TICKETS};
use crate::config;
use crate::policy::{ApprovalRules, MAX_TTL_SECS};
use std::time::Duration;
use toolmesh::pb::RiskLevel;

impl Builder<'_> {
    /// The `[approval]` table, with its defaults and bounds.
    pub(super) fn approval(&mut self, raw: config::RawApproval) -> ApprovalRules {
        let approver_roles = match raw.approver_roles {
            None => ApprovalSettings::default().approver_roles,
            Some(roles) => {
                let span = roles.span();
                let roles = roles.into_inner();
                if roles.is_empty() {
                    self.problem(
                        Some(span.clone()),
                        "approval.approver_roles".into(),
                        "is empty, so nobody could approve: name at least one role, e.g. [\"approver\"]",
                    );
                }
                self.names(roles, &span, "approval.approver_roles")
            }
        };
        let ttl = match raw.ttl_secs {
            None => DEFAULT_TTL,
            Some(ttl) => {
                let secs = *ttl.get_ref();
                if !(1..=MAX_TTL_SECS).contains(&secs) {
                    self.problem(
                        Some(ttl.span()),
                        "approval.ttl_secs".into(),
                        format!("{secs} is out of range: use 1..={MAX_TTL_SECS} (default 900, 15 minutes)"),
                    );
                }
                Duration::from_secs(secs)
            }
        };
        let max_open_per_caller = match raw.max_open_per_caller {
            None => DEFAULT_MAX_OPEN_PER_CALLER,
            Some(max) => {
                let n = *max.get_ref();
                let limit = MAX_TICKETS as u64;
                if !(1..=limit).contains(&n) {
                    self.problem(
                        Some(max.span()),
                        "approval.max_open_per_caller".into(),
                        format!("{n} is out of range: use 1..={limit} (default {DEFAULT_MAX_OPEN_PER_CALLER})"),
                    );
                }
                usize::try_from(n).unwrap_or(MAX_TICKETS)
            }
        };
        ApprovalRules {
            settings: ApprovalSettings {
                approver_roles,
                ttl,
                max_open_per_caller,
            },
            require_for_risk: raw.require_for_risk.map_or(Some(RiskLevel::High), |t| t.0),
            require_for_tools: self.patterns(raw.require_for_tools, "approval.require_for_tools"),
            pre_approved_principals: raw.pre_approved_principals,
        }
    }
}
