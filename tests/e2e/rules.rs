//! Every rule of the seed ("Human-in-the-loop over MCP"), one test per rule, over real
//! HTTP against the binary with the in-memory store. Test names follow the rules.

use serde_json::{Value, json};

use crate::harness::{Reply, Server, accept};

fn call(name: &str, arguments: Value) -> Value {
    json!({"name": name, "arguments": arguments})
}

fn answer(name: &str, arguments: Value, responses: Value, state: Option<&str>) -> Value {
    let mut params = json!({"name": name, "arguments": arguments, "inputResponses": responses});
    if let Some(s) = state {
        params["requestState"] = json!(s);
    }
    params
}

const URL_CAPS: &str = r#"{"elicitation": {"form": {}, "url": {}}}"#;

// --- Pause and resume a tool call -------------------------------------------------

#[tokio::test]
async fn pause_and_resume_a_tool_call() {
    let server = Server::start(&[]).await;
    let first = server.call_tool(1, call("greeter", json!({}))).await;
    assert_eq!(
        first.requests(),
        *json!({"user_name": {"method": "elicitation/create", "params": {
            "message": "What is your name?", "mode": "form",
            "requestedSchema": {"properties": {"name": {"type": "string"}}, "required": ["name"], "type": "object"}
        }}})
        .as_object()
        .unwrap()
    );
    let s = first.state();
    let done = server
        .call_tool(2, answer("greeter", json!({}), json!({"user_name": accept(json!({"name": "Ada"}))}), Some(&s)))
        .await;
    assert_eq!(done.done_text(), r#"{"greeting":"Hello, Ada!"}"#);
    assert_eq!(done.result()["structuredContent"], json!({"greeting": "Hello, Ada!"}));
}

#[tokio::test]
async fn several_questions_are_asked_in_one_round() {
    let server = Server::start(&[]).await;
    let first = server.call_tool(1, call("survey", json!({}))).await;
    let asked = first.requests();
    assert_eq!(asked.len(), 2);
    let mut responses = json!({});
    for (key, request) in &asked {
        let reply = if request["params"]["message"] == "What is your quest?" { "grail" } else { "blue" };
        responses[key] = accept(json!({"response": reply}));
    }
    let done = server.call_tool(2, answer("survey", json!({}), responses, Some(&first.state()))).await;
    assert_eq!(done.done_text(), r#"{"color":"blue","quest":"grail"}"#);
}

#[tokio::test]
async fn missing_answers_ask_the_same_questions_with_the_same_state() {
    let server = Server::start(&[]).await;
    let first = server.call_tool(1, call("survey", json!({}))).await;
    let s = first.state();
    let key = first.requests().keys().next().unwrap().clone();
    let partial = json!({ key: accept(json!({"response": "blue"})), "not_asked": accept(json!({"response": "x"})) });
    let again = server.call_tool(2, answer("survey", json!({}), partial, Some(&s))).await;
    assert_eq!(again.requests(), first.requests());
    assert_eq!(again.state(), s);
}

#[tokio::test]
async fn answers_to_questions_not_asked_are_ignored() {
    let server = Server::start(&[]).await;
    let first = server.call_tool(1, call("greeter", json!({}))).await;
    let responses = json!({"user_name": accept(json!({"name": "Ada"})), "unknown_extra_key": {"action": "accept"}});
    let done = server.call_tool(2, answer("greeter", json!({}), responses, Some(&first.state()))).await;
    assert_eq!(done.done_text(), r#"{"greeting":"Hello, Ada!"}"#);
}

#[tokio::test]
async fn answers_in_the_first_call_answer_the_first_round() {
    let server = Server::start(&[]).await;
    let done = server
        .call_tool(1, answer("greeter", json!({}), json!({"user_name": accept(json!({"name": "Ada"}))}), None))
        .await;
    assert_eq!(done.done_text(), r#"{"greeting":"Hello, Ada!"}"#);
    let key = (server.call_tool(2, call("choose_region", json!({}))).await).only_key();
    let done = server
        .call_tool(
            3,
            answer("choose_region", json!({}), json!({ key: accept(json!({"response": "eu-west-1"})) }), None),
        )
        .await;
    assert_eq!(done.done_text(), r#"{"region":"eu-west-1"}"#);
}

#[tokio::test]
async fn repeated_answers_resume_the_agent_once() {
    let server = Server::start(&[]).await;
    let first = server.call_tool(1, call("issue_ticket", json!({}))).await;
    let s = first.state();
    let responses = json!({"approve": accept(json!({"approve": true}))});
    let params = answer("issue_ticket", json!({}), responses, Some(&s));
    let one = (server.call_tool(2, params.clone()).await).done_text();
    let two = (server.call_tool(3, params.clone()).await).done_text();
    assert_eq!(one, two, "a resend gets the same ticket");
    let ticket: Value = serde_json::from_str(&one).unwrap();
    assert!(ticket["ticket"].is_string());
}

#[tokio::test]
async fn concurrent_repeated_answers_resume_the_agent_once() {
    let server = Server::start(&[]).await;
    let first = server.call_tool(1, call("issue_ticket", json!({}))).await;
    let params =
        answer("issue_ticket", json!({}), json!({"approve": accept(json!({"approve": true}))}), Some(&first.state()));
    let replies = futures_join(&server, &params, 8).await;
    let tickets: std::collections::BTreeSet<String> = replies.iter().map(Reply::done_text).collect();
    assert_eq!(tickets.len(), 1, "{tickets:?}");
}

async fn futures_join(server: &Server, params: &Value, n: u64) -> Vec<Reply> {
    let calls = (0..n).map(|i| server.call_tool(10 + i, params.clone()));
    let mut out = Vec::new();
    for reply in join_all(calls).await {
        out.push(reply);
    }
    out
}

async fn join_all<F: std::future::Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut set = Vec::new();
    for f in futures {
        set.push(Box::pin(f));
    }
    let mut out = Vec::with_capacity(set.len());
    // Poll all concurrently on this task.
    let mut pending: Vec<Option<_>> = set.into_iter().map(Some).collect();
    let mut results: Vec<Option<F::Output>> = (0..pending.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (slot, result) in pending.iter_mut().zip(results.iter_mut()) {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        *result = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => done = false,
                }
            }
        }
        if done { std::task::Poll::Ready(()) } else { std::task::Poll::Pending }
    })
    .await;
    out.extend(results.into_iter().map(Option::unwrap));
    out
}

#[tokio::test]
async fn invalid_answers_with_a_state_fail_and_keep_the_round_open() {
    let server = Server::start(&[]).await;
    let first = server.call_tool(1, call("plan_deployment", json!({}))).await;
    let (key, s) = (first.only_key(), first.state());
    let bad = server
        .call_tool(
            2,
            answer(
                "plan_deployment",
                json!({}),
                json!({ &key: accept(json!({"region": "eu-west-1", "replicas": 20})) }),
                Some(&s),
            ),
        )
        .await;
    assert_eq!(bad.error(), (400, -32602, "Form content does not match requestedSchema".to_owned()));
    assert_eq!(bad.body["error"]["data"]["errors"][0]["field"], "replicas");
    let good = server
        .call_tool(
            3,
            answer(
                "plan_deployment",
                json!({}),
                json!({ &key: accept(json!({"region": "eu-west-1", "replicas": 3})) }),
                Some(&s),
            ),
        )
        .await;
    assert_eq!(good.done_text(), r#"{"region":"eu-west-1","replicas":3}"#);
}

#[tokio::test]
async fn invalid_answers_in_a_first_call_fail_and_start_over() {
    let server = Server::start(&[]).await;
    let bad =
        server.call_tool(1, answer("greeter", json!({}), json!({"user_name": accept(json!({"name": 5}))}), None)).await;
    assert_eq!(bad.error().0, 400);
    assert_eq!(bad.error().1, -32602);
    let malformed = server.call_tool(2, answer("greeter", json!({}), json!({"user_name": 12345}), None)).await;
    assert_eq!(malformed.error().1, -32602);
    // The call starts over from the start.
    let again = server.call_tool(3, call("greeter", json!({}))).await;
    assert_eq!(again.only_key(), "user_name");
}

#[tokio::test]
async fn invalid_state_fails_with_32602() {
    let server = Server::start(&[]).await;
    let first =
        server.call_tool(1, call("deploy_production_release", json!({"service": "api", "version": "1.0"}))).await;
    let s = first.state();
    let responses = json!({"confirm_release": accept(json!({"confirm": true}))});
    let mut modified = s.clone();
    let last = modified.pop().unwrap();
    modified.push(if last == 'A' { 'B' } else { 'A' });
    let cases = [
        ("deploy_production_release", json!({"service": "api", "version": "1.0"}), modified.clone()),
        ("deploy_production_release", json!({"service": "api", "version": "1.0"}), format!("{s}-TAMPERED")),
        ("deploy_production_release", json!({"service": "api", "version": "2.0"}), s.clone()),
        ("greeter", json!({}), s.clone()),
        ("deploy_production_release", json!({"service": "api", "version": "1.0"}), "garbage".to_owned()),
    ];
    for (i, (tool, args, st)) in cases.into_iter().enumerate() {
        let reply = server.call_tool(2 + i as u64, answer(tool, args, responses.clone(), Some(&st))).await;
        assert_eq!(reply.error(), (400, -32602, "Invalid or expired requestState".to_owned()), "case {i}");
    }
    // The real state still works: failures changed nothing.
    let done = server
        .call_tool(
            9,
            answer("deploy_production_release", json!({"service": "api", "version": "1.0"}), responses, Some(&s)),
        )
        .await;
    assert_eq!(done.done_text(), r#"{"result":"Successfully released api v1.0 to prod."}"#);
}

#[tokio::test]
async fn runtime_context_of_the_resuming_request_reaches_the_agent() {
    let server = Server::start(&[]).await;
    let first =
        server.call_tool(1, json!({"name": "echo_context", "arguments": {}, "context": {"user": "first"}})).await;
    let mut params = answer(
        "echo_context",
        json!({}),
        json!({ first.only_key(): accept(json!({"response": "hi"})) }),
        Some(&first.state()),
    );
    params["context"] = json!({"user": "second"});
    let done = server.call_tool(2, params).await;
    assert_eq!(done.done_text(), r#"{"answer":"hi","context":{"user":"second"}}"#);
}

#[tokio::test]
async fn lifetime_a_finished_call_answers_resends_with_the_same_result() {
    let server = Server::start(&[]).await;
    let first = server.call_tool(1, call("choose_region", json!({}))).await;
    let params = answer(
        "choose_region",
        json!({}),
        json!({ first.only_key(): accept(json!({"response": "eu-west-1"})) }),
        Some(&first.state()),
    );
    let one = server.call_tool(2, params.clone()).await;
    let two = server.call_tool(3, params).await;
    assert_eq!(one.result(), two.result());
}

// --- Ask a text question ------------------------------------------------------------

#[tokio::test]
async fn text_question_is_a_one_field_form_with_a_stable_key() {
    let server = Server::start(&[]).await;
    let first = server.call_tool(1, call("choose_region", json!({}))).await;
    let second = server.call_tool(2, call("choose_region", json!({}))).await;
    let key = first.only_key();
    assert_eq!(key, second.only_key(), "the key is derived from the question");
    assert!(key.starts_with("answer-") && key[7..].len() == 16 && key[7..].chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(
        first.requests()[&key],
        json!({"method": "elicitation/create", "params": {
            "message": "Which region should the service deploy to?", "mode": "form",
            "requestedSchema": {"properties": {"response": {"type": "string"}}, "required": ["response"], "type": "object"}
        }})
    );
}

#[tokio::test]
async fn text_question_declined_or_cancelled_ends_with_an_error_result() {
    let server = Server::start(&[]).await;
    for (action, expected) in
        [("decline", "The request for input was declined."), ("cancel", "The request for input was cancelled.")]
    {
        let first = server.call_tool(1, call("choose_region", json!({}))).await;
        let done = server
            .call_tool(
                2,
                answer(
                    "choose_region",
                    json!({}),
                    json!({ first.only_key(): {"action": action} }),
                    Some(&first.state()),
                ),
            )
            .await;
        assert!(done.is_error());
        assert_eq!(done.done_text(), expected);
    }
}

#[tokio::test]
async fn text_question_asked_twice_is_answered_once() {
    let server = Server::start(&[]).await;
    let first = server.call_tool(1, call("twin_questions", json!({}))).await;
    let key = first.only_key();
    let done = server
        .call_tool(
            2,
            answer(
                "twin_questions",
                json!({}),
                json!({ key: accept(json!({"response": "eu-west-1"})) }),
                Some(&first.state()),
            ),
        )
        .await;
    assert_eq!(done.done_text(), r#"{"primary":"eu-west-1","secondary":"eu-west-1"}"#);
}

// --- Ask for typed input ------------------------------------------------------------

#[tokio::test]
async fn typed_question_form_matches_the_seed() {
    let server = Server::start(&[]).await;
    let first = server.call_tool(1, call("plan_deployment", json!({}))).await;
    let key = first.only_key();
    assert!(key.starts_with("answer-"));
    assert_eq!(
        first.requests()[&key]["params"],
        json!({
            "message": "Where should the service deploy?", "mode": "form",
            "requestedSchema": {
                "properties": {
                    "region": {"enum": ["us-east-1", "eu-west-1"], "title": "Region", "type": "string"},
                    "replicas": {"maximum": 10, "minimum": 1, "title": "Replicas", "type": "integer"}
                },
                "required": ["region", "replicas"], "type": "object"
            }
        })
    );
}

#[tokio::test]
async fn typed_question_with_a_non_object_schema_asks_one_response_field() {
    let server = Server::start(&[]).await;
    let first = server.call_tool(1, call("onboarding", json!({}))).await;
    let second = server
        .call_tool(
            2,
            answer(
                "onboarding",
                json!({}),
                json!({ first.only_key(): accept(json!({"response": "Ada"})) }),
                Some(&first.state()),
            ),
        )
        .await;
    let key = second.only_key();
    assert_eq!(
        second.requests()[&key]["params"]["requestedSchema"],
        json!({"type": "object", "properties": {"response": {"type": "integer", "minimum": 0, "maximum": 150}}, "required": ["response"]})
    );
    assert_ne!(first.state(), second.state(), "a new round has a new requestState");
    let bad = server
        .call_tool(
            3,
            answer("onboarding", json!({}), json!({ &key: accept(json!({"response": 200})) }), Some(&second.state())),
        )
        .await;
    assert_eq!(bad.error().1, -32602);
    let done = server
        .call_tool(
            4,
            answer("onboarding", json!({}), json!({ &key: accept(json!({"response": 36})) }), Some(&second.state())),
        )
        .await;
    assert_eq!(done.done_text(), r#"{"name":"Ada","age":36}"#);
}

#[tokio::test]
async fn unaskable_interrupts_end_with_an_error_result() {
    let server = Server::start(&[]).await;
    for variant in ["object", "pattern", "too_many_fields", "bad_url", "nested"] {
        let reply = server.call_tool(1, call("unaskable", json!({ "variant": variant }))).await;
        assert!(reply.is_error(), "{variant}");
        let t = reply.done_text();
        assert!(t.starts_with("This tool needs input that can't be asked over MCP"), "{variant}: {t}");
    }
}

// --- Relay elicitation requests -----------------------------------------------------

#[tokio::test]
async fn relayed_requests_keep_the_agents_keys_and_pass_declines_to_the_agent() {
    let server = Server::start(&[]).await;
    let first = server.call_tool(1, call("greeter", json!({}))).await;
    assert_eq!(first.only_key(), "user_name");
    let done = server
        .call_tool(2, answer("greeter", json!({}), json!({"user_name": {"action": "decline"}}), Some(&first.state())))
        .await;
    assert!(!done.is_error());
    assert_eq!(done.done_text(), r#"{"greeting":"Hello, stranger!"}"#);
}

#[tokio::test]
async fn relayed_keys_are_prefixed_when_several_interrupts_are_pending() {
    let server = Server::start(&[]).await;
    let first = server.call_tool(1, call("relay_pair", json!({}))).await;
    let asked = first.requests();
    assert_eq!(asked.len(), 2);
    let mut responses = json!({});
    for (key, request) in &asked {
        let (digest, rest) = key.split_once('.').unwrap();
        assert!(digest.len() == 16 && digest.chars().all(|c| c.is_ascii_hexdigit()), "{key}");
        assert_eq!(rest, "1/user_name");
        let name = if request["params"]["message"] == "What is your name?" { "Ada" } else { "Charles" };
        responses[key] = accept(json!({"name": name}));
    }
    let done = server.call_tool(2, answer("relay_pair", json!({}), responses, Some(&first.state()))).await;
    assert_eq!(done.done_text(), r#"{"first":"Ada","second":"Charles"}"#);
}

// --- Send the user to a URL ---------------------------------------------------------

#[tokio::test]
async fn url_question_is_relayed_and_accept_means_done() {
    let server = Server::start(&[]).await;
    let caps: Value = serde_json::from_str(URL_CAPS).unwrap();
    let first = server.modern(1, "tools/call", call("connect_calendar", json!({})), caps.clone()).await;
    assert_eq!(
        first.requests(),
        *json!({"calendar_auth": {"method": "elicitation/create", "params": {
            "message": "Connect your calendar to continue.", "mode": "url",
            "url": "https://example.com/oauth/calendar/start"
        }}})
        .as_object()
        .unwrap()
    );
    let done = server
        .modern(
            2,
            "tools/call",
            answer("connect_calendar", json!({}), json!({"calendar_auth": {"action": "accept"}}), Some(&first.state())),
            caps,
        )
        .await;
    assert_eq!(done.done_text(), r#"{"status":"connected"}"#);
}

#[tokio::test]
async fn url_question_needs_the_url_capability() {
    let server = Server::start(&[]).await;
    let reply = server.call_tool(1, call("connect_calendar", json!({}))).await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.body,
        json!({"jsonrpc": "2.0", "id": 1, "error": {
            "code": -32021,
            "message": "This tool asks for human input and needs url elicitation.",
            "data": {"requiredCapabilities": {"elicitation": {"url": {}}}}
        }})
    );
}

// --- Support clients without elicitation --------------------------------------------

#[tokio::test]
async fn clients_without_elicitation_get_32021() {
    let server = Server::start(&[]).await;
    let reply = server.modern(1, "tools/call", call("choose_region", json!({})), json!({})).await;
    assert_eq!(reply.error(), (400, -32021, "This tool asks for human input and needs form elicitation.".to_owned()));
    assert_eq!(reply.body["error"]["data"], json!({"requiredCapabilities": {"elicitation": {"form": {}}}}));
}

#[tokio::test]
async fn clients_declaring_elicitation_without_modes_support_form() {
    let server = Server::start(&[]).await;
    let reply = server.modern(1, "tools/call", call("choose_region", json!({})), json!({"elicitation": {}})).await;
    assert_eq!(reply.result()["resultType"], "input_required");
}

#[tokio::test]
async fn legacy_clients_get_an_error_result_listing_the_interrupts() {
    let server = Server::start(&[]).await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "choose_region", "arguments": {}}});
    for headers in [vec![], vec![("mcp-protocol-version", "2025-11-25")], vec![("mcp-protocol-version", "2025-06-18")]]
    {
        let reply = server.post_raw(&headers, body.to_string()).await;
        let r = reply.result();
        assert_eq!(r["isError"], true);
        assert!(r.get("resultType").is_none(), "legacy results carry no resultType");
        assert_eq!(
            r["content"][0]["text"],
            "This tool paused to ask for human input, and this client can't answer it."
        );
        let pending: Value = serde_json::from_str(r["content"][1]["text"].as_str().unwrap()).unwrap();
        assert_eq!(pending[0]["value"], "Which region should the service deploy to?");
    }
}

#[tokio::test]
async fn legacy_clients_initialize_ping_and_list() {
    let server = Server::start(&[]).await;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let reply = server.post_raw(&[], init.to_string()).await;
    assert_eq!(reply.result()["protocolVersion"], "2025-11-25");
    let initialized =
        server.post_raw(&[], json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string()).await;
    assert_eq!(initialized.status, 202);
    let ping = server
        .post_raw(
            &[("mcp-protocol-version", "2025-11-25")],
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string(),
        )
        .await;
    assert_eq!(ping.result(), &json!({}));
    let list = server.post_raw(&[], json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string()).await;
    assert!(list.result()["tools"].as_array().unwrap().len() >= 10);
    assert!(list.result().get("ttlMs").is_none());
}

#[tokio::test]
async fn calls_that_cannot_keep_a_thread_end_with_an_error_result() {
    let server = Server::start(&["--no-threads"]).await;
    let reply = server.call_tool(1, call("choose_region", json!({}))).await;
    assert!(reply.is_error());
    assert_eq!(reply.done_text(), "This tool paused to ask for human input, and this call can't be resumed.");
}

#[tokio::test]
async fn static_breakpoints_end_eliciting_calls_and_give_others_the_state() {
    let server = Server::start(&[]).await;
    let eliciting = server.call_tool(1, call("release_gate", json!({}))).await;
    assert!(eliciting.is_error());
    assert!(eliciting.done_text().contains("static breakpoint"));
    let plain = server.modern(2, "tools/call", call("release_gate", json!({})), json!({})).await;
    assert!(!plain.is_error());
    assert_eq!(plain.done_text(), r#"{"prepared":true}"#);
    let legacy = server
        .post_raw(
            &[],
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call("release_gate", json!({}))})
                .to_string(),
        )
        .await;
    assert_eq!(legacy.result()["content"][0]["text"], r#"{"prepared":true}"#);
}

// --- Endpoint -----------------------------------------------------------------------

#[tokio::test]
async fn unknown_tools_and_bad_arguments_are_32602() {
    let server = Server::start(&[]).await;
    let reply = server.call_tool(1, call("no_such_tool", json!({}))).await;
    assert_eq!(reply.error(), (400, -32602, "Unknown tool: no_such_tool".to_owned()));
    let reply = server.call_tool(2, call("deploy_production_release", json!({"service": "api"}))).await;
    let (status, code, message) = reply.error();
    assert_eq!((status, code), (400, -32602));
    assert!(message.contains("version"), "{message}");
    let reply = server.call_tool(3, call("deploy_production_release", json!({"service": 1, "version": "1"}))).await;
    assert!(reply.error().2.contains("/service"), "{:?}", reply.body);
    let reply = server.call_tool(4, json!({"name": "greeter", "arguments": [1]})).await;
    assert_eq!(reply.error().1, -32602);
}

#[tokio::test]
async fn every_result_names_the_server_and_its_type() {
    let server = Server::start(&[]).await;
    let replies = [
        server.modern(1, "server/discover", json!({}), json!({})).await,
        server.modern(2, "tools/list", json!({}), json!({})).await,
        server.call_tool(3, call("choose_region", json!({}))).await,
        server.call_tool(4, call("unaskable", json!({"variant": "object"}))).await,
    ];
    for reply in &replies {
        let r = reply.result();
        assert!(r["resultType"].is_string(), "{r}");
        assert_eq!(r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "hitl");
        assert_eq!(r["_meta"]["io.modelcontextprotocol/serverInfo"]["version"], env!("CARGO_PKG_VERSION"));
    }
}

#[tokio::test]
async fn tools_list_lists_every_example_agent() {
    let server = Server::start(&[]).await;
    let list = server.modern(1, "tools/list", json!({}), json!({})).await;
    let names: Vec<&str> =
        list.result()["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    for name in [
        "greeter",
        "choose_region",
        "plan_deployment",
        "connect_calendar",
        "deploy_production_release",
        "onboarding",
        "survey",
        "twin_questions",
        "relay_pair",
        "issue_ticket",
        "echo_context",
        "release_gate",
        "unaskable",
    ] {
        assert!(names.contains(&name), "{name}");
    }
    // Without the examples, only the test program's own agents (`test_*`) are left.
    let without = Server::start(&["--no-examples"]).await;
    let list = without.modern(1, "tools/list", json!({}), json!({})).await;
    let names: Vec<&str> =
        list.result()["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["test_nag", "test_send_once"]);
}

// --- Secure paused calls ------------------------------------------------------------

#[tokio::test]
async fn a_request_state_works_only_for_its_caller() {
    let server = Server::start(&["--principal-header", "x-hitl-user"]).await;
    let call_as = |user: Option<&'static str>, id: u64, params: Value| {
        let server = &server;
        async move {
            let mut meta = crate::harness::modern_meta(json!({"elicitation": {}}));
            let mut full = params;
            full["_meta"] = meta.take();
            let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": full});
            let mut headers =
                vec![("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call"), ("mcp-name", "greeter")];
            if let Some(user) = user {
                headers.push(("x-hitl-user", user));
            }
            server.post_raw(&headers, body.to_string()).await
        }
    };
    let first = call_as(Some("alice"), 1, call("greeter", json!({}))).await;
    let s = first.state();
    let answer_params = answer("greeter", json!({}), json!({"user_name": accept(json!({"name": "Ada"}))}), Some(&s));
    let reply = call_as(Some("bob"), 2, answer_params.clone()).await;
    assert_eq!(reply.error(), (400, -32602, "Invalid or expired requestState".to_owned()));
    // Without the header there is no caller at all: refused before any thread is read.
    let reply = call_as(None, 3, answer_params.clone()).await;
    assert_eq!(reply.status, 401, "{:?}", reply.body);
    let done = call_as(Some("alice"), 4, answer_params).await;
    assert_eq!(done.done_text(), r#"{"greeting":"Hello, Ada!"}"#);
}
