//! The etcd store behind TLS, client certificates and etcd's own users,
//! with a real etcd member and real toolmesh processes: a registry with the
//! right CA, client certificate and password serves and outlives its auth
//! token; without the client certificate, with a wrong password, without
//! TLS or trusting another CA it refuses to start and says what to fix.
//! Needs an `etcd` binary (`scripts/test` installs it); fails without one.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use toolmesh::pb::{self, GetSnapshotRequest, RegisterRequest, ToolSpec};
use toolmesh_etcd::{Client, ClientOptions, Credentials};
use toolmesh_procs::{EtcdCluster, EtcdOptions, EtcdTls};
use toolmesh_system_tests::*;
use toolmesh_testkit::{patient, pki};

/// The etcd user registries authenticate as, with readwrite on /toolmesh/.
const USER: &str = "toolmesh";
const PASSWORD: &str = "registry-s3cret";
/// How long etcd keeps an unused simple token.
const TOKEN_TTL_SECS: u32 = 2;

/// A one-member etcd serving clients over TLS, requiring client
/// certificates signed by its CA, with authentication on (root and
/// [`USER`]) and short-lived tokens.
struct SecureEtcd {
    cluster: EtcdCluster,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    dir: TempDir,
}

impl SecureEtcd {
    async fn start() -> SecureEtcd {
        let dir = temp_dir("etcd-security");
        // One certificate for 127.0.0.1 serves etcd and, signed by the same
        // CA, authenticates its clients.
        let (ca, cert, key) = pki(&dir, "etcd");
        let options = EtcdOptions {
            tls: Some(EtcdTls {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: Some(ca.clone()),
            }),
            auth_token_ttl_secs: Some(TOKEN_TTL_SECS),
            default_timing: false,
        };
        let cluster = EtcdCluster::start_with(1, options)
            .await
            .unwrap_or_else(|e| panic!("etcd tests need etcd: {e}"));
        let etcd = SecureEtcd {
            cluster,
            ca,
            cert,
            key,
            dir,
        };
        let admin = etcd.client(None);
        admin
            .add_user_for_prefix(USER, PASSWORD, b"/toolmesh/")
            .await
            .expect("add the toolmesh user");
        admin.enable_auth("root-pw").await.expect("enable auth");
        etcd
    }

    /// A client with the CA and client certificate, as `credentials`.
    fn client(&self, credentials: Option<Credentials>) -> Client {
        let files = toolmesh_transport::TlsFiles {
            ca: Some(self.ca.clone()),
            cert: Some(self.cert.clone()),
            key: Some(self.key.clone()),
            client_ca: None,
        };
        let tls = toolmesh_transport::Tls::from_files(&files).expect("TLS files");
        let options = ClientOptions {
            tls: tls.client().cloned(),
            credentials,
        };
        Client::connect(&self.cluster.store_url(), options).expect("etcd client")
    }

    /// `--etcd-ca --etcd-cert --etcd-key`: everything TLS takes.
    fn tls_flags(&self) -> Vec<String> {
        let mut flags = vec!["--etcd-ca".to_owned(), path(&self.ca)];
        flags.extend(self.client_cert_flags());
        flags
    }

    fn client_cert_flags(&self) -> Vec<String> {
        vec![
            "--etcd-cert".to_owned(),
            path(&self.cert),
            "--etcd-key".to_owned(),
            path(&self.key),
        ]
    }

    /// A file holding `password`.
    fn password_file(&self, password: &str) -> String {
        let file = self.dir.join("etcd-password");
        std::fs::write(&file, format!("{password}\n")).expect("write the password file");
        path(&file)
    }
}

fn path(path: &Path) -> String {
    path.to_str().expect("a UTF-8 path").to_owned()
}

/// `toolmesh registry --store STORE FLAGS…`, the password (if any) in
/// TOOLMESH_ETCD_PASSWORD.
fn registry_with(store: &str, flags: &[String], password_env: Option<&str>) -> Proc {
    let mut command = Command::new(toolmesh_bin());
    command
        .args(["registry", "--listen", "127.0.0.1:0", "--store", store])
        .args(["--default-ttl-ms", "1000"])
        .args(flags);
    command.env_remove("TOOLMESH_ETCD_PASSWORD");
    if let Some(password) = password_env {
        command.env("TOOLMESH_ETCD_PASSWORD", password);
    }
    Proc::spawn("registry", command)
}

/// The newest snapshot of the registry at `addr`, if it answers.
async fn snapshot(addr: &str) -> Option<pb::Snapshot> {
    let channel = toolmesh_transport::channel(addr, &toolmesh_transport::Tls::none()).ok()?;
    let mut client = pb::registry_client::RegistryClient::new(channel)
        .max_decoding_message_size(toolmesh_transport::MAX_SNAPSHOT_MESSAGE_BYTES);
    let request = GetSnapshotRequest { version: 0 };
    match tokio::time::timeout(
        patient(Duration::from_secs(2)),
        client.get_snapshot(request),
    )
    .await
    {
        Ok(Ok(response)) => Some(response.into_inner()),
        _ => None,
    }
}

fn lists(snapshot: &pb::Snapshot, tool: &str) -> bool {
    snapshot
        .tools
        .iter()
        .any(|t| t.spec.as_ref().is_some_and(|s| s.name == tool))
}

/// Registers an executor with one tool named `tool` (no health service:
/// assumed healthy) through the registry at `addr`.
async fn register(addr: &str, tool: &str) -> Result<(), tonic::Status> {
    let channel =
        toolmesh_transport::channel(addr, &toolmesh_transport::Tls::none()).expect("address");
    let spec = ToolSpec {
        name: tool.to_owned(),
        version: "1.0.0".to_owned(),
        description: "registered through a registry on a secured etcd".to_owned(),
        input_schema: r#"{"type":"object"}"#.to_owned(),
        timeout_ms: 1000,
        ..ToolSpec::default()
    };
    let request = RegisterRequest {
        executor_id: format!("exec-{tool}"),
        service: "probe".to_owned(),
        endpoint: "127.0.0.1:9".to_owned(),
        tools: vec![spec],
        lease_ttl_ms: 10_000,
        execute_token: String::new(),
    };
    pb::registry_client::RegistryClient::new(channel)
        .register(request)
        .await
        .map(|_| ())
}

/// Registers `tool` through `addr` and waits until the snapshot lists it.
async fn registers_and_lists(addr: &str, tool: &str) {
    eventually(
        &format!("{tool} registered through {addr}"),
        Duration::from_secs(10),
        || async { register(addr, tool).await.ok() },
    )
    .await;
    eventually(
        &format!("the snapshot of {addr} listing {tool}"),
        Duration::from_secs(10),
        || async { snapshot(addr).await.filter(|s| lists(s, tool)) },
    )
    .await;
}

/// With the CA, a client certificate and the password (from a file), a
/// registry serves: the acceptance executor registers and its tools are
/// listed. Its token expires unused and is forgotten when etcd restarts;
/// the registry authenticates again and keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_serves_from_a_secured_etcd_and_outlives_its_token() {
    let mut etcd = SecureEtcd::start().await;
    let store = etcd.cluster.store_url();

    // A client idle past the token's lifetime authenticates again.
    let client = etcd.client(Some(Credentials {
        user: USER.to_owned(),
        password: PASSWORD.to_owned(),
    }));
    client
        .put(b"/toolmesh/probe", b"1".to_vec(), 0)
        .await
        .expect("a put with a fresh token");
    tokio::time::sleep(Duration::from_secs(u64::from(TOKEN_TTL_SECS) * 2)).await;
    client
        .put(b"/toolmesh/probe", b"2".to_vec(), 0)
        .await
        .expect("a put once the first token expired");
    let (lease, _) = client.grant(5).await.expect("a lease");
    tokio::time::sleep(Duration::from_secs(u64::from(TOKEN_TTL_SECS) * 2)).await;
    assert!(
        client.keep_alive(lease).await.expect("a keep-alive") > 0,
        "the lease is renewed with a new token"
    );

    let mut flags = etcd.tls_flags();
    flags.extend([
        "--etcd-user".to_owned(),
        USER.to_owned(),
        "--etcd-password-file".to_owned(),
        etcd.password_file(PASSWORD),
    ]);
    let registry = registry_with(&store, &flags, None);
    let addr = registry.listen_addr();
    let _exec = example("acceptance", &addr, &["--executor-id", "acc-secure"]);
    eventually(
        "the acceptance tools listed",
        Duration::from_secs(10),
        || async { snapshot(&addr).await.filter(|s| lists(s, "acc_echo")) },
    )
    .await;

    // A restarted member has forgotten every token it handed out.
    etcd.cluster.restart(0).await.expect("restart etcd");
    registers_and_lists(&addr, "after_restart").await;
    // Long enough for the current token to expire if unused; the registry
    // keeps using or renewing it.
    tokio::time::sleep(Duration::from_secs(u64::from(TOKEN_TTL_SECS) * 2)).await;
    registers_and_lists(&addr, "after_expiry").await;
    assert!(
        snapshot(&addr).await.is_some_and(|s| lists(&s, "acc_echo")),
        "the acceptance executor is still listed"
    );
}

/// A case of [`misconfigured_registries_say_what_to_fix`]: what is wrong,
/// the registry's flags, its password (in the environment), and what its
/// error must say.
type Misconfigured = (
    &'static str,
    Vec<String>,
    Option<&'static str>,
    &'static [&'static str],
);

/// Each setting etcd refuses stops the registry with a message that names
/// the flag to fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misconfigured_registries_say_what_to_fix() {
    let etcd = SecureEtcd::start().await;
    let store = etcd.cluster.store_url();
    let (other_ca, _, _) = pki(&etcd.dir, "other");
    let user = ["--etcd-user".to_owned(), USER.to_owned()];
    let ca_only = ["--etcd-ca".to_owned(), path(&etcd.ca)];
    let with = |parts: &[&[String]]| parts.concat();
    let mut untrusted = vec!["--etcd-ca".to_owned(), path(&other_ca)];
    untrusted.extend(etcd.client_cert_flags());
    let cases: Vec<Misconfigured> = vec![
        (
            "no client certificate",
            with(&[&ca_only, &user]),
            Some(PASSWORD),
            &["requires a client certificate", "--etcd-cert", "--etcd-key"],
        ),
        (
            "wrong password",
            with(&[&etcd.tls_flags(), &user]),
            Some("not-the-password"),
            &[
                "refused the password",
                "\"toolmesh\"",
                "TOOLMESH_ETCD_PASSWORD",
            ],
        ),
        (
            "no credentials",
            etcd.tls_flags(),
            None,
            &["requires authentication", "--etcd-user"],
        ),
        (
            "no TLS",
            user.to_vec(),
            Some(PASSWORD),
            &["serves TLS", "plaintext", "--etcd-ca"],
        ),
        (
            "untrusted server certificate",
            with(&[&untrusted, &user]),
            Some(PASSWORD),
            &["server certificate is not trusted", "--etcd-ca"],
        ),
    ];
    // One at a time: five registries starting at once on a loaded machine
    // only test the machine.
    for (what, flags, password, needles) in cases {
        let mut registry = registry_with(&store, &flags, password);
        // The line the process exits with (its logs name etcd's errors too).
        let line = registry.wait_for_line("error: etcd", patient(Duration::from_secs(20)));
        for needle in needles {
            assert!(line.contains(needle), "{what}: {needle:?} not in {line:?}");
        }
        assert!(
            !line.contains(PASSWORD) && !line.contains("not-the-password"),
            "{what}: the password leaks into {line:?}"
        );
        let status = registry
            .wait_exit(patient(Duration::from_secs(10)))
            .unwrap_or_else(|| panic!("{what}: the registry keeps running"));
        assert!(!status.success(), "{what}: exited with {status}");
    }
}

/// Settings that cannot work are refused before etcd is asked: `--etcd-*`
/// without an etcd store, a user without a password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incomplete_etcd_settings_are_refused_at_start() {
    let cases: [(&[&str], Option<&str>, &str); 2] = [
        (&["--etcd-user", USER], None, "--store etcd://"),
        (
            &["--store", "etcd://127.0.0.1:9", "--etcd-user", USER],
            None,
            "TOOLMESH_ETCD_PASSWORD or give --etcd-password-file",
        ),
    ];
    for (flags, password, needle) in cases {
        let mut command = Command::new(toolmesh_bin());
        command
            .args(["registry", "--listen", "127.0.0.1:0"])
            .args(flags)
            .env_remove("TOOLMESH_ETCD_PASSWORD");
        if let Some(password) = password {
            command.env("TOOLMESH_ETCD_PASSWORD", password);
        }
        let mut registry = Proc::spawn("registry", command);
        let line = registry.wait_for_line("error:", patient(Duration::from_secs(20)));
        assert!(
            line.contains(needle),
            "{flags:?}: {needle:?} not in {line:?}"
        );
        let status = registry
            .wait_exit(patient(Duration::from_secs(10)))
            .expect("the registry exits");
        assert!(!status.success());
    }
}
