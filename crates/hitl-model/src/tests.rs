//! Both APIs against a scripted local server that speaks their wire formats and keeps
//! what it received.

use serde_json::{Value, json};

use crate::testing::server;
use crate::*;

fn spec(provider: &str, base: &str, extra: Value) -> ModelSpec {
    let mut spec = json!({"provider": provider, "base_url": base, "model": "m-1", "api_key_env": "TEST_KEY"});
    spec.as_object_mut().unwrap().extend(extra.as_object().cloned().unwrap_or_default());
    serde_json::from_value(spec).unwrap()
}

fn key(name: &str) -> Option<String> {
    (name == "TEST_KEY").then(|| "sk-test-0123".to_owned())
}

/// A conversation with one earlier round of tool calls (two calls, one refused).
fn conversation() -> ChatRequest {
    let call = |id: &str, table: &str| ToolCall {
        id: id.into(),
        name: "db.count".into(),
        arguments: json!({"table": table}).as_object().cloned().unwrap(),
    };
    ChatRequest {
        system: Some("You help with the orders database.".into()),
        messages: vec![
            Message::user("How many orders and refunds?"),
            Message::Assistant { text: None, tool_calls: vec![call("call_1", "orders"), call("call_2", "refunds")] },
            Message::Tool { call_id: "call_1".into(), content: "42".into(), is_error: false },
            Message::Tool { call_id: "call_2".into(), content: "denied by policy".into(), is_error: true },
        ],
        tools: vec![ToolSpec {
            name: "db.count".into(),
            description: "Counts rows".into(),
            input_schema: json!({"type": "object", "properties": {"table": {"type": "string"}}}),
        }],
    }
}

#[tokio::test]
async fn chat_completions_requests_and_answers_have_the_apis_shape() {
    let answer = json!({
        "id": "x", "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "call_9", "type": "function", "function": {"name": "db.drop", "arguments": "{\"table\":\"tmp\"}"}}]}}],
        "usage": {"prompt_tokens": 31, "completion_tokens": 7, "total_tokens": 38}
    });
    let (base, received) = server(vec![(Some(200), answer, None)]).await;
    let client = ModelClient::new(&spec("openai", &format!("{base}/v1"), json!({})), key).unwrap();
    assert_eq!(client.url(), format!("{base}/v1/chat/completions"));
    let turn = client.chat(&conversation()).await.unwrap();
    assert_eq!(turn.tool_calls[0].id, "call_9");
    assert_eq!(Value::Object(turn.tool_calls[0].arguments.clone()), json!({"table": "tmp"}));
    assert_eq!(turn.usage, Usage { input_tokens: 31, output_tokens: 7 });
    assert_eq!(turn.text, None);

    let testing::Request { headers, body, .. } = received.lock().unwrap()[0].clone();
    assert_eq!(headers["authorization"], "Bearer sk-test-0123");
    assert_eq!(body["model"], "m-1");
    let messages = body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "tool"]);
    let call = &messages[2]["tool_calls"][0];
    assert_eq!((call["id"].clone(), call["type"].clone()), (json!("call_1"), json!("function")));
    assert_eq!(call["function"]["arguments"], "{\"table\":\"orders\"}", "arguments go as JSON text");
    assert_eq!((messages[3]["tool_call_id"].clone(), messages[3]["content"].clone()), (json!("call_1"), json!("42")));
    assert_eq!(messages[4]["tool_call_id"], "call_2");
    assert_eq!(
        body["tools"][0],
        json!({"type": "function", "function": {"name": "db.count", "description": "Counts rows",
        "parameters": {"type": "object", "properties": {"table": {"type": "string"}}}}})
    );
}

#[tokio::test]
async fn messages_requests_and_answers_have_the_apis_shape() {
    let answer = json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m-1", "stop_reason": "tool_use",
        "content": [{"type": "text", "text": "Let me check."},
                    {"type": "tool_use", "id": "toolu_1", "name": "db.count", "input": {"table": "orders"}}],
        "usage": {"input_tokens": 50, "output_tokens": 12}
    });
    let (base, received) = server(vec![(Some(200), answer, None)]).await;
    let client = ModelClient::new(&spec("anthropic", &base, json!({"max_tokens": 256})), key).unwrap();
    let turn = client.chat(&conversation()).await.unwrap();
    assert_eq!(turn.text.as_deref(), Some("Let me check."));
    assert_eq!((turn.tool_calls[0].id.as_str(), turn.tool_calls[0].name.as_str()), ("toolu_1", "db.count"));
    assert_eq!(turn.usage, Usage { input_tokens: 50, output_tokens: 12 });

    let testing::Request { headers, body, .. } = received.lock().unwrap()[0].clone();
    assert_eq!(
        (headers["x-api-key"].to_str().unwrap(), headers["anthropic-version"].to_str().unwrap()),
        ("sk-test-0123", "2023-06-01")
    );
    assert!(headers.get("authorization").is_none());
    assert_eq!(
        (body["system"].clone(), body["max_tokens"].clone()),
        (json!("You help with the orders database."), json!(256))
    );
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "the two tool results go back in one user message: {body}");
    assert_eq!(
        messages[1]["content"][0],
        json!({"type": "tool_use", "id": "call_1", "name": "db.count", "input": {"table": "orders"}})
    );
    assert_eq!(messages[2]["role"], "user");
    assert_eq!(
        messages[2]["content"][1],
        json!({"type": "tool_result", "tool_use_id": "call_2", "content": "denied by policy", "is_error": true})
    );
    assert_eq!(body["tools"][0]["input_schema"]["properties"]["table"]["type"], "string");
}

#[tokio::test]
async fn rate_limits_and_server_errors_are_retried_and_client_errors_are_not() {
    let ok = json!({"choices": [{"message": {"role": "assistant", "content": "done"}}]});
    let script = vec![
        (Some(429), json!({"error": "slow down"}), Some("0")),
        (Some(503), json!({}), None),
        (Some(200), ok, None),
    ];
    let (base, received) = server(script).await;
    let client = ModelClient::new(&spec("openai", &base, json!({})), key).unwrap();
    let turn = client.chat(&ChatRequest { messages: vec![Message::user("hi")], ..Default::default() }).await.unwrap();
    assert_eq!(turn.text.as_deref(), Some("done"));
    assert_eq!(received.lock().unwrap().len(), 3, "two retries");

    let (base, received) = server(vec![(Some(400), json!({"error": {"message": "bad tool schema"}}), None)]).await;
    let client = ModelClient::new(&spec("openai", &base, json!({})), key).unwrap();
    let error = client.chat(&ChatRequest::default()).await.unwrap_err();
    assert!(matches!(error, ModelError::Status { status: 400, .. }), "{error}");
    assert!(error.to_string().contains("bad tool schema") && !error.to_string().contains("sk-test"), "{error}");
    assert_eq!(received.lock().unwrap().len(), 1, "a 400 is not retried");

    let script = vec![(Some(500), json!({}), None), (Some(502), json!({}), None)];
    let (base, _) = server(script).await;
    let client = ModelClient::new(&spec("anthropic", &base, json!({"max_retries": 1})), key).unwrap();
    let error = client.chat(&ChatRequest::default()).await.unwrap_err();
    assert!(matches!(error, ModelError::Status { status: 502, .. }), "the last answer after the retries: {error}");
}

#[tokio::test]
async fn a_silent_model_times_out_and_an_absent_one_is_unreachable() {
    let (base, _) = server(vec![(None, json!({}), None)]).await;
    let client = ModelClient::new(&spec("openai", &base, json!({"timeout": 1, "max_retries": 0})), key).unwrap();
    let error = client.chat(&ChatRequest::default()).await.unwrap_err();
    assert!(matches!(error, ModelError::Timeout { seconds: 1, .. }), "{error}");

    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let client =
        ModelClient::new(&spec("openai", &format!("http://{closed}"), json!({"max_retries": 0})), key).unwrap();
    assert!(matches!(client.chat(&ChatRequest::default()).await.unwrap_err(), ModelError::Unreachable { .. }));

    let (base, _) = server(vec![(Some(200), json!({"unexpected": true}), None)]).await;
    let client = ModelClient::new(&spec("openai", &base, json!({})), key).unwrap();
    let error = client.chat(&ChatRequest::default()).await.unwrap_err();
    assert!(error.to_string().contains("not a Chat Completions response: no choices[0].message"), "{error}");
}

#[test]
fn specs_are_checked_when_the_client_is_made() {
    let missing = ModelClient::new(&spec("openai", "http://127.0.0.1:1", json!({})), |_| None).unwrap_err();
    assert_eq!(missing, "api_key_env: the environment variable TEST_KEY is not set");
    let bad = ModelClient::new(&spec("openai", "ftp://x", json!({})), key).unwrap_err();
    assert!(bad.contains("give an http:// or https:// URL"), "{bad}");
    let unknown: Result<ModelSpec, _> =
        serde_json::from_value(json!({"provider": "openai", "model": "m", "temprature": 1}));
    assert!(unknown.unwrap_err().to_string().contains("unknown field `temprature`"));
    let provider: Result<ModelSpec, _> = serde_json::from_value(json!({"provider": "cohere", "model": "m"}));
    assert!(provider.is_err());
    let default =
        ModelClient::new(&serde_json::from_value(json!({"provider": "anthropic", "model": "m"})).unwrap(), key);
    assert_eq!(default.unwrap().url(), "https://api.anthropic.com/v1/messages");
}
