//! The bridge's own credentials for its upstream (`--bearer-file`, `--bearer-env`, `--header-env`), read into the headers or metadata every request carries.

use crate::error::BridgeError;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use std::path::PathBuf;

/// The bridge's own credentials for its upstream (`bridge grpc` sends
/// them as metadata, `bridge openapi` as headers): never a caller's.
#[derive(Debug, Clone, Default)]
pub struct OutboundAuth {
    /// A file holding the bearer token (`--bearer-file`), read again as
    /// the upstream is reached again (an HTTP API: as it is probed) so a
    /// rotated token is picked up.
    pub bearer_file: Option<PathBuf>,
    /// The variable holding the bearer token (`--bearer-env`).
    pub bearer_env: Option<String>,
    /// Headers and the variables holding their values (`--header-env
    /// NAME=VAR`), e.g. an API key.
    pub header_env: Vec<(String, String)>,
}

impl OutboundAuth {
    /// The headers (or metadata) every request carries, read now, or what
    /// is missing.
    pub(crate) fn headers(&self) -> Result<HeaderMap, BridgeError> {
        let mut headers = HeaderMap::new();
        let bearer = match (&self.bearer_file, &self.bearer_env) {
            (Some(path), _) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| {
                        BridgeError::Credentials(format!("--bearer-file {}: {e}", path.display()))
                    })?
                    .trim()
                    .to_owned(),
            ),
            (None, Some(var)) => Some(env(var, "--bearer-env")?),
            (None, None) => None,
        };
        if let Some(token) = bearer {
            let value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                BridgeError::Credentials(
                    "the bearer token holds characters a header cannot carry".to_owned(),
                )
            })?;
            headers.insert(AUTHORIZATION, value);
        }
        for (name, var) in &self.header_env {
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| BridgeError::Credentials(format!("--header-env {name}={var}: {e}")))?;
            let value = HeaderValue::from_str(&env(var, "--header-env")?)
                .map_err(|e| BridgeError::Credentials(format!("--header-env {name}={var}: {e}")))?;
            headers.insert(header, value);
        }
        Ok(headers)
    }
}

/// The value of `var`, which must be set and not empty.
fn env(var: &str, flag: &str) -> Result<String, BridgeError> {
    std::env::var(var)
        .ok()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| BridgeError::Credentials(format!("{flag}: the variable {var} is not set")))
}
