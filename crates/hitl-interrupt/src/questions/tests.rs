//! The round logic as tables: interrupts in, questions out; answers in, verdicts out.
//! No runtime, no store, no HTTP.

use hitl_graph::Interrupt;
use serde_json::{Value, json};

use super::*;
use crate::resend::answers_digest_of;

fn interrupt(id: &str, value: Value, schema: Option<Value>) -> Interrupt {
    Interrupt { id: id.into(), step: "step".into(), value, response_schema: schema }
}

fn keys(questions: &[Question]) -> Vec<String> {
    questions.iter().map(|q| q.key.clone()).collect()
}

fn request(q: &Question) -> Value {
    serde_json::to_value(&q.request).unwrap()
}

fn is_hex16(s: &str) -> bool {
    s.len() == 16 && s.chars().all(|c| c.is_ascii_hexdigit())
}

/// A case: its name, the pending interrupts, and the keys (`answer-` for a derived
/// key, `/k` for a prefixed relay key `<digest>.1/k`) or a part of the error.
type BuildCase = (&'static str, Vec<Interrupt>, Result<Vec<&'static str>, &'static str>);

#[test]
fn build_table() {
    let relay_list = json!({"type": "mcp_elicitation", "tool_name": "ignored", "requests": [
        {"key": "user_name", "message": "What is your name?", "mode": "form",
         "requested_schema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}]});
    let relay_object = json!({"type": "mcp_elicitation", "requests": {
        "user_name": {"message": "What is your name?",
                      "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}}});
    let relay_wrapped = json!({"type": "mcp_elicitation", "requests": {
        "user_name": {"method": "elicitation/create", "params": {"mode": "form", "message": "What is your name?",
                      "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}}}});
    let cases: Vec<BuildCase> = vec![
        ("text", vec![interrupt("a", json!("Q?"), None)], Ok(vec!["answer-"])),
        (
            "same text twice",
            vec![interrupt("a", json!("Q?"), None), interrupt("b", json!("Q?"), None)],
            Ok(vec!["answer-"]),
        ),
        ("typed", vec![interrupt("a", json!("Q?"), Some(json!({"type": "integer"})))], Ok(vec!["answer-"])),
        ("relay list shape", vec![interrupt("a", relay_list.clone(), None)], Ok(vec!["user_name"])),
        ("relay object shape", vec![interrupt("a", relay_object.clone(), None)], Ok(vec!["user_name"])),
        ("relay method/params shape", vec![interrupt("a", relay_wrapped, None)], Ok(vec!["user_name"])),
        (
            "two relays",
            vec![interrupt("a", relay_list.clone(), None), interrupt("b", relay_object, None)],
            Ok(vec!["/user_name", "/user_name"]),
        ),
        (
            "object without schema",
            vec![interrupt("a", json!({"q": 1}), None)],
            Err("is not a string and has no response schema"),
        ),
        ("number without schema", vec![interrupt("a", json!(3), None)], Err("is not a string")),
        (
            "pattern",
            vec![interrupt(
                "a",
                json!("Q?"),
                Some(json!({"type": "object", "properties": {"c": {"type": "string", "pattern": "x"}}})),
            )],
            Err("/properties/c/pattern"),
        ),
        (
            "ftp url",
            vec![interrupt(
                "a",
                json!({"type": "mcp_elicitation", "requests": [{"key": "k", "message": "m", "mode": "url", "url": "ftp://x/y"}]}),
                None,
            )],
            Err("scheme ftp"),
        ),
        (
            "relay without message",
            vec![interrupt(
                "a",
                json!({"type": "mcp_elicitation", "requests": [{"key": "k", "mode": "url", "url": "https://x"}]}),
                None,
            )],
            Err("no message"),
        ),
        ("relay without requests", vec![interrupt("a", json!({"type": "mcp_elicitation"}), None)], Err("no requests")),
        (
            "relay with an unknown mode",
            vec![interrupt(
                "a",
                json!({"type": "mcp_elicitation", "requests": {"k": {"message": "m", "mode": "telepathy"}}}),
                None,
            )],
            Err("mode telepathy"),
        ),
        (
            "sampling only through mcp_input",
            vec![interrupt(
                "a",
                json!({"type": "mcp_elicitation", "requests": {"k": {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 1}}}}),
                None,
            )],
            Err("sampling/createMessage"),
        ),
        (
            "mcp_input sampling and roots",
            vec![interrupt(
                "a",
                json!({"type": "mcp_input", "requests": {
            "s": {"method": "sampling/createMessage", "params": {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 5}},
            "r": {"method": "roots/list", "params": {}}}}),
                None,
            )],
            Ok(vec!["s", "r"]),
        ),
    ];
    for (name, interrupts, expected) in cases {
        match (build(&interrupts), expected) {
            (Ok(questions), Ok(prefixes)) => {
                let got = keys(&questions);
                assert_eq!(got.len(), prefixes.len(), "{name}: {got:?}");
                for (key, want) in got.iter().zip(prefixes) {
                    if let Some(rest) = key.strip_prefix("answer-") {
                        assert!(is_hex16(rest), "{name}: {key}");
                        assert_eq!(want, "answer-", "{name}");
                    } else if let Some(suffix) = want.strip_prefix('/') {
                        let (digest, rest) = key.split_once('.').unwrap();
                        assert!(is_hex16(digest), "{name}: {key}");
                        assert_eq!(rest, format!("1/{suffix}"), "{name}");
                    } else {
                        assert_eq!(key, want, "{name}");
                    }
                }
            }
            (Err(e), Err(part)) => assert!(e.to_string().contains(part), "{name}: {e}"),
            (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn same_text_shares_one_question_for_both_interrupts() {
    let questions = build(&[interrupt("a", json!("Q?"), None), interrupt("b", json!("Q?"), None)]).unwrap();
    assert_eq!(questions[0].interrupt_ids, vec!["a", "b"]);
}

#[test]
fn identical_relays_are_asked_separately() {
    let relay = json!({"type": "mcp_elicitation", "requests": [{"key": "k", "message": "m", "mode": "url", "url": "https://x.example"}]});
    let questions = build(&[interrupt("a", relay.clone(), None), interrupt("b", relay, None)]).unwrap();
    let keys = keys(&questions);
    assert!(keys[0].ends_with(".1/k") && keys[1].ends_with(".2/k"), "{keys:?}");
    assert_eq!(keys[0].split_once('.').unwrap().0, keys[1].split_once('.').unwrap().0);
}

#[test]
fn typed_questions_show_non_strings_as_json_and_wrap_non_objects() {
    let questions =
        build(&[interrupt("a", json!({"ask": "age"}), Some(json!({"type": "integer", "minimum": 0})))]).unwrap();
    let r = request(&questions[0]);
    assert_eq!(r["params"]["message"], r#"{"ask":"age"}"#);
    assert_eq!(r["params"]["requestedSchema"]["properties"]["response"], json!({"type": "integer", "minimum": 0}));
    assert_eq!(questions[0].kind, QuestionKind::Typed { wrapped: true });
}

#[test]
fn needs_follow_the_requests() {
    let questions = build(&[
        interrupt("a", json!("Q?"), None),
        interrupt("b", json!({"type": "mcp_input", "requests": {"u": {"method": "elicitation/create", "params": {"mode": "url", "message": "m", "url": "https://x.example"}},
                                                             "r": {"method": "roots/list", "params": {}}}}), None),
    ])
    .unwrap();
    assert_eq!(needs(&questions), Needs { form: true, url: true, sampling: false, roots: true });
}

fn round(questions: Vec<Question>) -> Round {
    Round { n: 1, nonce: "n".into(), questions, asked_at_ms: 0, proof: String::new() }
}

fn responses(v: Value) -> InputResponses {
    serde_json::from_value(v).unwrap()
}

#[test]
fn judge_table() {
    let text = round(build(&[interrupt("a", json!("Q?"), None), interrupt("b", json!("Q?"), None)]).unwrap());
    let text_key = text.questions[0].key.clone();
    let relay = round(build(&[interrupt("r", json!({"type": "mcp_elicitation", "requests": [
        {"key": "name", "message": "Name?", "mode": "form", "requested_schema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
        {"key": "auth", "message": "Sign in.", "mode": "url", "url": "https://x.example/start"}]}), None)]).unwrap());
    let input = round(
        build(&[interrupt(
            "i",
            json!({"type": "mcp_input", "requests": {
        "s": {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}},
        "r": {"method": "roots/list", "params": {}}}}),
            None,
        )])
        .unwrap(),
    );
    let accept = |c: Value| json!({"action": "accept", "content": c});
    let cases: Vec<(&str, &Round, Value, Verdict)> = vec![
        ("text accepted resumes both interrupts", &text, json!({ &text_key: accept(json!({"response": "x"})) }),
            Verdict::Resume([("a".into(), json!("x")), ("b".into(), json!("x"))].into_iter().collect())),
        ("text declined ends the call", &text, json!({ &text_key: {"action": "decline"} }),
            Verdict::Finish(CallToolResult::error([DECLINED.to_owned()]))),
        ("text cancelled ends the call", &text, json!({ &text_key: {"action": "cancel"} }),
            Verdict::Finish(CallToolResult::error([CANCELLED.to_owned()]))),
        ("no answer asks again", &text, json!({"other": accept(json!({}))}), Verdict::Missing),
        ("relay answers gather under the agent's keys", &relay,
            json!({"name": accept(json!({"name": "Ada", "extra": 1})), "auth": {"action": "accept", "content": {"ignored": true}}}),
            Verdict::Resume([("r".into(), json!({"responses": {"name": {"action": "accept", "content": {"name": "Ada"}}, "auth": {"action": "accept"}}}))].into_iter().collect())),
        ("relay declines reach the agent", &relay, json!({"name": {"action": "decline"}, "auth": {"action": "cancel"}}),
            Verdict::Resume([("r".into(), json!({"responses": {"name": {"action": "decline"}, "auth": {"action": "cancel"}}}))].into_iter().collect())),
        ("sampling and roots answers are typed", &input, json!({
            "s": {"role": "assistant", "content": {"type": "text", "text": "Paris"}, "model": "m", "stopReason": "endTurn"},
            "r": {"roots": [{"uri": "file:///r", "name": "R"}]}}),
            Verdict::Resume([("i".into(), json!({"responses": {
                "s": {"role": "assistant", "content": {"type": "text", "text": "Paris"}, "model": "m", "stopReason": "endTurn"},
                "r": {"roots": [{"uri": "file:///r", "name": "R"}]}}}))].into_iter().collect())),
    ];
    for (name, round, given, want) in cases {
        assert_eq!(judge(round, &responses(given)), want, "{name}");
    }
}

#[test]
fn invalid_answers_are_32602_and_win_over_missing_ones() {
    let relay = round(build(&[interrupt("r", json!({"type": "mcp_elicitation", "requests": [
        {"key": "name", "message": "Name?", "mode": "form", "requested_schema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
        {"key": "auth", "message": "Sign in.", "mode": "url", "url": "https://x.example/start"}]}), None)]).unwrap());
    for given in [
        json!({"name": {"action": "accept", "content": {"name": 3}}}),
        json!({"name": {"action": "accept", "content": {}}}),
        json!({"name": 12345}),
        json!({"name": {"action": "maybe"}}),
    ] {
        match judge(&relay, &responses(given.clone())) {
            Verdict::Invalid(e) => assert_eq!(e.code, hitl_protocol::ErrorCode::INVALID_PARAMS, "{given}"),
            other => panic!("{given}: {other:?}"),
        }
    }
    let Verdict::Invalid(e) = judge(&relay, &responses(json!({"name": {"action": "accept", "content": {"name": 3}}})))
    else {
        panic!()
    };
    assert_eq!(e.message, FORM_MISMATCH);
    assert_eq!(e.data.unwrap()["errors"][0]["field"], "name");
}

#[test]
fn answers_digest_ignores_other_keys() {
    let r = round(build(&[interrupt("a", json!("Q?"), None)]).unwrap());
    let key = r.questions[0].key.clone();
    let a = responses(json!({ &key: {"action": "decline"} }));
    let b = responses(json!({ &key: {"action": "decline"}, "noise": 1 }));
    assert_eq!(answers_digest_of(&r, &a), answers_digest_of(&r, &b));
    let c = responses(json!({ &key: {"action": "cancel"} }));
    assert_ne!(answers_digest_of(&r, &a), answers_digest_of(&r, &c));
}

fn batched(calls: Value) -> Interrupt {
    let requests: Vec<Value> = calls.as_array().unwrap().iter().map(|c| json!({"name": c[0], "args": c[1]})).collect();
    let configs: Vec<Value> =
        calls.as_array().unwrap().iter().map(|c| json!({"action_name": c[0], "allowed_decisions": c[2]})).collect();
    interrupt("r", json!({"action_requests": requests, "review_configs": configs}), None)
}

#[test]
fn every_tool_call_gets_its_own_review_question() {
    let same = json!(["send_email", {"to": "a@b.c"}, ["approve", "reject"]]);
    let questions = build(&[batched(json!([same.clone(), same]))]).unwrap();
    let keys = keys(&questions);
    assert_eq!(keys.len(), 2);
    assert!(keys[0].starts_with("review-") && keys[0].ends_with(".1") && keys[1].ends_with(".2"), "{keys:?}");
    let r = request(&questions[0]);
    assert_eq!(r["params"]["message"], "Run send_email?", "no description: Run <tool>?");
    let choices: Vec<&str> = r["params"]["requestedSchema"]["properties"]["decision"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["const"].as_str().unwrap())
        .collect();
    assert_eq!(choices, ["approve", "reject"]);
    assert!(r["params"]["requestedSchema"]["properties"].get("args").is_none(), "no edit, no args field");
}

#[test]
fn review_answers_become_decisions_in_order() {
    let all = json!(["approve", "edit", "reject", "respond"]);
    let r = round(build(&[batched(json!([["a", {"x": 1}, all.clone()], ["b", {}, all]]))]).unwrap());
    let (k1, k2) = (r.questions[0].key.clone(), r.questions[1].key.clone());
    let accept = |c: Value| json!({"action": "accept", "content": c});
    let verdict = judge(
        &r,
        &responses(json!({
            &k1: accept(json!({"decision": "edit", "args": "{\"x\": 2}"})),
            &k2: accept(json!({"decision": "reject", "message": " "})),
        })),
    );
    assert_eq!(
        verdict,
        Verdict::Resume(
            [(
                "r".into(),
                json!({"decisions": [
                    {"type": "edit", "edited_action": {"name": "a", "args": {"x": 2}}},
                    {"type": "reject"}
                ]})
            )]
            .into_iter()
            .collect()
        )
    );
    let verdict = judge(
        &r,
        &responses(json!({ &k1: {"action": "decline"}, &k2: accept(json!({"decision": "respond", "message": "hi"})) })),
    );
    assert_eq!(
        verdict,
        Verdict::Resume(
            [("r".into(), json!({"decisions": [{"type": "reject"}, {"type": "respond", "message": "hi"}]}))]
                .into_iter()
                .collect()
        )
    );
    assert!(matches!(
        judge(&r, &responses(json!({ &k1: {"action": "cancel"}, &k2: {"action": "cancel"} }))),
        Verdict::Finish(_)
    ));
}

#[test]
fn per_call_reviews_check_the_decision_schema_but_never_fetch() {
    let schema = json!({"oneOf": [
        {"type": "object", "properties": {"type": {"const": "approve"}}, "required": ["type"]},
        {"type": "object", "properties": {"type": {"const": "edit"}, "edited_action": {"type": "object", "properties": {
            "name": {"const": "t"}, "args": {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}}, "required": ["name", "args"]}},
         "required": ["type", "edited_action"]}]});
    let value = json!({"type": "tool_approval", "action_request": {"name": "t", "args": {"n": 1}},
                       "review_config": {"action_name": "t", "allowed_decisions": ["approve", "edit"]}});
    let r = round(build(&[interrupt("p", value.clone(), Some(schema))]).unwrap());
    let key = r.questions[0].key.clone();
    let Verdict::Invalid(e) =
        judge(&r, &responses(json!({ &key: {"action": "accept", "content": {"decision": "edit", "args": "{}"}} })))
    else {
        panic!()
    };
    assert_eq!(e.message, r#"The decision does not fit the tool: "n" is a required property"#);
    let ok = judge(
        &r,
        &responses(json!({ &key: {"action": "accept", "content": {"decision": "edit", "args": "{\"n\": 5}"}} })),
    );
    assert_eq!(
        ok,
        Verdict::Resume(
            [("p".into(), json!({"type": "edit", "edited_action": {"name": "t", "args": {"n": 5}}}))]
                .into_iter()
                .collect()
        )
    );
    // A schema that refers outside itself is not checked.
    let remote = json!({"oneOf": [{"$ref": "https://example.com/decision.json"}]});
    let r = round(build(&[interrupt("p", value, Some(remote))]).unwrap());
    let key = r.questions[0].key.clone();
    assert!(matches!(
        judge(&r, &responses(json!({ &key: {"action": "accept", "content": {"decision": "edit", "args": "{}"}} }))),
        Verdict::Resume(_)
    ));
}

#[test]
fn a_review_that_covers_later_calls_says_so_and_its_approval_may_narrow_it() {
    let covers = json!({"tool": "fs.write_file", "same_arguments": true, "ttl_seconds": 900, "caller": "user:alice"});
    let value = |allowed: Value| {
        json!({"type": "tool_approval", "action_request": {"name": "fs.write_file", "args": {"path": "a"}},
               "review_config": {"action_name": "fs.write_file", "allowed_decisions": allowed}, "covers": covers})
    };
    let r = round(build(&[interrupt("p", value(json!(["approve", "edit", "reject"])), None)]).unwrap());
    let asked = request(&r.questions[0]);
    let said = "this call, and your calls of fs.write_file with these arguments for 15 min";
    assert!(asked["params"]["message"].as_str().unwrap().ends_with(&format!("An approval covers {said}.")), "{asked}");
    let field = &asked["params"]["requestedSchema"]["properties"]["cover"];
    assert_eq!((&field["type"], &field["default"]), (&json!("boolean"), &json!(true)), "{asked}");
    assert!(field["description"].as_str().unwrap().contains(said));

    let key = r.questions[0].key.clone();
    let decided = |content: Value| judge(&r, &responses(json!({ &key: {"action": "accept", "content": content} })));
    let resumed = |decision: Value| Verdict::Resume([("p".into(), decision)].into_iter().collect());
    assert_eq!(decided(json!({"decision": "approve"})), resumed(json!({"type": "approve", "cover": true})));
    assert_eq!(
        decided(json!({"decision": "approve", "cover": false})),
        resumed(json!({"type": "approve", "cover": false})),
        "narrowed to this call"
    );
    assert!(matches!(decided(json!({"decision": "approve", "cover": "no"})), Verdict::Invalid(_)));
    // Only an approval as asked covers: not an edit, not a rejection.
    let edit = decided(json!({"decision": "edit", "args": "{\"path\": \"b\"}", "cover": true}));
    assert_eq!(
        edit,
        resumed(json!({"type": "edit", "edited_action": {"name": "fs.write_file", "args": {"path": "b"}}}))
    );
    assert_eq!(decided(json!({"decision": "reject", "cover": true})), resumed(json!({"type": "reject"})));

    // A review that cannot approve offers nothing to cover.
    let r = round(build(&[interrupt("p", value(json!(["reject"])), None)]).unwrap());
    assert!(request(&r.questions[0])["params"]["requestedSchema"]["properties"].get("cover").is_none());
}

#[test]
fn relayed_requests_without_a_key_are_keyed_by_what_they_ask() {
    let schema = json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]});
    let relay = |message: &str| json!({"type": "mcp_elicitation", "requests": [{"message": message, "mode": "form", "requested_schema": schema}]});
    let asked = build(&[interrupt("a", relay("Confirm release?"), None)]).unwrap();
    let again = build(&[interrupt("b", relay("Confirm release?"), None)]).unwrap();
    let other = build(&[interrupt("a", relay("Confirm rollback?"), None)]).unwrap();
    assert!(asked[0].key.starts_with("answer-") && asked[0].key.len() == "answer-".len() + 16, "{}", asked[0].key);
    assert_eq!(keys(&asked), keys(&again), "the same request, the same key");
    assert_ne!(keys(&asked), keys(&other));
    assert!(matches!(&asked[0].kind, QuestionKind::Relay { agent_key } if *agent_key == asked[0].key));
}

/// A text question's key is what it was when the digest was made of `{"text": message}`
/// built as an object: a round paused by an earlier build keeps its keys.
#[test]
fn a_text_questions_key_is_the_digest_of_its_text_as_an_object() {
    let built = build(&[interrupt("i", json!("Which region?"), None)]).unwrap();
    let expected = format!("answer-{}", short_digest(&json!({ "text": "Which region?" })));
    assert_eq!(expected, "answer-39f2a04ff2430fac", "as earlier builds made it");
    assert_eq!(keys(&built), [expected]);
}
