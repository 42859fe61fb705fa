//! JWT callers of an `[[issuers]]` entry end to end: a local OpenID
//! provider (discovery and JWKS on 127.0.0.1, keys made per test and
//! rotated mid-test) and a real `toolmesh serve` with its gRPC, MCP and
//! admin doors and the CLI; the attacks refused at every door, the refresh
//! rate bounded, audit records naming issuer and subject, and static
//! tokens working alongside.

use serde_json::{Value, json};
use std::time::{Duration, Instant};
use toolmesh::pb::{InvokeRequest, ListToolsRequest};
use toolmesh_system_tests::*;
use toolmesh_testkit::oidc::{self, Provider, SigningKey};

const AUDIENCE: &str = "toolmesh-test";
/// The longest bearer token the mesh reads (its refusal names the number).
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// The acme policy plus the provider as an issuer: roles from `groups`,
/// tenant acme, refreshes no closer than a second apart.
fn policy(provider: &Provider) -> String {
    with_issuer(provider).build_toml()
}

/// [`policy`] to add to: its last section is the issuer's table.
fn with_issuer(provider: &Provider) -> PolicyBuilder {
    acme_policy()
        .grant("agents: echo", &["agent"], &["acc_echo"])
        .grant("admins: everything", &["admin"], &["*"])
        .then(&format!(
            r#"[[issuers]]
issuer = "{}"
audiences = ["{AUDIENCE}"]
tenant = "acme"
roles_claim = "groups"
min_refresh_secs = 1
"#,
            provider.issuer
        ))
}

fn claims(provider: &Provider, subject: &str, groups: &[&str]) -> Value {
    let mut c = provider.claims(AUDIENCE, subject, Duration::from_secs(600));
    c["groups"] = json!(groups);
    c
}

/// The text after `label` on the log line that has it.
fn logged_url(proc: &Proc, label: &str) -> String {
    proc.wait_for_line(label, Duration::from_secs(30))
        .rsplit(label)
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// `(code, message)` of a ListTools call with `token`.
async fn list_with(addr: &str, token: &str) -> (tonic::Code, String) {
    let mut client = dispatcher(addr);
    match client
        .list_tools(with_token(ListToolsRequest::default(), Some(token)))
        .await
    {
        Ok(listed) => (
            tonic::Code::Ok,
            listed
                .into_inner()
                .tools
                .into_iter()
                .map(|t| t.name)
                .collect::<Vec<_>>()
                .join(","),
        ),
        Err(status) => (status.code(), status.message().to_owned()),
    }
}

/// One MCP request with `token`; status, `WWW-Authenticate` and body.
fn mcp(door: &str, token: &str, request: Value) -> (u16, String) {
    let auth = format!("Bearer {token}");
    let headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2025-11-25"),
        ("Authorization", auth.as_str()),
    ];
    match toolmesh_testkit::try_http(door, "POST", "/mcp", &headers, &request.to_string()) {
        Ok(answer) => answer,
        // A header too large for the server may end the exchange unanswered.
        Err(e) => (0, e.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_callers_at_every_door() {
    let first = SigningKey::es256("k1");
    let provider = Provider::start(&[&first]).await;
    let dir = temp_dir("oidc");
    let policy_path = dir.join("policy.toml");
    std::fs::write(&policy_path, policy(&provider)).unwrap();
    let audit = dir.join("audit.jsonl");
    let (serve, addr) = serve(&[
        "--policy",
        policy_path.to_str().unwrap(),
        "--audit",
        audit.to_str().unwrap(),
        "--mcp-listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
    ]);
    let mcp_url = logged_url(&serve, "MCP listening on ");
    let door = mcp_url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let admin = admin_addr(&serve);
    let _exec = example("acceptance", &addr, &["--token", "tok-exec"]);
    eventually("the tools registered", Duration::from_secs(30), || {
        let addr = addr.clone();
        async move {
            let (_, names) = list_with(&addr, "tok-approver").await;
            names.contains("acc_echo").then_some(())
        }
    })
    .await;

    // gRPC: the JWT caller lists and calls what its role is granted; the
    // static token works in the same run.
    let agent = first.mint(&claims(&provider, "user-7", &["agent"]));
    let listed = eventually("the JWT caller listed", Duration::from_secs(30), || {
        let (addr, agent) = (addr.clone(), agent.clone());
        async move {
            let (code, names) = list_with(&addr, &agent).await;
            (code == tonic::Code::Ok).then_some(names)
        }
    })
    .await;
    assert_eq!(listed, "acc_echo");
    let mut client = dispatcher(&addr);
    let echo = || InvokeRequest {
        tool: "acc_echo".into(),
        arguments: r#"{"message": "hi"}"#.into(),
        ..Default::default()
    };
    let called = invoke_with_token(&mut client, echo(), Some(&agent)).await;
    assert_eq!(code(&called), 0, "{}", message(&called));
    let called = invoke_with_token(&mut client, echo(), Some("tok-agent")).await;
    assert_eq!(code(&called), 0, "static token: {}", message(&called));
    assert_eq!(list_with(&addr, "tok-agent").await.0, tonic::Code::Ok);

    // The audit record of the JWT caller's call names issuer and subject.
    let record = eventually("the call audited", Duration::from_secs(30), || {
        let found = ledger(&audit)
            .into_iter()
            .find(|r| r["caller"] == "user-7" && r["kind"] == "invoke");
        async move { found }
    })
    .await;
    assert_eq!(record["issuer"], provider.issuer.as_str());
    assert_eq!(record["subject"], "user-7");
    assert_eq!(record["tenant"], "acme");

    // The attacks, each UNAUTHENTICATED with its own message.
    let now = oidc::now();
    let mut expired = claims(&provider, "user-7", &["agent"]);
    expired["exp"] = json!(now - 600);
    let mut early = claims(&provider, "user-7", &["agent"]);
    early["nbf"] = json!(now + 600);
    let mut foreign = claims(&provider, "user-7", &["agent"]);
    foreign["iss"] = json!("https://other-idp.test");
    let other_service = provider.claims("another-service", "user-7", Duration::from_secs(600));
    let mut future = claims(&provider, "user-7", &["agent"]);
    future["iat"] = json!(now + 10 * 365 * 24 * 3600);
    let attacks = [
        (
            "a critical extension",
            first.mint_with_header(
                &json!({"crit": ["exp-ext"], "exp-ext": true}),
                &claims(&provider, "user-7", &["agent"]),
            ),
            "marks extensions as critical",
        ),
        (
            "issued ten years from now",
            first.mint(&future),
            "issued in the future",
        ),
        (
            "Bearer Bearer TOKEN",
            format!("Bearer {agent}"),
            "`Bearer` followed by one token",
        ),
        (
            "alg none",
            oidc::unsigned(&claims(&provider, "user-7", &["admin"])),
            "not a well-formed JWT",
        ),
        (
            "HS256 keyed with the public key",
            oidc::hs256(
                &first.public_bytes(),
                "k1",
                &claims(&provider, "user-7", &["admin"]),
            ),
            "algorithm (HS256)",
        ),
        ("expired", first.mint(&expired), "has expired"),
        ("not yet valid", first.mint(&early), "not valid yet"),
        (
            "wrong issuer",
            first.mint(&foreign),
            "is not trusted by this mesh",
        ),
        (
            "wrong audience",
            first.mint(&other_service),
            "not issued for this mesh",
        ),
        (
            "forged signature",
            SigningKey::es256("k1").mint(&claims(&provider, "user-7", &["admin"])),
            "signature does not verify",
        ),
    ];
    for (what, token, says) in &attacks {
        let (code, text) = list_with(&addr, token).await;
        assert_eq!(code, tonic::Code::Unauthenticated, "{what}: {text}");
        assert!(text.contains(says), "{what}: {text}");
        let (status, body) = mcp(
            &door,
            token,
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        );
        assert_eq!(status, 401, "MCP {what}: {body}");
        assert!(body.contains(says), "MCP {what}: {body}");
    }
    // The longest token accepted (16384 bytes) passes every door with the
    // other headers beside it; one byte more is refused as too long, not
    // by the transport (HTTP/2 answered 431 near the limit).
    let sized = |bytes: usize| {
        let mut padded = claims(&provider, "user-7", &["agent"]);
        padded["pad"] = json!("");
        let base = first.mint(&padded).len();
        padded["pad"] = json!("p".repeat(bytes * 3 / 4 - base * 3 / 4));
        let mut token = first.mint(&padded);
        while token.len() < bytes {
            padded["pad"] = json!(format!("{}p", padded["pad"].as_str().unwrap()));
            token = first.mint(&padded);
        }
        token
    };
    let longest = sized(MAX_TOKEN_BYTES - 3);
    assert!(longest.len() <= MAX_TOKEN_BYTES, "{}", longest.len());
    let (code, names) = list_with(&addr, &longest).await;
    assert_eq!((code, names.as_str()), (tonic::Code::Ok, "acc_echo"));
    let (status, body) = mcp(
        &door,
        &longest,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    );
    assert!(
        status == 200 && body.contains("acc_echo"),
        "{status} {body}"
    );
    let too_long = sized(MAX_TOKEN_BYTES + 1);
    let (code, text) = list_with(&addr, &too_long).await;
    assert_eq!(code, tonic::Code::Unauthenticated, "{text}");
    assert!(text.contains("longer than 16384 bytes"), "{text}");
    let (status, body) = mcp(
        &door,
        &too_long,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    );
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("longer than 16384 bytes"), "{body}");

    // A 1 MB token is refused at both doors, never accepted.
    let huge = format!("{}.{}.sig", "e".repeat(1 << 19), "f".repeat(1 << 19));
    assert_ne!(list_with(&addr, &huge).await.0, tonic::Code::Ok);
    let (status, _) = mcp(
        &door,
        &huge,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    );
    assert!(status != 200, "a 1 MB token at the MCP door: {status}");

    // The door's protected-resource metadata names the issuer as its
    // authorization server.
    let (status, metadata) = toolmesh_testkit::http(
        &door,
        "GET",
        "/.well-known/oauth-protected-resource/mcp",
        &[],
        "",
    );
    let metadata: Value = serde_json::from_str(&metadata).unwrap();
    assert_eq!(status, 200);
    assert_eq!(metadata["authorization_servers"], json!([provider.issuer]));

    // The MCP door lists for the JWT caller.
    let (status, tools) = mcp(
        &door,
        &agent,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    );
    assert!(
        status == 200 && tools.contains("acc_echo") && !tools.contains("acc_charge"),
        "{status} {tools}"
    );

    // The admin listener: an admin JWT reads the state, an agent's is refused.
    let admin_jwt = first.mint(&claims(&provider, "ops-1", &["admin"]));
    let (status, state) = toolmesh_testkit::http(
        &admin,
        "GET",
        "/api/state",
        &[("Authorization", &format!("Bearer {admin_jwt}"))],
        "",
    );
    assert_eq!(status, 200, "{state}");
    let (status, _) = toolmesh_testkit::http(
        &admin,
        "GET",
        "/api/state",
        &[("Authorization", &format!("Bearer {agent}"))],
        "",
    );
    assert_eq!(status, 403);
    let (status, metrics) = toolmesh_testkit::http(
        &admin,
        "GET",
        "/metrics",
        &[("Authorization", &format!("Bearer {admin_jwt}"))],
        "",
    );
    assert_eq!(status, 200);
    let series = format!("toolmesh_issuer_keys{{issuer=\"{}\"}}", provider.issuer);
    assert_eq!(sample(&metrics, &series), Some(1.0), "{metrics}");

    // The CLI sends a JWT from TOOLMESH_TOKEN and from --token alike.
    let out = cli_as(&addr, &agent, &["tools"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("acc_echo"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = std::process::Command::new(toolmesh_testkit::toolmesh_bin())
        .args([
            "--server",
            &addr,
            "--token",
            &agent,
            "call",
            "acc_echo",
            r#"{"message": "cli"}"#,
        ])
        .env_remove("TOOLMESH_TOKEN")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // An operator explains a JWT caller's view (`--caller` takes a JWT).
    let out = cli_as(
        &addr,
        "tok-approver",
        &["explain", "acc_charge", "--caller", &agent],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("user-7") && !text.contains("acc_charge is visible"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Rotation: the provider publishes a new key and signs with it; the
    // first token under it asks for a refresh, and it is accepted soon.
    let second = SigningKey::ed25519("k2");
    provider.publish(&[&second]);
    let rotated = second.mint(&claims(&provider, "user-8", &["agent"]));
    eventually("the rotated key accepted", Duration::from_secs(30), || {
        let (addr, rotated) = (addr.clone(), rotated.clone());
        async move { (list_with(&addr, &rotated).await.0 == tonic::Code::Ok).then_some(()) }
    })
    .await;

    // A storm of unknown kids: each refused fast as "unknown key", and the
    // provider sees at most about one JWKS fetch per second.
    let before = provider.jwks_hits();
    let started = Instant::now();
    for i in 0..200 {
        let token = second.mint_as(&format!("random-{i}"), &claims(&provider, "x", &["agent"]));
        let (code, text) = list_with(&addr, &token).await;
        assert_eq!(code, tonic::Code::Unauthenticated);
        assert!(text.contains("does not publish"), "{text}");
    }
    let secs = started.elapsed().as_secs() as usize;
    let hits = provider.jwks_hits() - before;
    assert!(
        hits <= secs + 2,
        "{hits} JWKS fetches in {secs} s of random kids"
    );
}

/// Workloads known by a provider's tokens (Kubernetes service-account
/// tokens are such JWTs): an executor registers with its token alone and
/// owns its tool names under the token's subject; an operator's token
/// disables a tool at the registry; a token without the role is refused
/// there with a message naming the role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_tokens_at_the_registry() {
    let key = SigningKey::es256("k1");
    let provider = Provider::start(&[&key]).await;
    let dir = temp_dir("oidc-registry");
    let policy_path = dir.join("policy.toml");
    std::fs::write(&policy_path, policy(&provider)).unwrap();
    let (_serve, addr) = serve(&["--policy", policy_path.to_str().unwrap()]);
    let workload = key.mint(&claims(
        &provider,
        "system:serviceaccount:tools:acceptance",
        &["executor"],
    ));
    let _exec = example("acceptance", &addr, &["--token", &workload]);
    eventually(
        "the workload's tools registered",
        Duration::from_secs(30),
        || {
            let addr = addr.clone();
            async move {
                let (_, names) = list_with(&addr, "tok-approver").await;
                names.contains("acc_echo").then_some(())
            }
        },
    )
    .await;

    let disable = |token: &str| {
        std::process::Command::new(toolmesh_bin())
            .args(["disable", "acc_echo", "--reason", "incident 7"])
            .env("TOOLMESH_SERVER", &addr)
            .env("TOOLMESH_TOKEN", token)
            .output()
            .unwrap()
    };
    let agent = key.mint(&claims(&provider, "user-7", &["agent"]));
    let refused = disable(&agent);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "an agent may not disable tools");
    assert!(said.contains("\"admin\""), "{said}");
    let admin = key.mint(&claims(&provider, "ops-1", &["admin"]));
    let done = disable(&admin);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let mut client = dispatcher(&addr);
    let call = InvokeRequest {
        tool: "acc_echo".into(),
        arguments: r#"{"message": "hi"}"#.into(),
        ..Default::default()
    };
    let answered = invoke_with_token(&mut client, call, Some("tok-agent")).await;
    assert!(
        message(&answered).contains("incident 7"),
        "{}",
        message(&answered)
    );
}

/// Kubernetes workload identity as a cluster runs it. The issuer's keys
/// come from the API server: HTTPS under the cluster's CA, and only to a
/// caller presenting a token (`jwks_ca_file`, `jwks_bearer_file`, the
/// registry's own mounted service-account files). An executor registers
/// with the projected token its `--token-file` holds, read again at each
/// try: it starts with an expired token, is refused, and registers once
/// the kubelet (here, the test) writes a fresh one. A dispatcher follows
/// the registry with a token whose subject a `[[callers]]` entry pins to
/// the role "dispatcher"; another service account of the same cluster is
/// refused the snapshots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_service_account_tokens() {
    let dir = temp_dir("oidc-k8s");
    let (cluster_ca, api_cert, api_key) = toolmesh_testkit::pki(&dir, "apiserver");
    let reader = dir.join("registry-sa-token");
    std::fs::write(&reader, "registry-reads-keys\n").unwrap();
    let signer = SigningKey::rs256("sa-1");
    let api = Provider::start_api_server(
        &[&signer],
        oidc::ApiServer {
            cert: &api_cert,
            key: &api_key,
            bearer: "registry-reads-keys",
        },
    )
    .await;
    let issuer = &api.issuer;
    let policy = acme_policy()
        .grant("agents: the knowledge base", &["agent"], &["search_kb"])
        .then(&format!(
            r#"[[issuers]]
issuer = "{issuer}"
audiences = ["toolmesh"]
jwks_uri = "{issuer}/openid/v1/jwks"
jwks_ca_file = "{}"
jwks_bearer_file = "{}"
tenant = "acme"
clock_skew_secs = 0
"#,
            cluster_ca.display(),
            reader.display(),
        ))
        .caller(
            Caller::subject(
                issuer,
                "system:serviceaccount:toolmesh:dispatcher",
                "dispatcher",
            )
            .roles(&["dispatcher"]),
        )
        .caller(
            Caller::subject(
                issuer,
                "system:serviceaccount:toolmesh:knowledge",
                "knowledge",
            )
            .roles(&["executor"]),
        )
        .build_toml();
    let policy_path = dir.join("policy.toml");
    std::fs::write(&policy_path, policy).unwrap();
    let policy_arg = policy_path.to_str().unwrap();
    let (_registry, addr) = serve(&["--policy", policy_arg]);
    let sa_token = |account: &str, ttl: Duration| {
        signer.mint(&api.claims(
            "toolmesh",
            &format!("system:serviceaccount:toolmesh:{account}"),
            ttl,
        ))
    };

    // The registry has fetched the API server's keys once a token of the
    // cluster identifies its caller.
    let probe = sa_token("probe", Duration::from_secs(600));
    eventually(
        "the cluster's keys fetched",
        Duration::from_secs(30),
        || {
            let addr = addr.clone();
            let probe = probe.clone();
            async move {
                let (code, _) = list_with(&addr, &probe).await;
                (code == tonic::Code::Ok).then_some(())
            }
        },
    )
    .await;

    // The projected token, expired at first: registration is refused.
    let projected = dir.join("executor-token");
    let mut expired = api.claims(
        "toolmesh",
        "system:serviceaccount:toolmesh:knowledge",
        Duration::ZERO,
    );
    expired["exp"] = json!(oidc::now() - 120);
    std::fs::write(&projected, signer.mint(&expired)).unwrap();
    let exec = example(
        "knowledge",
        &addr,
        &["--token-file", projected.to_str().unwrap()],
    );
    let refused = exec.wait_for_line("refused by the registry", Duration::from_secs(30));
    assert!(refused.contains("expired"), "{refused}");
    // Rotated in place, as the kubelet does: the next try registers.
    std::fs::write(&projected, sa_token("knowledge", Duration::from_secs(600))).unwrap();
    let listed = |addr: String| async move {
        let (_, names) = list_with(&addr, "tok-agent").await;
        names.contains("search_kb").then_some(())
    };
    eventually("the executor registered", Duration::from_secs(60), || {
        listed(addr.clone())
    })
    .await;

    // A dispatcher pinned by its subject follows the registry.
    let dispatcher_token = dir.join("dispatcher-token");
    std::fs::write(
        &dispatcher_token,
        sa_token("dispatcher", Duration::from_secs(600)),
    )
    .unwrap();
    let (_dispatcher, follower) = dispatcher_for(
        &addr,
        &[
            "--policy",
            policy_arg,
            "--registry-token-file",
            dispatcher_token.to_str().unwrap(),
        ],
    );
    eventually(
        "the dispatcher serves the executor's tools",
        Duration::from_secs(60),
        || listed(follower.clone()),
    )
    .await;

    // Another service account of the cluster reads no snapshot.
    let other_token = dir.join("other-token");
    std::fs::write(&other_token, sa_token("other", Duration::from_secs(600))).unwrap();
    let (refused, _) = dispatcher_for(
        &addr,
        &[
            "--policy",
            policy_arg,
            "--registry-token-file",
            other_token.to_str().unwrap(),
        ],
    );
    let said = refused.wait_for_line("registry refused", Duration::from_secs(30));
    assert!(
        said.contains("system:serviceaccount:toolmesh:other may not read snapshots"),
        "{said}"
    );
}

/// The issuers' keys in health. `toolmesh.v1.Issuers` is NOT_SERVING while
/// an issuer holds no keys (its JWKS cannot be fetched), and the admin
/// JSON names that issuer with the reason; a good issuer's keys go stale
/// when its provider starts failing, still verify its tokens, and the JSON
/// says so; once the bad issuer is removed from the policy, SERVING.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issuer_keys_in_health() {
    let key = SigningKey::es256("k1");
    let provider = Provider::start(&[&key]).await;
    let unreachable = {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", closed.local_addr().unwrap())
    };
    let dir = temp_dir("oidc-health");
    let policy_path = dir.join("policy.toml");
    let good = format!("{}refresh_secs = 1\n", policy(&provider));
    let bad = format!(
        "{good}\n[[issuers]]\nissuer = \"{unreachable}\"\naudiences = [\"{AUDIENCE}\"]\nmin_refresh_secs = 1\n"
    );
    std::fs::write(&policy_path, &bad).unwrap();
    let (serve, addr) = serve(&[
        "--policy",
        policy_path.to_str().unwrap(),
        "--admin-listen",
        "127.0.0.1:0",
        "--mcp-listen",
        "127.0.0.1:0",
    ]);
    let admin = admin_addr(&serve);
    let mcp_url = logged_url(&serve, "MCP listening on ");
    let door = mcp_url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp");
    let issuers = || {
        let (status, state) = toolmesh_testkit::http(
            &admin,
            "GET",
            "/api/state",
            &[("Authorization", "Bearer tok-approver")],
            "",
        );
        assert_eq!(status, 200, "{state}");
        serde_json::from_str::<Value>(&state).unwrap()["issuers"].clone()
    };
    let of = |all: &Value, issuer: &str| {
        all.as_array()
            .and_then(|list| list.iter().find(|i| i["issuer"] == issuer).cloned())
            .unwrap_or(Value::Null)
    };
    const NOT_SERVING: i32 = 2;
    const SERVING: i32 = 1;
    eventually(
        "the unreachable issuer named",
        Duration::from_secs(30),
        || {
            let found = of(&issuers(), &unreachable);
            std::future::ready(
                (found["keys"] == 0 && found["last_error"].is_string()).then_some(found),
            )
        },
    )
    .await;
    assert_eq!(
        health_status(&addr, toolmesh_transport::ISSUERS_HEALTH_SERVICE).await,
        NOT_SERVING
    );
    // A token of the issuer without keys cannot be checked yet: an outage
    // to retry on every door, not a refusal (the MCP door answered 401,
    // and an OAuth client signs in again instead of retrying).
    let mut stranded = claims(&provider, "user-7", &["agent"]);
    stranded["iss"] = json!(unreachable);
    let stranded = key.mint(&stranded);
    let (code, text) = list_with(&addr, &stranded).await;
    assert_eq!(code, tonic::Code::Unavailable, "{text}");
    let auth = format!("Bearer {stranded}");
    let headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("Authorization", auth.as_str()),
    ];
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    let (status, head, body) =
        toolmesh_testkit::http_with_head(door, "POST", "/mcp", &headers, &list);
    assert_eq!(status, 503, "{head}{body}");
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 2"),
        "{head}"
    );
    assert!(body.contains("retry shortly"), "{body}");

    // The whole server still serves: only that issuer's callers are refused.
    assert_eq!(health_status(&addr, "").await, SERVING);
    let out = cli_as(&addr, "tok-approver", &["health", "--json"]);
    let health: Value = serde_json::from_slice(&out.stdout).expect("health --json");
    assert_eq!(
        (&health["server"], &health["issuers"]),
        (&json!("SERVING"), &json!("NOT_SERVING")),
        "{health}"
    );
    let out = cli_as(&addr, "tok-approver", &["health"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("identity providers: NOT_SERVING"), "{text}");

    // The good provider fails from now: its keys go stale and still serve.
    eventually("the good issuer's keys", Duration::from_secs(30), || {
        std::future::ready((of(&issuers(), &provider.issuer)["keys"] == 1).then_some(()))
    })
    .await;
    provider.set_mode(oidc::Mode::Garbage);
    let stale = eventually(
        "the good issuer's keys stale",
        Duration::from_secs(30),
        || {
            let found = of(&issuers(), &provider.issuer);
            std::future::ready((found["stale"] == true).then_some(found))
        },
    )
    .await;
    assert_eq!(stale["keys"], 1, "{stale}");
    let token = key.mint(&claims(&provider, "user-7", &["agent"]));
    let (code, names) = list_with(&addr, &token).await;
    assert_eq!(code, tonic::Code::Ok, "{names}");

    // Without the unreachable issuer (a reload), health says SERVING.
    std::fs::write(&policy_path, &good).unwrap();
    eventually(
        "toolmesh.v1.Issuers serving",
        Duration::from_secs(30),
        || {
            let addr = addr.clone();
            async move {
                (health_status(&addr, toolmesh_transport::ISSUERS_HEALTH_SERVICE).await == SERVING)
                    .then_some(())
            }
        },
    )
    .await;
}

/// The MCP door as an OAuth protected resource, against the official
/// Python MCP client. The policy names the door's URL as the audience
/// tokens must carry (RFC 8707) and requires the scopes `tools:read` to
/// list and `tools:call` to call. The client finds the metadata from the
/// 401's challenge (resource, authorization server, scopes_supported), a
/// token for another service gets 401 `invalid_token`, a token without a
/// scope gets 403 `insufficient_scope` naming it, and tokens with the
/// scopes list and call. Over gRPC the same scopes hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_mcp_client() {
    let key = SigningKey::es256("k1");
    let provider = Provider::start(&[&key]).await;
    let dir = temp_dir("oidc-oauth");
    let policy_path = dir.join("policy.toml");
    let policy_for = |audience: &str| {
        format!(
            r#"{}
[[issuers]]
issuer = "{}"
audiences = ["{audience}"]
tenant = "acme"
roles = ["agent"]
list_scope = "tools:read"
call_scope = "tools:call"
"#,
            acme_policy()
                .grant("agents: echo", &["agent"], &["acc_echo"])
                .build_toml(),
            provider.issuer
        )
    };
    std::fs::write(&policy_path, policy_for("placeholder")).unwrap();
    let (serve, addr) = serve(&[
        "--policy",
        policy_path.to_str().unwrap(),
        "--mcp-listen",
        "127.0.0.1:0",
    ]);
    let door = logged_url(&serve, "MCP listening on ");
    // The door's URL is its audience (known once it listens): a reload.
    std::fs::write(&policy_path, policy_for(&door)).unwrap();
    let _exec = example("acceptance", &addr, &["--token", "tok-exec"]);
    let token = |scope: Option<&str>, audience: &str| {
        let mut claims = provider.claims(audience, "user-7", Duration::from_secs(600));
        if let Some(scope) = scope {
            claims["scope"] = json!(scope);
        }
        key.mint(&claims)
    };
    let full = token(Some("openid tools:read tools:call"), &door);
    eventually(
        "the door's URL is the audience and the tools registered",
        Duration::from_secs(30),
        || {
            let (addr, full) = (addr.clone(), full.clone());
            async move {
                let (code, names) = list_with(&addr, &full).await;
                (code == tonic::Code::Ok && names.contains("acc_echo")).then_some(())
            }
        },
    )
    .await;

    // gRPC: listing needs tools:read, calling tools:call.
    let none = token(None, &door);
    let (status, said) = list_with(&addr, &none).await;
    assert_eq!(status, tonic::Code::PermissionDenied, "{said}");
    assert!(said.contains("\"tools:read\""), "{said}");
    let read = token(Some("tools:read"), &door);
    let mut client = dispatcher(&addr);
    let call = InvokeRequest {
        tool: "acc_echo".into(),
        arguments: r#"{"message": "hi"}"#.into(),
        ..Default::default()
    };
    let refused = invoke_with_token(&mut client, call.clone(), Some(&read)).await;
    assert_eq!(
        code(&refused),
        toolmesh::pb::ErrorCode::PermissionDenied as i32
    );
    assert!(
        message(&refused).contains("\"tools:call\""),
        "{}",
        message(&refused)
    );
    let answered = invoke_with_token(&mut client, call, Some(&full)).await;
    assert_eq!(code(&answered), 0, "{}", message(&answered));

    let output = std::process::Command::new(test_python())
        .arg(python_script("oauth_client.py"))
        .env("MCP_URL", &door)
        .env("ISSUER", &provider.issuer)
        .env("FULL", &full)
        .env("READ", &read)
        .env("NONE", &none)
        .env(
            "ELSEWHERE",
            token(Some("tools:read tools:call"), "another-service"),
        )
        .output()
        .expect("run the Python MCP client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for check in [
        "metadata",
        "wrong audience",
        "insufficient scope",
        "full token lists and calls",
        "read token lists",
    ] {
        assert!(stdout.contains(&format!("PASS {check}")), "{stdout}");
    }
}

/// A snapshot watch lasts no longer than the token it was opened with: a
/// dispatcher following with a short-lived token has its watch ended at
/// the token's `exp` and is refused on reconnecting ("expired"); once its
/// token file holds a fresh token it follows again and sees what changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_ends_when_its_token_expires() {
    let key = SigningKey::es256("k1");
    let provider = Provider::start(&[&key]).await;
    let dir = temp_dir("oidc-watch");
    let policy_path = dir.join("policy.toml");
    std::fs::write(
        &policy_path,
        with_issuer(&provider)
            .then("clock_skew_secs = 0\n")
            .caller(
                Caller::subject(&provider.issuer, "dispatcher-1", "dispatcher")
                    .roles(&["dispatcher"]),
            )
            .build_toml(),
    )
    .unwrap();
    let policy_arg = policy_path.to_str().unwrap();
    let (_registry, addr) = serve(&["--policy", policy_arg]);
    let token_file = dir.join("token");
    // Long enough for the dispatcher to start and connect on a busy box.
    let short = key.mint(&provider.claims(AUDIENCE, "dispatcher-1", Duration::from_secs(15)));
    std::fs::write(&token_file, short).unwrap();
    let (follower, follower_addr) = dispatcher_for(
        &addr,
        &[
            "--policy",
            policy_arg,
            "--registry-token-file",
            token_file.to_str().unwrap(),
        ],
    );
    follower.wait_for_line("ready", Duration::from_secs(30));
    let ended = follower.wait_for_line("snapshot stream broke", Duration::from_secs(60));
    assert!(ended.contains("has expired"), "{ended}");
    let said = follower.wait_for_line("registry refused", Duration::from_secs(60));
    assert!(said.contains("expired"), "{said}");

    let fresh = key.mint(&provider.claims(AUDIENCE, "dispatcher-1", Duration::from_secs(600)));
    std::fs::write(&token_file, fresh).unwrap();
    let _exec = example("acceptance", &addr, &["--token", "tok-exec"]);
    eventually(
        "the follower sees the executor registered since",
        Duration::from_secs(90),
        || {
            let follower_addr = follower_addr.clone();
            async move {
                let (_, names) = list_with(&follower_addr, "tok-approver").await;
                names.contains("acc_echo").then_some(())
            }
        },
    )
    .await;
}
