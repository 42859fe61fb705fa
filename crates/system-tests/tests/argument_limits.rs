//! Per-caller argument limits end to end over real processes: a grant
//! narrows a tool's input schema, the caller's ListTools shows the narrowed
//! schema, its Invoke is held to it (and the executor never sees a refused
//! call), another grant keeps the full range, and `explain` shows it.

use std::time::Duration;
use tonic::transport::Channel;
use toolmesh::pb::{
    ErrorCode, InvokeRequest, InvokeResponse, ListToolsRequest, dispatcher_client::DispatcherClient,
};
use toolmesh_system_tests::*;

/// Agents may charge up to 100 cents, finance any amount.
fn limits_policy() -> String {
    PolicyBuilder::new()
        .no_anonymous()
        .caller(acme_agent())
        .caller(
            Caller::token("tok-finance", "ledger-bot")
                .tenant("acme")
                .roles(&["finance"]),
        )
        .caller(
            Caller::token("tok-exec", "acceptance-team")
                .tenant("acme")
                .roles(&["executor"]),
        )
        .grant(
            "agents: small charges",
            &["agent"],
            &["acc_charge", "acc_echo"],
        )
        .then("[grants.arguments.acc_charge]\ncents = { maximum = 100 }\n")
        .grant("finance: any charge", &["finance"], &["acc_charge"])
        .build_toml()
}

async fn charge(client: &mut DispatcherClient<Channel>, token: &str, cents: u64) -> InvokeResponse {
    let request = InvokeRequest {
        tool: "acc_charge".into(),
        arguments: format!(r#"{{"account": "a-1", "cents": {cents}}}"#),
        ..Default::default()
    };
    invoke_with_token(client, request, Some(token)).await
}

/// The `cents` schema of acc_charge as `token`'s caller lists it.
async fn listed_cents(
    client: &mut DispatcherClient<Channel>,
    token: &str,
) -> Option<serde_json::Value> {
    let listed = client
        .list_tools(with_token(ListToolsRequest::default(), Some(token)))
        .await
        .ok()?
        .into_inner();
    let spec = listed.tools.into_iter().find(|t| t.name == "acc_charge")?;
    let schema: serde_json::Value = serde_json::from_str(&spec.input_schema).ok()?;
    Some(schema["properties"]["cents"].clone())
}

/// A grant's narrowing is what its callers list and are held to; another
/// grant's callers keep the tool's full range; explain shows the narrowing.
#[tokio::test]
async fn a_grant_narrows_the_schema_its_callers_see_and_use() {
    let dir = temp_dir("argument-limits");
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, limits_policy()).unwrap();
    let ledger_path = dir.join("ledger.jsonl");
    let (_serve, addr) = serve(&["--policy", policy.to_str().unwrap()]);
    let _exec = example(
        "acceptance",
        &addr,
        &[
            "--token",
            "tok-exec",
            "--ledger",
            ledger_path.to_str().unwrap(),
        ],
    );
    let mut client = dispatcher(&addr);
    let agent_view = eventually("acc_charge listed", Duration::from_secs(10), || {
        let mut client = client.clone();
        async move { listed_cents(&mut client, "tok-agent").await }
    })
    .await;
    assert_eq!(agent_view["maximum"], 100, "{agent_view}");
    assert_eq!(agent_view["minimum"], 1, "the tool's own bound stays");
    let finance_view = listed_cents(&mut client, "tok-finance").await.unwrap();
    assert!(finance_view.get("maximum").is_none(), "{finance_view}");

    let refused = charge(&mut client, "tok-agent", 150).await;
    assert_eq!(code(&refused), ErrorCode::InvalidArguments as i32);
    let text = message(&refused);
    assert!(
        text.contains("agents: small charges")
            && text.contains("at /cents: 150 is above the maximum of 100"),
        "{text}"
    );
    assert_eq!(refused.attempts, 0, "a refused call is never sent");
    assert_eq!(code(&charge(&mut client, "tok-agent", 100).await), 0);
    assert_eq!(code(&charge(&mut client, "tok-finance", 150).await), 0);
    let charges = ledger(&ledger_path)
        .iter()
        .filter(|l| l["tool"] == "acc_charge")
        .count();
    assert_eq!(charges, 2, "only the two allowed charges ran");

    let explained = std::process::Command::new(toolmesh_bin())
        .args([
            "explain",
            "--server",
            &addr,
            "--token",
            "tok-agent",
            "acc_charge",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&explained.stdout);
    assert!(text.contains("argument limit cents: maximum 100"), "{text}");
    assert!(text.contains(r#""maximum":100"#), "{text}");
}
