//! The fixtures the official MCP conformance suite calls (`hitl serve
//! --conformance-fixtures`), each an ordinary hitl agent: graphs whose steps interrupt
//! with text, typed or relayed questions. Nothing in the server knows them.

use hitl_graph::{Agent, TaskSupport};
use hitl_graph::{END, START, StateGraph, StepError};
use serde_json::{Value, json};

use crate::{agent, no_arguments};

/// The fixture tools, in the order `tools/list` shows them (the first takes no
/// arguments, as the suite's header scenarios expect).
pub fn tools() -> Vec<Agent> {
    vec![
        simple(
            "test_simple_text",
            "Returns a text response.",
            json!({"text": "This is a simple text response for testing."}),
        ),
        simple("test_logging_tool", "Runs without logging unless asked.", json!({"logged": false})),
        content(
            "test_image_content",
            "Returns an image.",
            json!([{"type": "image", "data": RED_PIXEL, "mimeType": "image/png"}]),
        ),
        content(
            "test_audio_content",
            "Returns a sound.",
            json!([{"type": "audio", "data": SILENCE, "mimeType": "audio/wav"}]),
        ),
        content(
            "test_embedded_resource",
            "Returns an embedded resource.",
            json!([{"type": "resource", "resource": {"uri": "test://embedded-resource", "mimeType": "text/plain",
                                                     "text": "This is an embedded resource content."}}]),
        ),
        content(
            "test_multiple_content_types",
            "Returns text, an image and a resource.",
            json!([
                {"type": "text", "text": "Multiple content types test:"},
                {"type": "image", "data": RED_PIXEL, "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "test://mixed-content-resource", "mimeType": "application/json",
                                                  "text": "{\"test\":\"data\",\"value\":123}"}}
            ]),
        ),
        error_handling(),
        with_progress(),
        relay_one(
            "test_input_required_result_elicitation",
            "user_name",
            "What is your name?",
            "name",
            |a| json!({ "text": format!("Hello, {}!", a["content"]["name"].as_str().unwrap_or("stranger")) }),
        ),
        input_one(
            "test_input_required_result_sampling",
            "capital_question",
            sampling("What is the capital of France?", 100),
        ),
        input_one(
            "test_input_required_result_list_roots",
            "client_roots",
            json!({"method": "roots/list", "params": {}}),
        ),
        confirm("test_input_required_result_request_state", "state-ok"),
        multiple_inputs(),
        multi_round(),
        confirm("test_input_required_result_tampered_state", "state-ok"),
        capabilities(),
        input_one("test_missing_capability", "sample", sampling("Say something.", 20)),
        relay_one("test_streaming_elicitation", "answer", "Say something.", "answer", |a| json!({ "answer": a })),
        json_schema_2020_12(),
        custom_header(),
        // The Tasks extension scenarios' tools: ones that pause (a task of a call that
        // pauses), run long or fail (a task of a call that runs on), and a synchronous one.
        simple_greet(),
        confirm_delete(),
        multi_input(),
        slow_compute(),
        failing_job(),
        protocol_error_job(),
        // The 2025-era scenarios, answered by push (`--legacy-elicitation`).
        pushed(
            "test_elicitation",
            json!({"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}),
            |args| {
                let message = args["message"].as_str().unwrap_or("Please provide your information");
                json!({"method": "elicitation/create", "params": {"mode": "form", "message": message,
                    "requestedSchema": {"type": "object", "properties": {
                        "username": {"type": "string", "description": "User's response"},
                        "email": {"type": "string", "description": "User's email address"}},
                        "required": ["username", "email"]}}})
            },
        ),
        pushed(
            "test_sampling",
            json!({"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]}),
            |args| sampling(args["prompt"].as_str().unwrap_or("Hello"), 100),
        ),
        pushed("test_elicitation_sep1034_defaults", no_arguments(), |_| {
            form_request(
                "Please review and update the form fields with defaults",
                json!({
                    "name": {"type": "string", "description": "User name", "default": "John Doe"},
                    "age": {"type": "integer", "description": "User age", "default": 30},
                    "score": {"type": "number", "description": "User score", "default": 95.5},
                    "status": {"type": "string", "description": "User status", "enum": ["active", "inactive", "pending"],
                               "default": "active"},
                    "verified": {"type": "boolean", "description": "Verification status", "default": true}
                }),
            )
        }),
        pushed("test_elicitation_sep1330_enums", no_arguments(), |_| {
            let choices = |titles: [&str; 3]| {
                json!([{"const": "value1", "title": titles[0]}, {"const": "value2", "title": titles[1]},
                       {"const": "value3", "title": titles[2]}])
            };
            form_request(
                "Please select options from the enum fields",
                json!({
                    "untitledSingle": {"type": "string", "description": "Select one option",
                                       "enum": ["option1", "option2", "option3"]},
                    "titledSingle": {"type": "string", "description": "Select one option with titles",
                                     "oneOf": choices(["First Option", "Second Option", "Third Option"])},
                    "legacyEnum": {"type": "string", "description": "Select one option (legacy)",
                                   "enum": ["opt1", "opt2", "opt3"], "enumNames": ["Option One", "Option Two", "Option Three"]},
                    "untitledMulti": {"type": "array", "description": "Select multiple options",
                                      "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                    "titledMulti": {"type": "array", "description": "Select multiple options with titles",
                                    "items": {"anyOf": choices(["First Choice", "Second Choice", "Third Choice"])}}
                }),
            )
        }),
    ]
}

/// `greet {name}`: answers at once (a synchronous call, never a task).
fn simple_greet() -> Agent {
    let graph = StateGraph::new()
        .add_step("greet", |state, _| async move {
            let name = state["name"].as_str().unwrap_or("World").to_owned();
            let mut result = serde_json::Map::new();
            result.insert("content".into(), json!([{"type": "text", "text": format!("Hello, {name}!")}]));
            Ok(hitl_graph::payload::ToolResult(result).to_value())
        })
        .add_edge(START, "greet")
        .add_edge("greet", END);
    let input = json!({"type": "object", "properties": {"name": {"type": "string"}}});
    agent("greet", "Greets at once.", input, graph).with_tasks(TaskSupport::Forbidden)
}

/// `slow_compute {seconds, label}`: works for `seconds`, then says so (a task when it
/// takes longer than the wait).
fn slow_compute() -> Agent {
    let graph = StateGraph::new()
        .add_step("compute", |state, _| async move {
            let seconds = state["seconds"].as_f64().unwrap_or(0.0).clamp(0.0, 3600.0);
            tokio::time::sleep(std::time::Duration::from_secs_f64(seconds)).await;
            Ok(json!({ "label": state["label"], "seconds": seconds }))
        })
        .add_edge(START, "compute")
        .add_edge("compute", END);
    let input = json!({"type": "object", "properties": {"seconds": {"type": "number", "minimum": 0},
                                                        "label": {"type": "string"}}});
    agent("slow_compute", "Works for the given seconds.", input, graph)
}

/// `failing_job`: a tool that always ends with an error result after a second; only
/// ever a task.
fn failing_job() -> Agent {
    let graph = StateGraph::new()
        .add_step("fail", |_, _| async move {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            Err::<Value, _>(StepError::msg("the job failed, as it always does"))
        })
        .add_edge(START, "fail")
        .add_edge("fail", END);
    agent("failing_job", "Fails, as a task.", no_arguments(), graph).with_tasks(TaskSupport::Required)
}

/// `protocol_error_job`: a step that panics (a server failure, not a tool error); only
/// ever a task.
fn protocol_error_job() -> Agent {
    let graph = StateGraph::new()
        .add_step("crash", |_, _| async move {
            if std::hint::black_box(true) {
                panic!("the job crashed, as it always does");
            }
            Ok(Value::Null)
        })
        .add_edge(START, "crash")
        .add_edge("crash", END);
    agent("protocol_error_job", "Crashes, as a task.", no_arguments(), graph).with_tasks(TaskSupport::Required)
}

/// `confirm_delete {filename}`: asks to confirm, then says what it did.
fn confirm_delete() -> Agent {
    let graph = StateGraph::new()
        .add_step("confirm", |state, ctx| async move {
            let file = state["filename"].as_str().unwrap_or_default().to_owned();
            let request = json!({"message": format!("Delete {file}?"), "requestedSchema": form("confirm", "boolean")});
            let reply = ctx.interrupt(json!({"type": "mcp_elicitation", "requests": {"confirm": request}}))?;
            let confirmed = reply["responses"]["confirm"]["content"]["confirm"] == true;
            Ok(json!({ "deleted": confirmed, "filename": file }))
        })
        .add_edge(START, "confirm")
        .add_edge("confirm", END);
    let input = json!({"type": "object", "properties": {"filename": {"type": "string"}}, "required": ["filename"]});
    agent("confirm_delete", "Deletes a file once the user confirms.", input, graph)
}

/// `multi_input`: two questions at once, answered in any order.
fn multi_input() -> Agent {
    let ask = |key: &'static str| {
        move |_: Value, ctx: hitl_graph::StepContext| async move {
            let schema =
                json!({"type": "object", "properties": {"name": {"type": "string"}, "confirm": {"type": "boolean"}}});
            let request = json!({"message": format!("Input {key}?"), "requestedSchema": schema});
            let reply = ctx.interrupt(json!({"type": "mcp_elicitation", "requests": { key: request }}))?;
            Ok(json!({ key: reply["responses"][key]["content"].clone() }))
        }
    };
    let graph = StateGraph::new()
        .add_step("first", ask("first"))
        .add_step("second", ask("second"))
        .add_edge(START, "first")
        .add_edge(START, "second")
        .add_edge("first", END)
        .add_edge("second", END);
    agent("multi_input", "Asks two questions at once.", no_arguments(), graph)
}

/// One form elicitation request of `properties`.
fn form_request(message: &str, properties: Value) -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "form", "message": message,
        "requestedSchema": {"type": "object", "properties": properties}}})
}

/// A fixture that asks the client one request made from its arguments and returns the
/// answer as it came (`{"answer": …}`).
fn pushed(name: &str, input: Value, request: fn(&Value) -> Value) -> Agent {
    let graph = StateGraph::new()
        .add_step("ask", move |state, ctx| async move {
            let reply = ctx.interrupt(json!({"type": "mcp_input", "requests": { "input": request(&state) }}))?;
            Ok(json!({ "answer": reply["responses"]["input"] }))
        })
        .add_edge(START, "ask")
        .add_edge("ask", END);
    agent(name, "A conformance fixture that asks the client one request.", input, graph)
}

/// A tool whose argument travels in a header too (`x-mcp-header`), so clients send
/// `Mcp-Param-Region` and the server checks it against the body.
fn custom_header() -> Agent {
    let input = json!({"type": "object", "properties": {
        "region": {"type": "string", "description": "Where to run", "x-mcp-header": "Region"}
    }, "required": ["region"]});
    let graph = StateGraph::new()
        .add_step("echo", |state, _| async move { Ok(json!({ "region": state["region"] })) })
        .add_edge(START, "echo")
        .add_edge("echo", END);
    agent("test_custom_header", "Echoes a region that also travels in the Mcp-Param-Region header.", input, graph)
}

/// A tool whose input schema uses JSON Schema 2020-12 keywords, listed as written.
fn json_schema_2020_12() -> Agent {
    let input = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {"address": {"$anchor": "addressDef", "type": "object",
                              "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/address"},
            "contactMethod": {"type": "string", "enum": ["phone", "email"]},
            "phone": {"type": "string"},
            "email": {"type": "string"}
        },
        "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
        "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
        "then": {"required": ["phone"]},
        "else": {"required": ["email"]},
        "additionalProperties": false
    });
    let graph = StateGraph::new()
        .add_step("echo", |state, _| async move { Ok(json!({ "received": state })) })
        .add_edge(START, "echo")
        .add_edge("echo", END)
        .output_keys(["received"]);
    agent("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features", input, graph)
}

/// The fixture prompts.
pub fn prompts() -> Vec<Agent> {
    let text_messages = |text: &str| json!({"messages": [{"role": "user", "content": {"type": "text", "text": text}}]});
    vec![
        simple("test_simple_prompt", "A simple prompt.", text_messages("This is a simple prompt for testing.")),
        prompt_with_arguments(),
        embedded_resource_prompt(),
        image_prompt(),
        input_prompt(),
    ]
}

/// An agent of one step that returns `output` at once.
fn simple(name: &str, description: &str, output: Value) -> Agent {
    let graph = StateGraph::new()
        .add_step("run", move |_, _| {
            let output = output.clone();
            async move { Ok(output) }
        })
        .add_edge(START, "run")
        .add_edge("run", END);
    agent(name, description, no_arguments(), graph)
}

/// An agent that returns the content blocks `content` as its tool result, unchanged
/// (`payload::ToolResult`, as a gateway returns an upstream's).
fn content(name: &str, description: &str, content: Value) -> Agent {
    let mut result = serde_json::Map::new();
    result.insert("content".into(), content);
    simple(name, description, hitl_graph::payload::ToolResult(result).to_value())
}

/// A WAV file of eight silent 16-bit samples at 8 kHz, base64.
const SILENCE: &str = "UklGRjQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YRAAAAAAAAAAAAAAAAAAAAAAAAAA";

fn error_handling() -> Agent {
    let graph = StateGraph::new()
        .add_step("fail", |_, _| async { Err::<Value, _>(StepError::msg("This tool always fails, on purpose.")) })
        .add_edge(START, "fail")
        .add_edge("fail", END);
    agent("test_error_handling", "Fails with an error result.", no_arguments(), graph)
}

/// Three supersteps: with a progress token the client sees progress 0, 1, 2, 3.
fn with_progress() -> Agent {
    let step = |n: u32| move |_: Value, _| async move { Ok(json!({ format!("step{n}"): true })) };
    let graph = StateGraph::new()
        .add_step("one", step(1))
        .add_step("two", step(2))
        .add_step("three", step(3))
        .add_edge(START, "one")
        .add_edge("one", "two")
        .add_edge("two", "three")
        .add_edge("three", END);
    agent("test_tool_with_progress", "Reports progress as its three steps finish.", no_arguments(), graph)
}

fn sampling(question: &str, max_tokens: u32) -> Value {
    json!({"method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": question}}],
        "maxTokens": max_tokens
    }})
}

fn form(field: &str, ty: &str) -> Value {
    json!({"type": "object", "properties": { field: {"type": ty} }, "required": [field]})
}

/// Relays one form with one field; `finish` turns the answer into the output.
fn relay_one(
    name: &str,
    key: &'static str,
    message: &'static str,
    field: &'static str,
    finish: fn(&Value) -> Value,
) -> Agent {
    let graph = StateGraph::new()
        .add_step("ask", move |_, ctx| async move {
            let request = json!({"message": message, "requestedSchema": form(field, "string")});
            let reply = ctx.interrupt(json!({"type": "mcp_elicitation", "requests": { key: request }}))?;
            Ok(finish(&reply["responses"][key]))
        })
        .add_edge(START, "ask")
        .add_edge("ask", END);
    agent(name, "A conformance fixture that asks for input.", no_arguments(), graph)
}

/// Relays one input request of any kind (`{method, params}`).
fn input_one(name: &str, key: &'static str, request: Value) -> Agent {
    let graph = StateGraph::new()
        .add_step("ask", move |_, ctx| {
            let request = request.clone();
            async move {
                let reply = ctx.interrupt(json!({"type": "mcp_input", "requests": { key: request }}))?;
                Ok(json!({ "answer": reply["responses"][key] }))
            }
        })
        .add_edge(START, "ask")
        .add_edge("ask", END);
    agent(name, "A conformance fixture that asks the client for input.", no_arguments(), graph)
}

/// Asks `confirm` (`{ok: boolean}`) and returns `text`.
fn confirm(name: &str, text: &'static str) -> Agent {
    let graph = StateGraph::new()
        .add_step("confirm", move |_, ctx| async move {
            let request = json!({"message": "Please confirm.", "requestedSchema": form("ok", "boolean")});
            let reply = ctx.interrupt(json!({"type": "mcp_elicitation", "requests": {"confirm": request}}))?;
            Ok(json!({ "text": text, "ok": reply["responses"]["confirm"]["content"]["ok"] }))
        })
        .add_edge(START, "confirm")
        .add_edge("confirm", END);
    agent(name, "A conformance fixture whose round state must verify.", no_arguments(), graph)
}

fn multiple_inputs() -> Agent {
    let graph = StateGraph::new()
        .add_step("ask", |_, ctx| async move {
            let reply = ctx.interrupt(json!({"type": "mcp_input", "requests": {
                "user_name": {"method": "elicitation/create", "params": {"message": "What is your name?", "requestedSchema": form("name", "string")}},
                "greeting": sampling("Write a greeting.", 50),
                "client_roots": {"method": "roots/list", "params": {}}
            }}))?;
            Ok(json!({ "answers": reply["responses"] }))
        })
        .add_edge(START, "ask")
        .add_edge("ask", END);
    agent("test_input_required_result_multiple_inputs", "Asks for three kinds of input at once.", no_arguments(), graph)
}

fn multi_round() -> Agent {
    let ask = |key: &'static str, message: &'static str, field: &'static str| {
        move |_: Value, ctx: hitl_graph::StepContext| async move {
            let request = json!({"message": message, "requestedSchema": form(field, "string")});
            let reply = ctx.interrupt(json!({"type": "mcp_elicitation", "requests": { key: request }}))?;
            Ok(json!({ field: reply["responses"][key]["content"][field] }))
        }
    };
    let graph = StateGraph::new()
        .add_step("step1", ask("step1", "What is your name?", "name"))
        .add_step("step2", ask("step2", "What is your favorite color?", "color"))
        .add_edge(START, "step1")
        .add_edge("step1", "step2")
        .add_edge("step2", END);
    agent("test_input_required_result_multi_round", "Asks two rounds of questions.", no_arguments(), graph)
}

/// Asks only for what the client declared: sampling when it samples, else a form.
fn capabilities() -> Agent {
    let graph = StateGraph::new()
        .add_step("ask", |_, ctx| async move {
            let caps = &ctx.metadata()["clientCapabilities"];
            let request = if caps.get("sampling").is_some() {
                sampling("Say something.", 20)
            } else if caps.get("roots").is_some() {
                json!({"method": "roots/list", "params": {}})
            } else {
                json!({"method": "elicitation/create", "params": {"message": "Say something.", "requestedSchema": form("text", "string")}})
            };
            let reply = ctx.interrupt(json!({"type": "mcp_input", "requests": {"sample_input": request}}))?;
            Ok(json!({ "answer": reply["responses"]["sample_input"] }))
        })
        .add_edge(START, "ask")
        .add_edge("ask", END);
    agent("test_input_required_result_capabilities", "Asks only for input the client can give.", no_arguments(), graph)
}

fn prompt_with_arguments() -> Agent {
    let graph = StateGraph::new()
        .add_step("render", |state, _| async move {
            let text = format!(
                "Prompt with arguments: arg1='{}', arg2='{}'",
                state["arg1"].as_str().unwrap_or_default(),
                state["arg2"].as_str().unwrap_or_default()
            );
            Ok(json!({"messages": [{"role": "user", "content": {"type": "text", "text": text}}]}))
        })
        .add_edge(START, "render")
        .add_edge("render", END)
        .output_keys(["messages"]);
    let input = json!({"type": "object", "properties": {
        "arg1": {"type": "string", "description": "First test argument"},
        "arg2": {"type": "string", "description": "Second test argument"}
    }, "required": ["arg1", "arg2"]});
    agent("test_prompt_with_arguments", "A prompt with two arguments.", input, graph)
}

fn embedded_resource_prompt() -> Agent {
    let graph = StateGraph::new()
        .add_step("render", |state, _| async move {
            let uri = state["resourceUri"].as_str().unwrap_or("test://example-resource").to_owned();
            Ok(json!({"messages": [
                {"role": "user", "content": {"type": "resource", "resource": {"uri": uri, "mimeType": "text/plain", "text": "Embedded resource content for testing."}}},
                {"role": "user", "content": {"type": "text", "text": "Please process the embedded resource above."}}
            ]}))
        })
        .add_edge(START, "render")
        .add_edge("render", END)
        .output_keys(["messages"]);
    let input = json!({"type": "object", "properties": {"resourceUri": {"type": "string", "description": "URI of the resource to embed"}}, "required": ["resourceUri"]});
    agent("test_prompt_with_embedded_resource", "A prompt that embeds a resource.", input, graph)
}

/// A 1x1 red PNG.
const RED_PIXEL: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

fn image_prompt() -> Agent {
    let graph = StateGraph::new()
        .add_step("render", |_, _| async move {
            Ok(json!({"messages": [
                {"role": "user", "content": {"type": "image", "data": RED_PIXEL, "mimeType": "image/png"}},
                {"role": "user", "content": {"type": "text", "text": "Please analyze the image above."}}
            ]}))
        })
        .add_edge(START, "render")
        .add_edge("render", END);
    agent("test_prompt_with_image", "A prompt with an image.", no_arguments(), graph)
}

fn input_prompt() -> Agent {
    let graph = StateGraph::new()
        .add_step("ask", |_, ctx| async move {
            let request = json!({"message": "What context should the prompt use?", "requestedSchema": form("context", "string")});
            let reply = ctx.interrupt(json!({"type": "mcp_elicitation", "requests": {"user_context": request}}))?;
            let context = reply["responses"]["user_context"]["content"]["context"].as_str().unwrap_or_default().to_owned();
            Ok(json!({"messages": [{"role": "user", "content": {"type": "text", "text": format!("Context: {context}")}}]}))
        })
        .add_edge(START, "ask")
        .add_edge("ask", END);
    agent("test_input_required_result_prompt", "A prompt that asks for input first.", no_arguments(), graph)
}
