//! The bearer token a process presents: fixed, or read from a file at each use (a projected service-account token the kubelet rotates).

use std::path::PathBuf;

/// A token this process sends as `authorization: Bearer …`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// The same token on every request (`--token`, `TOOLMESH_TOKEN`).
    Token(String),
    /// The contents of a file, read again on every use, so a token rotated
    /// in place (a Kubernetes projected service-account token) is the one
    /// sent (`--token-file`, `TOOLMESH_TOKEN_FILE`).
    File(PathBuf),
}

/// Why a credential could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The token file could not be read.
    #[error("cannot read the token file {path}: {source}; check that it is mounted and readable")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The token file holds no token.
    #[error("the token file {path} is empty: it should hold one bearer token")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The token has characters an HTTP header cannot carry.
    #[error(
        "the token{from} has characters a header cannot carry (control characters or non-ASCII)"
    )]
    Unsendable {
        /// ` in FILE` for a file's token, else empty.
        from: String,
    },
}

impl Credential {
    /// The credential of a token flag and a token-file flag: the file when
    /// given, else the token; an empty token is none.
    pub fn from_flags(token: Option<String>, file: Option<PathBuf>) -> Option<Credential> {
        match (file, token) {
            (Some(path), _) => Some(Credential::File(path)),
            (None, Some(token)) if !token.is_empty() => Some(Credential::Token(token)),
            _ => None,
        }
    }

    /// The token to send now (a file's contents, surrounding whitespace trimmed).
    pub fn token(&self) -> Result<String, CredentialError> {
        match self {
            Credential::Token(token) => Ok(token.clone()),
            Credential::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| {
                    CredentialError::Unreadable {
                        path: path.clone(),
                        source,
                    }
                })?;
                let token = text.trim();
                if token.is_empty() {
                    return Err(CredentialError::Empty { path: path.clone() });
                }
                Ok(token.to_owned())
            }
        }
    }

    /// Sets `authorization: Bearer TOKEN` on `metadata`.
    pub fn attach(
        &self,
        metadata: &mut tonic::metadata::MetadataMap,
    ) -> Result<(), CredentialError> {
        let token = self.token()?;
        if crate::set_bearer(metadata, &token) {
            return Ok(());
        }
        Err(CredentialError::Unsendable {
            from: match self {
                Credential::File(path) => format!(" in {}", path.display()),
                Credential::Token(_) => String::new(),
            },
        })
    }
}

/// Sets the bearer token of `credential`, if any, on `metadata`; a token
/// that cannot be read or sent is logged and the request goes without it
/// (the server's refusal then says a token is missing).
pub fn attach_credential(
    credential: Option<&Credential>,
    metadata: &mut tonic::metadata::MetadataMap,
) {
    if let Some(credential) = credential
        && let Err(e) = credential.attach(metadata)
    {
        tracing::warn!(error = %e, "sending the request without its bearer token");
    }
}

impl From<String> for Credential {
    fn from(token: String) -> Self {
        Credential::Token(token)
    }
}

impl From<&str> for Credential {
    fn from(token: &str) -> Self {
        Credential::Token(token.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file's token is read at each use: rewritten in place, the new
    /// one is sent; an empty or missing file is a clear error.
    #[test]
    fn a_token_file_is_read_at_each_use() {
        let dir = std::env::temp_dir().join(format!("credential-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, "first\n").unwrap();
        let credential =
            Credential::from_flags(Some("ignored".into()), Some(path.clone())).unwrap();
        let mut metadata = tonic::metadata::MetadataMap::new();
        credential.attach(&mut metadata).unwrap();
        assert_eq!(crate::bearer(&metadata), Some("first"));
        std::fs::write(&path, "second").unwrap();
        credential.attach(&mut metadata).unwrap();
        assert_eq!(crate::bearer(&metadata), Some("second"));
        std::fs::write(&path, " \n").unwrap();
        let empty = credential.token().unwrap_err().to_string();
        assert!(empty.contains("is empty"), "{empty}");
        std::fs::write(&path, "two\nlines").unwrap();
        let unsendable = credential.attach(&mut metadata).unwrap_err().to_string();
        assert!(unsendable.contains("token in"), "{unsendable}");
        std::fs::remove_dir_all(&dir).unwrap();
        let missing = credential.token().unwrap_err().to_string();
        assert!(missing.contains("cannot read the token file"), "{missing}");
        assert_eq!(Credential::from_flags(Some(String::new()), None), None);
        assert_eq!(
            Credential::from_flags(Some("t".into()), None),
            Some(Credential::Token("t".into()))
        );
    }
}
