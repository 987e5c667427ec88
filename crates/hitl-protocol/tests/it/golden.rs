//! Every JSON example of the seed and the spec notes parses to its typed form and
//! serializes back to equal JSON.

use std::path::Path;

use hitl_protocol::*;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn round_trip<T: DeserializeOwned + Serialize>(json: &Value) -> Value {
    let typed: T = serde_json::from_value(json.clone()).unwrap_or_else(|e| panic!("does not parse: {e}"));
    serde_json::to_value(&typed).expect("serializes")
}

/// Parses `json` as `kind` and serializes it back.
fn check(kind: &str, json: &Value) -> Value {
    match kind {
        "response" => match jsonrpc::from_value(json.clone()).expect("envelope") {
            Message::Response { id, result } => {
                let result =
                    if result.get("resultType").is_some() { round_trip::<CallToolResponse>(&result) } else { result };
                Response::Result { id, result }.to_value()
            }
            Message::Error { id, error } => Response::Error { id, error }.to_value(),
            other => panic!("not a response: {other:?}"),
        },
        "request" => match jsonrpc::from_value(json.clone()).expect("envelope") {
            Message::Request(request) => {
                let had_params = request.params.is_some();
                let typed = ClientRequest::parse(&request.method, request.params).expect("typed");
                let params = match &typed {
                    ClientRequest::CallTool(p) => serde_json::to_value(p),
                    ClientRequest::Initialize(p) => serde_json::to_value(p),
                    ClientRequest::Ping(p) | ClientRequest::Discover(p) => serde_json::to_value(p),
                    ClientRequest::ListTools(p) | ClientRequest::ListPrompts(p) => serde_json::to_value(p),
                    ClientRequest::GetPrompt(p) => serde_json::to_value(p),
                    ClientRequest::Complete(p) => serde_json::to_value(p),
                    ClientRequest::SetLevel(p) => serde_json::to_value(p),
                    ClientRequest::ListResources(p) | ClientRequest::ListResourceTemplates(p) => {
                        serde_json::to_value(p)
                    }
                    ClientRequest::ReadResource(p) | ClientRequest::Subscribe(p) | ClientRequest::Unsubscribe(p) => {
                        serde_json::to_value(p)
                    }
                    ClientRequest::Listen(p) => serde_json::to_value(p),
                    ClientRequest::GetTask(p) | ClientRequest::UpdateTask(p) | ClientRequest::CancelTask(p) => {
                        serde_json::to_value(p)
                    }
                }
                .unwrap();
                let mut out = serde_json::json!({"jsonrpc": "2.0", "id": request.id, "method": typed.method()});
                if had_params {
                    out["params"] = params;
                }
                out
            }
            other => panic!("not a request: {other:?}"),
        },
        "notification" => match jsonrpc::from_value(json.clone()).expect("envelope") {
            Message::Notification(n) => {
                assert_eq!(ClientNotification::parse(&n.method, n.params.as_ref()), ClientNotification::Initialized);
                serde_json::json!({"jsonrpc": "2.0", "method": n.method})
            }
            other => panic!("not a notification: {other:?}"),
        },
        "error" => round_trip::<ErrorObject>(json),
        "input_requests" => round_trip::<InputRequests>(json),
        "call_tool_response" => round_trip::<CallToolResponse>(json),
        "discover_result" => round_trip::<DiscoverResult>(json),
        "elicit_params" => round_trip::<ElicitRequestParams>(json),
        "elicit_result" => round_trip::<ElicitResult>(json),
        "create_message_result" => round_trip::<CreateMessageResult>(json),
        "list_roots_result" => round_trip::<ListRootsResult>(json),
        "initialize_result" => round_trip::<InitializeResult>(json),
        "list_tools_result" => round_trip::<ListToolsResult>(json),
        "get_prompt_result" => round_trip::<GetPromptResult>(json),
        other => panic!("unknown fixture kind {other}"),
    }
}

#[test]
fn every_fixture_round_trips() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let fixture: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let kind = fixture["kind"].as_str().unwrap();
        let back = check(kind, &fixture["json"]);
        assert_eq!(back, fixture["json"], "{} ({}) does not round-trip", path.display(), fixture["description"]);
        count += 1;
    }
    assert!(count >= 30, "only {count} fixtures");
}

#[test]
fn seed_typed_question_is_typed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/seed_url_question.json");
    let fixture: Value = serde_json::from_slice(&std::fs::read(dir).unwrap()).unwrap();
    let requests: InputRequests = serde_json::from_value(fixture["json"].clone()).unwrap();
    match &requests["calendar_auth"] {
        InputRequest::Elicit(ElicitRequestParams::Url(url)) => {
            assert_eq!(url.url, "https://example.com/oauth/calendar/start");
            assert_eq!(url.elicitation_id, None);
        }
        other => panic!("not a url elicitation: {other:?}"),
    }
}

#[test]
fn form_without_mode_is_form() {
    let params: ElicitRequestParams = serde_json::from_value(serde_json::json!({
        "message": "m", "requestedSchema": {"type": "object", "properties": {}}
    }))
    .unwrap();
    assert!(matches!(params, ElicitRequestParams::Form(_)));
}

#[test]
fn unknown_elicitation_mode_is_an_error() {
    let err = serde_json::from_value::<ElicitRequestParams>(serde_json::json!({"mode": "telepathy", "message": "m"}))
        .unwrap_err();
    assert!(err.to_string().contains("unknown elicitation mode \"telepathy\""), "{err}");
    let err =
        serde_json::from_value::<ElicitRequestParams>(serde_json::json!({"mode": 3, "message": "m"})).unwrap_err();
    assert!(err.to_string().contains("invalid type: integer `3`, expected a string"), "{err}");
    // Both modes read from a JSON tree (owned strings) and from text (borrowed).
    let url = serde_json::json!({"mode": "url", "message": "m", "url": "https://example.com/x"});
    assert!(matches!(serde_json::from_value::<ElicitRequestParams>(url.clone()), Ok(ElicitRequestParams::Url(_))));
    assert!(matches!(serde_json::from_str::<ElicitRequestParams>(&url.to_string()), Ok(ElicitRequestParams::Url(_))));
    let form =
        serde_json::json!({"mode": "form", "message": "m", "requestedSchema": {"type": "object", "properties": {}}});
    assert!(matches!(serde_json::from_str::<ElicitRequestParams>(&form.to_string()), Ok(ElicitRequestParams::Form(_))));
}

#[test]
fn server_request_carries_id_method_and_params() {
    let request: InputRequest = serde_json::from_value(serde_json::json!({
        "method": "elicitation/create",
        "params": {"mode": "url", "message": "go", "url": "https://example.com", "elicitationId": "e1"}
    }))
    .unwrap();
    let value = server_request(&RequestId::Number(7), &request);
    assert_eq!(value["id"], 7);
    assert_eq!(value["method"], "elicitation/create");
    assert_eq!(value["params"]["elicitationId"], "e1");
}

#[test]
fn answers_are_read_by_key_with_precise_errors() {
    let err = ElicitResult::from_value("user_name", &serde_json::json!(12345)).unwrap_err();
    assert_eq!(err.code, ErrorCode::INVALID_PARAMS);
    assert!(err.message.contains("inputResponses[\"user_name\"]"), "{}", err.message);
    let err = ElicitResult::from_value("k", &serde_json::json!({"action": "maybe"})).unwrap_err();
    assert!(err.message.contains("action"), "{}", err.message);
    let ok = ElicitResult::from_value("k", &serde_json::json!({"action": "accept", "content": {"a": 1}})).unwrap();
    assert_eq!(ok.action, ElicitAction::Accept);
}

#[test]
fn task_results_keep_their_wire_shape() {
    let created = serde_json::json!({
        "taskId": "t1", "status": "working", "createdAt": "2026-01-01T00:00:00Z",
        "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttlMs": 1000, "pollIntervalMs": 1000, "resultType": "task"
    });
    let typed: CreateTaskResult = serde_json::from_value(created.clone()).expect("parses");
    assert_eq!(typed.task.status, TaskStatus::Working);
    assert_eq!(serde_json::to_string(&typed).unwrap(), created.to_string(), "same fields, same order");
    let got = serde_json::json!({
        "taskId": "t1", "status": "failed", "createdAt": "2026-01-01T00:00:00Z",
        "lastUpdatedAt": "2026-01-01T00:00:01Z", "ttlMs": 1000, "pollIntervalMs": 1000,
        "statusMessage": "lost", "error": {"code": -32603, "message": "lost"}
    });
    assert_eq!(round_trip::<GetTaskResult>(&got).to_string(), got.to_string());
}

#[test]
fn results_are_stamped_for_their_era_on_typed_values() {
    let info = serde_json::json!({"name": "hitl", "version": "1"});
    let shared = std::sync::Arc::new(info.clone());
    let stamped = |mut result: ServerResult, modern: bool| {
        result.stamp(modern, &shared);
        serde_json::to_value(&result).unwrap()
    };
    let tool = CallToolResult::json(&serde_json::json!({"a": 1}));
    let modern = stamped(ServerResult::CallTool(tool.clone()), true);
    assert_eq!(modern["resultType"], "complete");
    assert_eq!(modern["_meta"]["io.modelcontextprotocol/serverInfo"], info);
    let legacy = stamped(ServerResult::CallTool(tool), false);
    assert!(legacy.get("resultType").is_none() && legacy.get("_meta").is_none(), "{legacy}");
    let empty = stamped(ServerResult::Empty(EmptyResult::default()), true);
    assert_eq!(
        empty.to_string(),
        serde_json::json!({"resultType": "complete", "_meta": {"io.modelcontextprotocol/serverInfo": info}})
            .to_string()
    );
    assert_eq!(stamped(ServerResult::Empty(EmptyResult::default()), false), serde_json::json!({}));
    let relayed = serde_json::json!({"contents": [], "resultType": "complete", "_meta": {"x": 1}});
    let legacy = stamped(ServerResult::Other(relayed.clone()), false);
    assert_eq!(legacy, serde_json::json!({"contents": [], "_meta": {"x": 1}}));
    let modern = stamped(ServerResult::Other(relayed), true);
    assert_eq!(modern["_meta"]["x"], 1);
    assert_eq!(modern["_meta"]["io.modelcontextprotocol/serverInfo"], info);
    let round = InputRequiredResult::new(Default::default(), "t.s");
    assert!(stamped(ServerResult::InputRequired(round), false).get("resultType").is_none());
}
