//! Tool search over real processes: `toolmesh serve` with a two-tenant
//! policy and the example executors on 127.0.0.1, searched over gRPC and
//! with `toolmesh search`.

use std::collections::BTreeSet;
use std::time::Duration;
use tonic::transport::Channel;
use toolmesh::pb::{
    ListToolsRequest, SearchToolsRequest, SearchToolsResponse, dispatcher_client::DispatcherClient,
};
use toolmesh_system_tests::*;

/// Tenant acme's agent may use the support desk and the knowledge base;
/// tenant globex's, the accounts and reports. Both sets speak of
/// customers, users, reports and tickets.
fn two_tenants() -> String {
    PolicyBuilder::new()
        .no_anonymous()
        .caller(
            Caller::token("tok-acme", "acme-bot")
                .tenant("acme")
                .roles(&["agent"]),
        )
        .caller(
            Caller::token("tok-globex", "globex-bot")
                .tenant("globex")
                .roles(&["agent"]),
        )
        .caller(Caller::token("tok-exec", "examples").roles(&["executor"]))
        .then(
            "[[grants]]\nname = \"acme\"\ntenants = [\"acme\"]\n\
             tools = [\"search_kb\", \"create_ticket\", \"send_email\"]\n",
        )
        .then(
            "[[grants]]\nname = \"globex\"\ntenants = [\"globex\"]\n\
             tools = [\"get_user_info\", \"get_current_time\", \"export_report\"]\n",
        )
        .build_toml()
}

/// `serve` under [`two_tenants`] with the `examples` executors registered.
struct Mesh {
    serve: Proc,
    examples: Vec<Proc>,
    addr: String,
    _dir: TempDir,
}

fn start(label: &str, examples: &[&str]) -> Mesh {
    let dir = temp_dir(label);
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, two_tenants()).expect("write the policy");
    let (serve, addr) = serve(&["--policy", policy.to_str().expect("a UTF-8 path")]);
    let examples = examples
        .iter()
        .map(|name| example(name, &addr, &["--token", "tok-exec"]))
        .collect();
    Mesh {
        serve,
        examples,
        addr,
        _dir: dir,
    }
}

async fn search(
    client: &mut DispatcherClient<Channel>,
    token: &str,
    query: &str,
) -> SearchToolsResponse {
    let request = SearchToolsRequest {
        query: query.into(),
        ..SearchToolsRequest::default()
    };
    client
        .search_tools(with_token(request, Some(token)))
        .await
        .expect("search tools")
        .into_inner()
}

fn names(found: &SearchToolsResponse) -> Vec<String> {
    found
        .matches
        .iter()
        .map(|m| m.tool.as_ref().expect("a tool").name.clone())
        .collect()
}

/// The names ListTools at `version` shows the caller of `token`.
async fn listed_at(
    client: &mut DispatcherClient<Channel>,
    token: &str,
    version: u64,
) -> BTreeSet<String> {
    let request = ListToolsRequest {
        snapshot_version: version,
        ..ListToolsRequest::default()
    };
    client
        .list_tools(with_token(request, Some(token)))
        .await
        .expect("list tools")
        .into_inner()
        .tools
        .into_iter()
        .map(|t| t.name)
        .collect()
}

/// Every query, for both tenants (whose tools share words): zero hidden
/// tools in any result, and each tenant finds its own tool first.
#[tokio::test]
async fn no_hidden_tool_in_any_result() {
    let mesh = start("search-tenants", &["knowledge", "support", "accounts"]);
    let mut client = dispatcher(&mesh.addr);
    let everything = [
        "search_kb",
        "create_ticket",
        "send_email",
        "get_user_info",
        "get_current_time",
        "export_report",
    ];
    eventually(
        "every example tool registered",
        Duration::from_secs(15),
        || {
            let mut client = client.clone();
            async move {
                let acme = listed_at(&mut client, "tok-acme", 0).await;
                let globex = listed_at(&mut client, "tok-globex", 0).await;
                (acme.len() + globex.len() == everything.len()).then_some(())
            }
        },
    )
    .await;
    let queries = [
        "refund a customer's order",
        "look up a customer or user",
        "email the customer about their ticket",
        "export a report",
        "what time is it",
        "search the knowledge base for a password reset",
        "customer user ticket report email time search",
    ];
    for token in ["tok-acme", "tok-globex"] {
        for query in queries {
            let found = search(&mut client, token, query).await;
            let visible = listed_at(&mut client, token, found.snapshot_version).await;
            for name in names(&found) {
                assert!(
                    visible.contains(&name),
                    "{token} searching {query:?} found {name}, which it may not list ({visible:?})"
                );
            }
        }
    }
    let first = |found: SearchToolsResponse| names(&found).first().cloned();
    assert_eq!(
        first(search(&mut client, "tok-acme", "email the customer").await).as_deref(),
        Some("send_email")
    );
    assert_eq!(
        first(search(&mut client, "tok-globex", "look up a user").await).as_deref(),
        Some("get_user_info")
    );
    drop(mesh.examples);
    drop(mesh.serve);
}

/// A registration shows in search at the snapshot version ListTools first
/// lists it at, and `toolmesh search` prints the matches as a table and,
/// with --json, as `{"snapshot_version", "matches": [{"name", "version",
/// "score", "description"}]}`.
#[tokio::test]
async fn a_registration_is_found_at_the_version_it_is_listed() {
    let mut mesh = start("search-registration", &["knowledge"]);
    let mut client = dispatcher(&mesh.addr);
    eventually("search_kb registered", Duration::from_secs(15), || {
        let mut client = client.clone();
        async move {
            listed_at(&mut client, "tok-acme", 0)
                .await
                .contains("search_kb")
                .then_some(())
        }
    })
    .await;
    let before = search(&mut client, "tok-acme", "send an email").await;
    assert!(
        !names(&before).contains(&"send_email".to_owned()),
        "{:?}",
        names(&before)
    );

    mesh.examples
        .push(example("support", &mesh.addr, &["--token", "tok-exec"]));
    // At every version searched, found exactly when listed at that version.
    let found = eventually("send_email is found", Duration::from_secs(15), || {
        let mut client = client.clone();
        async move {
            let found = search(&mut client, "tok-acme", "send an email").await;
            let is_found = names(&found).contains(&"send_email".to_owned());
            let is_listed = listed_at(&mut client, "tok-acme", found.snapshot_version)
                .await
                .contains("send_email");
            assert_eq!(
                is_found, is_listed,
                "at snapshot {}",
                found.snapshot_version
            );
            is_found.then_some(found)
        }
    })
    .await;
    assert_eq!(names(&found)[0], "send_email");
    let version = found.snapshot_version;

    let printed = cli_as(
        &mesh.addr,
        "tok-acme",
        &["search", "send an email", "--limit", "2", "--json"],
    );
    assert!(printed.status.success(), "{printed:?}");
    let json: serde_json::Value =
        serde_json::from_slice(&printed.stdout).expect("search --json prints JSON");
    assert!(
        json["snapshot_version"]
            .as_u64()
            .is_some_and(|v| v >= version)
    );
    let matches = json["matches"].as_array().expect("matches");
    assert!(!matches.is_empty() && matches.len() <= 2, "{json}");
    assert_eq!(matches[0]["name"], "send_email");
    let keys: BTreeSet<&str> = matches[0]
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        BTreeSet::from(["description", "name", "score", "version"])
    );
    assert!(matches[0]["score"].as_f64().is_some_and(|s| s > 0.0));

    let table = cli_as(
        &mesh.addr,
        "tok-acme",
        &["search", "refund a customer's order"],
    );
    let out = String::from_utf8_lossy(&table.stdout);
    assert!(table.status.success(), "{table:?}");
    assert!(
        out.contains("SCORE") && out.contains("create_ticket"),
        "{out}"
    );
    assert!(out.contains("matches, snapshot"), "{out}");
    let globex = cli_as(&mesh.addr, "tok-globex", &["search", "send an email"]);
    let out = String::from_utf8_lossy(&globex.stdout);
    assert!(!out.contains("send_email"), "globex may not list it: {out}");

    let refused = cli_as(&mesh.addr, "tok-acme", &["search", ""]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("1024 bytes"),
        "{refused:?}"
    );
}

/// Anthropic's tool search with the mesh's search: `toolmesh tools --format
/// anthropic --defer-loading` lists `search_tools` (not deferred) and every
/// other tool `"defer_loading": true`; `search_tools` invoked through
/// Invoke answers `tool_reference` blocks (and the matches as data) naming
/// only tools its caller may list, and a SearchTools in a format shows
/// each match exactly as ListTools in that format does.
#[tokio::test]
async fn deferred_anthropic_listing_and_search_tools_through_invoke() {
    let mesh = start("search-deferred", &["knowledge", "support", "accounts"]);
    let mut client = dispatcher(&mesh.addr);
    eventually(
        "every example tool registered",
        Duration::from_secs(15),
        || {
            let mut client = client.clone();
            async move {
                let acme = listed_at(&mut client, "tok-acme", 0).await;
                let globex = listed_at(&mut client, "tok-globex", 0).await;
                (acme.len() == 3 && globex.len() == 3).then_some(())
            }
        },
    )
    .await;

    let printed = cli_as(
        &mesh.addr,
        "tok-acme",
        &["tools", "--format", "anthropic", "--defer-loading"],
    );
    assert!(printed.status.success(), "{printed:?}");
    let tools: Vec<serde_json::Value> =
        serde_json::from_slice(&printed.stdout).expect("an Anthropic tools array");
    assert_eq!(tools[0]["name"], "search_tools", "{tools:?}");
    assert!(tools[0].get("defer_loading").is_none(), "{:?}", tools[0]);
    assert_eq!(
        tools[0]["input_schema"]["required"],
        serde_json::json!(["query"])
    );
    let deferred: BTreeSet<&str> = tools[1..]
        .iter()
        .inspect(|tool| assert_eq!(tool["defer_loading"], true, "{tool}"))
        .map(|tool| tool["name"].as_str().expect("a name"))
        .collect();
    assert_eq!(
        deferred,
        BTreeSet::from(["create_ticket", "search_kb", "send_email"])
    );
    let plain = cli_as(&mesh.addr, "tok-acme", &["tools", "--format", "anthropic"]);
    let plain: Vec<serde_json::Value> = serde_json::from_slice(&plain.stdout).expect("JSON");
    assert!(
        plain
            .iter()
            .all(|t| t.get("defer_loading").is_none() && t["name"] != "search_tools")
    );

    let query = "customer user ticket report email time search";
    for (token, visible) in [
        ("tok-acme", ["create_ticket", "search_kb", "send_email"]),
        (
            "tok-globex",
            ["export_report", "get_current_time", "get_user_info"],
        ),
    ] {
        let request = toolmesh::pb::InvokeRequest {
            tool: "search_tools".into(),
            arguments: serde_json::json!({"query": query, "limit": 10}).to_string(),
            ..Default::default()
        };
        let answer = client
            .invoke(with_token(request, Some(token)))
            .await
            .expect("invoke search_tools")
            .into_inner();
        let result = answer.result.expect("a result");
        assert!(result.error.is_none(), "{result:?}");
        let references: Vec<serde_json::Value> =
            serde_json::from_str(&result.output).expect("tool_reference blocks");
        assert!(!references.is_empty(), "{token}: {references:?}");
        let named: BTreeSet<&str> = references
            .iter()
            .inspect(|block| assert_eq!(block["type"], "tool_reference", "{block}"))
            .map(|block| block["tool_name"].as_str().expect("a tool name"))
            .collect();
        assert!(
            named.is_subset(&BTreeSet::from(visible)),
            "{token} was referred to {named:?}, beyond {visible:?}"
        );
        let data: serde_json::Value = serde_json::from_str(&result.data).expect("JSON data");
        let data_names: Vec<&str> = data["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .map(|t| t["name"].as_str().expect("a name"))
            .collect();
        let reference_names: Vec<&str> = references
            .iter()
            .map(|b| b["tool_name"].as_str().expect("a name"))
            .collect();
        assert_eq!(data_names, reference_names, "the same matches, best first");
        assert!(data["tools"][0]["input_schema"].is_object(), "{data}");

        // SearchTools in a format: each match as ListTools in it shows it.
        let shaped = client
            .search_tools(with_token(
                SearchToolsRequest {
                    query: query.into(),
                    format: toolmesh::pb::ToolFormat::Openai as i32,
                    ..SearchToolsRequest::default()
                },
                Some(token),
            ))
            .await
            .expect("search tools")
            .into_inner();
        let listed = client
            .list_tools(with_token(
                ListToolsRequest {
                    format: toolmesh::pb::ToolFormat::Openai as i32,
                    snapshot_version: shaped.snapshot_version,
                    ..ListToolsRequest::default()
                },
                Some(token),
            ))
            .await
            .expect("list tools")
            .into_inner();
        let listed: Vec<serde_json::Value> = serde_json::from_str(&listed.formatted).expect("JSON");
        let found: Vec<serde_json::Value> = serde_json::from_str(&shaped.formatted).expect("JSON");
        assert_eq!(found.len(), shaped.matches.len());
        for (tool, matched) in found.iter().zip(&shaped.matches) {
            assert_eq!(
                tool["function"]["name"],
                matched.tool.as_ref().expect("a tool").name
            );
            assert!(listed.contains(tool), "{tool} as ListTools shows it");
        }
    }

    let bad = toolmesh::pb::InvokeRequest {
        tool: "search_tools".into(),
        arguments: "{}".into(),
        ..Default::default()
    };
    let refused = client
        .invoke(with_token(bad, Some("tok-acme")))
        .await
        .expect("invoke")
        .into_inner()
        .result
        .expect("a result")
        .error
        .expect("an error");
    assert_eq!(
        refused.code,
        toolmesh::pb::ErrorCode::InvalidArguments as i32
    );
    assert!(
        refused.message.contains("\"query\" is required"),
        "{refused:?}"
    );
    drop(mesh.examples);
    drop(mesh.serve);
}
