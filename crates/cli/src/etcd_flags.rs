//! The `--etcd-*` flags: TLS files and the etcd user of the etcd store; the
//! password only from the environment or a file, never the command line.

use std::path::PathBuf;

/// `--store`: `url` when it is an etcd URL list the registry can dial.
pub(crate) fn store_url(url: &str) -> Result<String, toolmesh_etcd::EtcdError> {
    toolmesh_etcd::parse_store_url(url)?;
    Ok(url.to_owned())
}

/// The environment variable the etcd password may come from.
pub(crate) const PASSWORD_ENV: &str = "TOOLMESH_ETCD_PASSWORD";

/// How the registry reaches the etcd of `--store etcd://…`.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "etcd store options")]
pub(crate) struct EtcdFlags {
    /// CA that signed etcd's server certificate: connects to etcd over TLS
    /// (https).
    #[arg(long, env = "TOOLMESH_ETCD_CA")]
    pub(crate) etcd_ca: Option<PathBuf>,
    /// Client certificate for etcd's --client-cert-auth (with --etcd-key).
    #[arg(long, env = "TOOLMESH_ETCD_CERT")]
    pub(crate) etcd_cert: Option<PathBuf>,
    /// The key of --etcd-cert.
    #[arg(long, env = "TOOLMESH_ETCD_KEY")]
    pub(crate) etcd_key: Option<PathBuf>,
    /// etcd user to authenticate as; its password comes from
    /// TOOLMESH_ETCD_PASSWORD or --etcd-password-file.
    #[arg(long, env = "TOOLMESH_ETCD_USER")]
    pub(crate) etcd_user: Option<String>,
    /// File holding the password of --etcd-user.
    #[arg(long, env = "TOOLMESH_ETCD_PASSWORD_FILE")]
    pub(crate) etcd_password_file: Option<PathBuf>,
}

impl EtcdFlags {
    /// The settings these flags and the environment give.
    pub(crate) fn access(&self) -> toolmesh_node::EtcdAccess {
        toolmesh_node::EtcdAccess {
            ca: self.etcd_ca.clone(),
            cert: self.etcd_cert.clone(),
            key: self.etcd_key.clone(),
            user: self.etcd_user.clone(),
            password: std::env::var(PASSWORD_ENV).ok().filter(|p| !p.is_empty()),
            password_file: self.etcd_password_file.clone(),
        }
    }
}
