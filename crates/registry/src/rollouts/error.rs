//! Why a rollout request is refused, each reason saying what to do instead.

use toolmesh::rollout::{BadShare, Share};

/// Why a rollout request was refused; each says what to do instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RolloutError {
    /// No action given.
    #[error("say what to do with the rollout: action START, SET, PROMOTE or ABORT")]
    NoAction,
    /// The tool reference cannot be read.
    #[error(
        "tool {0:?} is not a tool reference: write name@version to start a rollout (e.g. search_kb@2.0.0) and the name for the other actions"
    )]
    BadTool(String),
    /// START without an exact version.
    #[error(
        "a rollout releases one exact version: write {0}@VERSION (e.g. {0}@2.0.0) as the canary"
    )]
    CanaryNeedsVersion(String),
    /// The share is not one.
    #[error("{0}")]
    BadShare(#[from] BadShare),
    /// The guard's values are out of range.
    #[error("{0}")]
    BadGuard(String),
    /// The tool name is not registered.
    #[error(
        "no tool named {0:?} is known to the registry: start a rollout of a registered tool (its canary version may register later)"
    )]
    UnknownTool(String),
    /// Another rollout of the tool is active.
    #[error(
        "{tool} already has an active rollout of {canary} at {share}: change its share with `toolmesh rollout set {tool} --percent N`, or promote or abort it before starting another"
    )]
    AlreadyActive {
        /// The tool.
        tool: String,
        /// Its canary.
        canary: String,
        /// Its share.
        share: Share,
    },
    /// The tool has no rollout.
    #[error("{0} has no rollout: start one with `toolmesh rollout start {0}@VERSION --percent N`")]
    NoRollout(String),
    /// The rollout is promoted or aborted.
    #[error(
        "the rollout of {label} is {state} already ({by}): start a new one with `toolmesh rollout start` to release again"
    )]
    NotActive {
        /// `name@canary`.
        label: String,
        /// Its state.
        state: &'static str,
        /// Who ended it and why.
        by: String,
    },
    /// The request named another canary than the rollout's.
    #[error(
        "the rollout of {tool} releases {canary}, not {asked}: name the tool without a version to act on it"
    )]
    OtherCanary {
        /// The tool.
        tool: String,
        /// The version the request named.
        asked: String,
        /// The rollout's canary.
        canary: String,
    },
    /// Promote while the canary is not what the bare name would resolve to.
    #[error(
        "cannot promote {label}: promoting gives every caller the newest exposed version, and that is {newest}; make {label} registered, enabled and healthy (and the newest stable version), or abort this rollout"
    )]
    NotNewest {
        /// `name@canary`.
        label: String,
        /// What the bare name resolves to without a rollout.
        newest: String,
    },
}
