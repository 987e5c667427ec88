use super::*;

/// The `[[agent]]` tables of a file.
fn agents(text: &str) -> Vec<AgentSpec> {
    #[derive(Deserialize)]
    struct File {
        agent: Vec<AgentSpec>,
    }
    toml::from_str::<File>(text).unwrap_or_else(|e| panic!("{e}")).agent
}

const ISSUE_EXAMPLE: &str = r#"
[[agent]]
name = "db_assistant"
description = "Answers questions about the orders database"
kind = "tool_calling"
model = { provider = "openai", base_url = "http://127.0.0.1:11434/v1", model = "llama3.1", api_key_env = "OPENAI_API_KEY" }
system_prompt = "You help with the orders database."
tools = ["db.*"]
review_mode = "batched"
max_steps = 10

[[agent]]
name = "release"
description = "Deploy a service version to production after confirmation"
kind = "workflow"
input_schema = { type = "object", properties = { service = { type = "string" }, version = { type = "string" } }, required = ["service", "version"] }
steps = [
  { ask = { message = "Deploying {service} to PRODUCTION ({version}). Confirm release?", schema = { type = "object", properties = { confirm = { type = "boolean", title = "Confirm Production Release" } }, required = ["confirm"] } } },
  { stop_unless = "confirm", result = "Deployment aborted by user." },
  { call = "deploy.release", args = { service = "{service}", version = "{version}" } },
]
"#;

fn problems(text: &str, prefixes: &[&str]) -> Vec<String> {
    let prefixes: Vec<String> = prefixes.iter().map(|p| (*p).to_owned()).collect();
    check(&agents(text), &prefixes).iter().map(Problem::to_string).collect()
}

#[test]
fn the_issue_example_is_valid() {
    assert_eq!(problems(ISSUE_EXAMPLE, &["db.", "deploy."]), Vec::<String>::new());
}

#[test]
fn tools_no_upstream_lists_are_refused() {
    let found = problems(ISSUE_EXAMPLE, &["orders."]);
    assert_eq!(
        found,
        [
            "agent[0].tools[0]: no [[upstream]] lists \"db.*\" (tool names start with \"orders.\")",
            "agent[1].steps[2].call: no [[upstream]] lists \"deploy.release\" (tool names start with \"orders.\")",
        ]
    );
    let none = problems(ISSUE_EXAMPLE, &[]);
    assert!(none[0].ends_with("no [[upstream]] is configured, so no tool \"db.*\" is listed"), "{none:?}");
    // A glob may match a part of an upstream's names, or all of several.
    assert!(problems(ISSUE_EXAMPLE, &["db.", "deploy."]).is_empty());
    assert!(listable("*", &["db.".into()]) && listable("d*", &["db.".into()]) && !listable("x*", &["db.".into()]));
}

#[test]
fn templates_must_name_an_argument_or_an_earlier_answer() {
    let text = r#"
[[agent]]
name = "w"
kind = "workflow"
input_schema = { type = "object", properties = { service = { type = "string" } } }
steps = [
  { ask = { message = "Release {service} {version}?", schema = { type = "object", properties = { confirm = { type = "boolean" } } } } },
  { stop_unless = "confirmed" },
  { call = "deploy.release", args = { service = "{service}", when = "{time}", ok = "{confirm}" } },
  { result = "Done: {service}, {reason}" },
]
"#;
    assert_eq!(
        problems(text, &["deploy."]),
        [
            "agent[0].steps[0].ask.message: {version} names no argument of the tool and no answer of an earlier step (there are: service)",
            "agent[0].steps[1].stop_unless: \"confirmed\" is no argument of the tool and no answer of an earlier step (there are: service, confirm)",
            "agent[0].steps[2].args.when: {time} names no argument of the tool and no answer of an earlier step (there are: service, confirm)",
            "agent[0].steps[3].result: {reason} names no argument of the tool and no answer of an earlier step (there are: service, confirm)",
        ]
    );
}

#[test]
fn schemas_that_cannot_be_forms_are_refused_with_their_pointer() {
    let text = r#"
[[agent]]
name = "w"
kind = "workflow"
steps = [
  { ask = { message = "Where?", schema = { type = "object", properties = { place = { type = "object", properties = { x = { type = "string" } } } } } } },
  { ask = { message = "How many?", schema = { type = "integer" } } },
  { ask = { message = "Sign in", url = "ftp://example.com/login" } },
]
"#;
    let found = problems(text, &[]);
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found[0].starts_with("agent[0].steps[0].ask.schema.properties.place: cannot be a form:"), "{found:?}");
    assert!(found[1].starts_with("agent[0].steps[1].ask.schema: a form is an object schema"), "{found:?}");
    assert!(found[2].starts_with("agent[0].steps[2].ask.url: "), "{found:?}");
}

#[test]
fn steps_keys_and_kinds_are_checked() {
    let text = r#"
[[agent]]
name = "w"
kind = "workflow"
tools = ["db.*"]
steps = [
  { ask = { message = "Token?", secret = "GitHub token" } },
  { result = "done" },
]

[[agent]]
name = "w"
kind = "workflow"
steps = [ { call = "db.x", result = "r" }, {} ]

[[agent]]
name = "t"
kind = "tool_calling"
steps = []
"#;
    assert_eq!(
        problems(text, &["db."]),
        [
            "agent[0].tools: tools is a key of kind = \"tool_calling\" agents",
            "agent[0].steps[0]: a secret goes only to a call's arguments: put the call right after it",
            "agent[1].name: another [[agent]] is named \"w\"",
            "agent[1].steps[0]: call, result do not go together in one step: give ask, stop_unless (with result), call (with args) or result",
            "agent[2].steps: steps is a key of kind = \"workflow\" agents",
            "agent[2].kind: a tool_calling agent needs a model = { provider, model, … }",
        ]
    );
}

#[test]
fn a_secret_is_for_the_next_call_only() {
    let text = r#"
[[agent]]
name = "w"
kind = "workflow"
steps = [
  { ask = { message = "Token?", secret = "GitHub token", key = "token" } },
  { call = "gh.create_repo", args = { token = "{token}" } },
  { result = "made with {token}" },
]
"#;
    assert_eq!(
        problems(text, &["gh."]),
        [
            "agent[0].steps[2].result: {token} names no argument of the tool and no answer of an earlier step (there are: none)"
        ]
    );
}

#[test]
fn one_secret_per_call_unique_keys_and_url_templates() {
    let text = r#"
[[agent]]
name = "w"
kind = "workflow"
steps = [
  { ask = { message = "Where?", url = "https://console.example.com/{tenant}", key = "visited" } },
  { ask = { message = "Again?", key = "visited" } },
  { ask = { message = "Token?", secret = "Token", key = "token" } },
  { ask = { message = "Other token?", secret = "Other", key = "other" } },
  { call = "gh.create_repo", args = { token = "{token}", other = "{other}" } },
]
"#;
    assert_eq!(
        problems(text, &["gh."]),
        [
            "agent[0].steps[1].ask.key: another question has this key",
            "agent[0].steps[3]: one secret per call: ask it right before its call",
        ]
    );
    let url = text.replace(
        "key = \"visited\" } },\n  { ask = { message = \"Again?\", key = \"visited\" } },",
        "key = \"visited\" } },",
    );
    let url = url.replace("  { ask = { message = \"Other token?\", secret = \"Other\", key = \"other\" } },\n", "");
    let url = url.replace(", other = \"{other}\"", "");
    assert_eq!(
        problems(&url, &["gh."]),
        [
            "agent[0].steps[0].ask.url: {tenant} names no argument of the tool and no answer of an earlier step (there are: none)"
        ]
    );
}
