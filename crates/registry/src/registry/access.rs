//! The etcd store's TLS files and credentials (the `--etcd-*` settings),
//! checked and read into the etcd client's options.

use std::path::{Path, PathBuf};
use toolmesh_etcd::{ClientOptions, Credentials};
use toolmesh_transport::{Tls, TlsError, TlsFiles};

/// How a registry reaches etcd: TLS (`https://`; a client certificate for
/// etcd's `--client-cert-auth`) and the etcd user it authenticates as. The
/// default is plaintext without authentication.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct EtcdAccess {
    /// The CA that signed etcd's server certificate; setting it makes the
    /// connections to etcd TLS.
    pub ca: Option<PathBuf>,
    /// The client certificate to present to etcd.
    pub cert: Option<PathBuf>,
    /// The key of `cert`.
    pub key: Option<PathBuf>,
    /// The etcd user to authenticate as.
    pub user: Option<String>,
    /// Its password, given by value (from the environment, never a flag).
    pub password: Option<String>,
    /// A file holding its password (a trailing newline is dropped).
    pub password_file: Option<PathBuf>,
}

/// The password stays out of logs.
impl std::fmt::Debug for EtcdAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdAccess")
            .field("ca", &self.ca)
            .field("cert", &self.cert)
            .field("key", &self.key)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("password_file", &self.password_file)
            .finish()
    }
}

/// `--etcd-*` settings that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum EtcdAccessError {
    /// A certificate without its key or the other way round.
    #[error(
        "--etcd-cert and --etcd-key go together: give both (the client certificate etcd's --client-cert-auth asks for, and its key)"
    )]
    HalfIdentity,
    /// A client certificate for a plaintext connection.
    #[error(
        "--etcd-cert needs --etcd-ca: the CA that signed etcd's server certificate (its --cert-file), which makes the connection TLS"
    )]
    IdentityWithoutCa,
    /// A TLS file could not be read.
    #[error("etcd TLS: {0}")]
    Tls(#[from] TlsError),
    /// A user without its password.
    #[error(
        "--etcd-user {0:?} needs its password: set TOOLMESH_ETCD_PASSWORD or give --etcd-password-file"
    )]
    NoPassword(String),
    /// A password without a user.
    #[error("an etcd password is given without --etcd-user: name the etcd user it belongs to")]
    NoUser,
    /// The password given twice.
    #[error(
        "the etcd password is given twice: keep one of TOOLMESH_ETCD_PASSWORD and --etcd-password-file"
    )]
    TwoPasswords,
    /// The password file cannot be read.
    #[error(
        "etcd password file {path}: {error}; give a readable file holding the password of --etcd-user"
    )]
    PasswordFile {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        error: std::io::Error,
    },
    /// The password is empty.
    #[error(
        "the etcd password is empty; put the password of --etcd-user in TOOLMESH_ETCD_PASSWORD or --etcd-password-file"
    )]
    EmptyPassword,
}

impl EtcdAccess {
    /// Whether any setting is given.
    pub fn is_set(&self) -> bool {
        *self != EtcdAccess::default()
    }

    /// The etcd client's options: the TLS files read, the password read.
    pub fn client_options(&self) -> Result<ClientOptions, EtcdAccessError> {
        Ok(ClientOptions {
            tls: self.tls()?,
            credentials: self.credentials()?,
        })
    }

    fn tls(&self) -> Result<Option<tonic::transport::ClientTlsConfig>, EtcdAccessError> {
        if self.cert.is_some() != self.key.is_some() {
            return Err(EtcdAccessError::HalfIdentity);
        }
        let Some(ca) = &self.ca else {
            return match self.cert {
                Some(_) => Err(EtcdAccessError::IdentityWithoutCa),
                None => Ok(None),
            };
        };
        let files = TlsFiles {
            ca: Some(ca.clone()),
            cert: self.cert.clone(),
            key: self.key.clone(),
            client_ca: None,
        };
        Ok(Tls::from_files(&files)?.client().cloned())
    }

    fn credentials(&self) -> Result<Option<Credentials>, EtcdAccessError> {
        let password = match (&self.password, &self.password_file) {
            (Some(_), Some(_)) => return Err(EtcdAccessError::TwoPasswords),
            (Some(password), None) => Some(password.clone()),
            (None, Some(path)) => Some(read_password(path)?),
            (None, None) => None,
        };
        match (&self.user, password) {
            (None, None) => Ok(None),
            (None, Some(_)) => Err(EtcdAccessError::NoUser),
            (Some(user), None) => Err(EtcdAccessError::NoPassword(user.clone())),
            (Some(_), Some(password)) if password.is_empty() => Err(EtcdAccessError::EmptyPassword),
            (Some(user), Some(password)) => Ok(Some(Credentials {
                user: user.clone(),
                password,
            })),
        }
    }
}

fn read_password(path: &Path) -> Result<String, EtcdAccessError> {
    let text = std::fs::read_to_string(path).map_err(|error| EtcdAccessError::PasswordFile {
        path: path.to_owned(),
        error,
    })?;
    Ok(text.trim_end_matches(['\n', '\r']).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(f: impl FnOnce(&mut EtcdAccess)) -> EtcdAccess {
        let mut access = EtcdAccess::default();
        f(&mut access);
        access
    }

    /// Settings that cannot work are refused with what to give instead.
    #[test]
    fn incomplete_settings_say_what_is_missing() {
        let cases = [
            (access(|a| a.cert = Some("c.pem".into())), "--etcd-key"),
            (
                access(|a| {
                    a.cert = Some("c.pem".into());
                    a.key = Some("k.pem".into());
                }),
                "--etcd-ca",
            ),
            (
                access(|a| a.user = Some("tm".into())),
                "TOOLMESH_ETCD_PASSWORD",
            ),
            (access(|a| a.password = Some("pw".into())), "--etcd-user"),
            (
                access(|a| {
                    a.user = Some("tm".into());
                    a.password = Some("pw".into());
                    a.password_file = Some("pw.txt".into());
                }),
                "keep one",
            ),
            (
                access(|a| {
                    a.user = Some("tm".into());
                    a.password_file = Some("/nonexistent/pw.txt".into());
                }),
                "/nonexistent/pw.txt",
            ),
            (
                access(|a| a.ca = Some("/nonexistent/ca.pem".into())),
                "/nonexistent/ca.pem",
            ),
        ];
        for (access, needle) in cases {
            let error = access.client_options().unwrap_err().to_string();
            assert!(error.contains(needle), "{access:?}: {error}");
        }
    }

    /// The password file's trailing newline is not part of the password,
    /// and the password never shows in debug output.
    #[test]
    fn password_file_and_redaction() {
        let path = std::env::temp_dir().join(format!("etcd-pw-{}", std::process::id()));
        std::fs::write(&path, "s3cret\n").unwrap();
        let access = access(|a| {
            a.user = Some("tm".into());
            a.password_file = Some(path.clone());
        });
        let credentials = access.client_options().unwrap().credentials.unwrap();
        assert_eq!(credentials.password, "s3cret");
        assert!(!format!("{credentials:?}").contains("s3cret"));
        let by_value = EtcdAccess {
            password: Some("hunter2".into()),
            ..EtcdAccess::default()
        };
        assert!(!format!("{by_value:?}").contains("hunter2"));
        let _ = std::fs::remove_file(&path);
    }
}
