//! hitl as a library, configured by a file: `ServerBuilder::config_file` gives a
//! program what the binary serves (the gateway in front of a real upstream, the
//! policies over every agent, declared agents, reloads), in its own process.

use hitl_graph::{Agent, START, StateGraph};
use serde_json::{Value, json};

use crate::harness::{Client, Paused, accept};
use crate::upstream::PythonUpstream;

/// An agent that answers at once with `text`.
fn agent(name: &str, text: &'static str) -> Agent {
    let graph = StateGraph::new()
        .add_step("say", move |_, _| async move { Ok(json!({ "text": text })) })
        .add_edge(START, "say")
        .output_key("text")
        .compile()
        .unwrap();
    Agent::new(name, "Says something.", json!({"type": "object"}), graph)
}

fn config(upstream: &str, action: &str) -> String {
    format!(
        r#"[server]
examples = false

[[upstream]]
name = "db"
url = "{upstream}"

[[policy]]
tools = ["db.drop_*", "later"]
action = "{action}"

[[agent]]
name = "ask_name"
description = "Asks a name."
kind = "workflow"
input_schema = {{ type = "object" }}
steps = [ {{ ask = {{ message = "Your name?", key = "name" }} }} ]
"#
    )
}

fn names(reply: &crate::harness::Reply) -> Vec<String> {
    let tools = reply.body["result"]["tools"].as_array().cloned().unwrap_or_default();
    tools.iter().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect()
}

#[tokio::test]
async fn a_program_configured_by_a_file_serves_what_the_binary_serves() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let folder = std::env::temp_dir().join(format!("hitl-e2e-library-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    let file = folder.join("hitl.toml");
    std::fs::write(&file, config(&upstream.url, "review")).unwrap();

    // One agent given before the file, one after: both under its policies.
    let server = hitl_server::Server::builder()
        .agent(agent("earlier", "from before"))
        .config_file(&file)
        .unwrap()
        .agent(agent("later", "from after"))
        .build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = Client { addr: listener.local_addr().unwrap() };
    tokio::spawn(server.serve(listener, std::future::pending()));

    let listed = names(&client.modern(1, "tools/list", json!({}), json!({})).await);
    for name in ["earlier", "later", "ask_name", "db.echo", "db.drop_partition"] {
        assert!(listed.contains(&name.to_owned()), "{name} in {listed:?}");
    }
    assert!(!listed.contains(&"greeter".to_owned()), "[server] examples = false applies: {listed:?}");
    let earlier = client.call_tool(2, json!({"name": "earlier", "arguments": {}})).await;
    assert_eq!(earlier.text(), r#""from before""#, "{}", earlier.body);
    let echoed = client.call_tool(3, json!({"name": "db.echo", "arguments": {"text": "through"}})).await;
    assert_eq!(echoed.text(), "through", "{}", echoed.body);
    let later = client.pause("later", json!({})).await;
    assert!(later.question()["params"]["message"].as_str().unwrap().contains("Tool execution requires approval"));
    let ran = later.answer(&client, accept(json!({"decision": "approve"}))).await;
    assert_eq!(ran.text(), r#""from after""#, "{}", ran.body);

    // The file is watched: denied now.
    std::fs::write(&file, config(&upstream.url, "deny")).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let reply = client.call_tool(4, json!({"name": "later", "arguments": {}})).await;
        if reply.body["result"]["isError"] == Value::Bool(true) {
            assert!(reply.text().contains("later is denied by the policy"), "{}", reply.body);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the reload was not applied: {}", reply.body);
        let _ = Paused::of("later", json!({}), &reply);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let _ = std::fs::remove_dir_all(&folder);
}
