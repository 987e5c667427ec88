//! The Messages wire format: content blocks (`text`, `tool_use` with `input`,
//! `tool_result` naming its `tool_use_id`), the tool results of one turn in one user
//! message, `system` apart, `max_tokens` required.

use serde_json::{Value, json};

use crate::{ChatRequest, ChatResponse, Message, ToolCall, Usage};

/// The `anthropic-version` header.
pub(crate) const VERSION: &str = "2023-06-01";

/// The request body.
pub(crate) fn body(model: &str, max_tokens: u32, request: &ChatRequest) -> Value {
    let mut messages: Vec<Value> = Vec::new();
    for message in &request.messages {
        match message {
            Message::User(text) => messages.push(json!({"role": "user", "content": text})),
            Message::Assistant { text, tool_calls } => {
                let mut blocks: Vec<Value> =
                    text.iter().filter(|t| !t.is_empty()).map(|t| json!({"type": "text", "text": t})).collect();
                blocks.extend(
                    tool_calls
                        .iter()
                        .map(|c| json!({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments})),
                );
                messages.push(json!({"role": "assistant", "content": blocks}));
            }
            Message::Tool { call_id, content, is_error } => {
                let result =
                    json!({"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error});
                // The results of one turn go back together, in one user message.
                match messages.last_mut() {
                    Some(last)
                        if last["role"] == "user"
                            && last["content"]
                                .as_array()
                                .is_some_and(|c| c.iter().all(|b| b["type"] == "tool_result")) =>
                    {
                        last["content"].as_array_mut().expect("checked").push(result);
                    }
                    _ => messages.push(json!({"role": "user", "content": [result]})),
                }
            }
        }
    }
    let mut body = json!({"model": model, "max_tokens": max_tokens, "messages": messages});
    if let Some(system) = &request.system {
        body["system"] = Value::String(system.clone());
    }
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
            .collect();
        body["tools"] = Value::Array(tools);
    }
    body
}

/// The model's turn in a response.
pub(crate) fn read(value: &Value) -> Result<ChatResponse, String> {
    let blocks = value.get("content").and_then(Value::as_array).ok_or("no content blocks")?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or_default()),
            Some("tool_use") => {
                let name = block.get("name").and_then(Value::as_str).ok_or(format!("content[{i}] has no name"))?;
                let id = block.get("id").and_then(Value::as_str).ok_or(format!("content[{i}] has no id"))?;
                let arguments = match block.get("input") {
                    Some(Value::Object(input)) => input.clone(),
                    None | Some(Value::Null) => serde_json::Map::new(),
                    Some(_) => return Err(format!("the input of content[{i}] ({name}) is not an object")),
                };
                tool_calls.push(ToolCall { id: id.to_owned(), name: name.to_owned(), arguments });
            }
            // Thinking and other blocks carry nothing the agent acts on.
            _ => {}
        }
    }
    let count = |key: &str| value.pointer(&format!("/usage/{key}")).and_then(Value::as_u64).unwrap_or(0);
    let usage = Usage { input_tokens: count("input_tokens"), output_tokens: count("output_tokens") };
    Ok(ChatResponse { text: (!text.is_empty()).then_some(text), tool_calls, usage })
}
