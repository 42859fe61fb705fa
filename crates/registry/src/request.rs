//! What a registration request must be before any store looks at it: the
//! executor id, endpoint, execute token and tool count, the lease TTL
//! granted, and each tool's definition validated on its own.

use crate::config::RegistryConfig;
use crate::error::RegistryError;
use crate::keys::{Key, key_of, label};
use std::collections::HashSet;
use std::sync::Arc;
use toolmesh::ToolDef;
use toolmesh::pb::{self, RejectedTool};
use toolmesh::schema::MAX_REGISTRATION_PATTERNS;

/// The parts of a registration request every store checks the same way.
pub(crate) struct Checked {
    pub(crate) executor_id: Arc<str>,
    pub(crate) endpoint: Arc<str>,
    pub(crate) service: Arc<str>,
    pub(crate) ttl: std::time::Duration,
    /// The token the executor's Execute service accepts ("" for none).
    pub(crate) execute_token: Arc<str>,
}

/// Checks the tool count, executor id, endpoint and execute token, and
/// grants the lease TTL.
pub(crate) fn check_request(
    config: &RegistryConfig,
    req: &pb::RegisterRequest,
) -> Result<Checked, RegistryError> {
    let limit = config.max_tools_per_executor;
    if req.tools.len() > limit {
        return Err(RegistryError::TooManyTools {
            count: req.tools.len(),
            limit,
        });
    }
    let executor_id = req.executor_id.trim();
    if executor_id.is_empty() {
        return Err(RegistryError::EmptyExecutorId);
    }
    let endpoint = req.endpoint.trim();
    check_endpoint(endpoint)?;
    let execute_token = check_execute_token(&req.execute_token)?;
    Ok(Checked {
        executor_id: executor_id.into(),
        endpoint: endpoint.into(),
        service: req.service.trim().into(),
        ttl: config.grant_ttl(req.lease_ttl_ms),
        execute_token,
    })
}

/// Validates each spec on its own; the second of a duplicated name@version
/// is rejected.
pub(crate) fn validate_tools(specs: Vec<pb::ToolSpec>) -> (Vec<ToolDef>, Vec<RejectedTool>) {
    let mut seen: HashSet<Key> = HashSet::with_capacity(specs.len());
    let mut accepted = Vec::with_capacity(specs.len());
    let mut rejected = Vec::new();
    let mut patterns = 0;
    for spec in specs {
        let name = spec.name.clone();
        if toolmesh::spec::RESERVED_NAMES.contains(&name.as_str()) {
            rejected.push(RejectedTool {
                reason: format!(
                    "{name:?} is the name of the mesh's own tool search (a dispatcher serves it); register the tool under another name"
                ),
                name,
            });
            continue;
        }
        match ToolDef::new(spec) {
            Err(error) => rejected.push(RejectedTool {
                name,
                reason: error.to_string(),
            }),
            Ok(def) if patterns + def.pattern_count() > MAX_REGISTRATION_PATTERNS => {
                rejected.push(RejectedTool {
                    name,
                    reason: format!(
                        "its {} regular expressions would bring this registration past {MAX_REGISTRATION_PATTERNS} (the limit across all its tools); use fewer patterns (`enum`, `format`, `maxLength`) or register some tools from another executor",
                        def.pattern_count()
                    ),
                });
            }
            Ok(def) => {
                let key = key_of(&def);
                if seen.insert(key.clone()) {
                    patterns += def.pattern_count();
                    accepted.push(def);
                } else {
                    rejected.push(RejectedTool {
                        name,
                        reason: format!(
                            "{} is listed more than once in this registration; the first was kept",
                            label(&key)
                        ),
                    });
                }
            }
        }
    }
    (accepted, rejected)
}

/// Longest execute token accepted.
const MAX_EXECUTE_TOKEN_BYTES: usize = 256;

/// An executor's execute token: empty (none), or printable ASCII that fits
/// an `authorization` header.
fn check_execute_token(token: &str) -> Result<Arc<str>, RegistryError> {
    if token.len() > MAX_EXECUTE_TOKEN_BYTES || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(RegistryError::InvalidExecuteToken {
            limit: MAX_EXECUTE_TOKEN_BYTES,
        });
    }
    Ok(token.into())
}

/// Checks that `endpoint` is `host:port` that a dispatcher can dial: not a
/// wildcard address, not port 0.
fn check_endpoint(endpoint: &str) -> Result<(), RegistryError> {
    toolmesh_transport::check_advertised(endpoint).map_err(|reason| {
        RegistryError::UnroutableEndpoint {
            endpoint: endpoint.to_owned(),
            reason,
        }
    })?;
    let bad = || RegistryError::InvalidEndpoint(endpoint.to_owned());
    let (host, port) = endpoint.rsplit_once(':').ok_or_else(bad)?;
    let port_ok = !port.is_empty()
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u16>().is_ok_and(|p| p != 0);
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            !host.is_empty()
                && host.len() <= 253
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        }
    };
    if port_ok && host_ok {
        Ok(())
    } else {
        Err(bad())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> pb::ToolSpec {
        pb::ToolSpec {
            name: name.into(),
            version: "1.0.0".into(),
            description: "Does it.".into(),
            input_schema: r#"{"type":"object"}"#.into(),
            ..pb::ToolSpec::default()
        }
    }

    /// The names the mesh answers itself (`search_tools`, `call_tool`) are
    /// refused, saying why; the rest of the registration stands.
    #[test]
    fn reserved_names_are_refused() {
        let (accepted, rejected) = validate_tools(vec![
            spec("search_tools"),
            spec("refund"),
            spec("call_tool"),
        ]);
        let accepted: Vec<&str> = accepted.iter().map(ToolDef::name).collect();
        assert_eq!(accepted, ["refund"]);
        let refused: Vec<&str> = rejected.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(refused, ["search_tools", "call_tool"]);
        assert!(
            rejected
                .iter()
                .all(|r| r.reason.contains("register the tool under another name")),
            "{rejected:?}"
        );
    }
}
