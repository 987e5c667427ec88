//! The Chat Completions wire format: messages with `tool_calls` (arguments as JSON
//! text) and `tool` messages naming their `tool_call_id`; `tools` as functions.

use serde_json::{Map, Value, json};

use crate::{ChatRequest, ChatResponse, Message, ToolCall, Usage};

/// The request body.
pub(crate) fn body(model: &str, request: &ChatRequest) -> Value {
    let mut messages: Vec<Value> = request.system.iter().map(|s| json!({"role": "system", "content": s})).collect();
    for message in &request.messages {
        messages.push(match message {
            Message::User(text) => json!({"role": "user", "content": text}),
            Message::Assistant { text, tool_calls } => {
                let mut turn = json!({"role": "assistant", "content": text});
                if !tool_calls.is_empty() {
                    let calls: Vec<Value> = tool_calls
                        .iter()
                        .map(|c| {
                            let arguments = Value::Object(c.arguments.clone()).to_string();
                            json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": arguments}})
                        })
                        .collect();
                    turn["tool_calls"] = Value::Array(calls);
                }
                turn
            }
            Message::Tool { call_id, content, .. } => json!({"role": "tool", "tool_call_id": call_id, "content": content}),
        });
    }
    let mut body = json!({"model": model, "messages": messages});
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}})
            })
            .collect();
        body["tools"] = Value::Array(tools);
    }
    body
}

/// The model's turn in a response.
pub(crate) fn read(value: &Value) -> Result<ChatResponse, String> {
    let message = value.pointer("/choices/0/message").ok_or("no choices[0].message")?;
    let text = message.get("content").and_then(Value::as_str).filter(|t| !t.is_empty()).map(str::to_owned);
    let mut tool_calls = Vec::new();
    for (i, call) in message.get("tool_calls").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let name =
            call.pointer("/function/name").and_then(Value::as_str).ok_or(format!("tool_calls[{i}] has no name"))?;
        let arguments = match call.pointer("/function/arguments") {
            Some(Value::String(text)) if text.trim().is_empty() => Map::new(),
            Some(Value::String(text)) => match serde_json::from_str(text) {
                Ok(Value::Object(args)) => args,
                _ => return Err(format!("the arguments of tool_calls[{i}] ({name}) are not a JSON object")),
            },
            Some(Value::Object(args)) => args.clone(),
            None => Map::new(),
            Some(_) => return Err(format!("the arguments of tool_calls[{i}] ({name}) are not a JSON object")),
        };
        let id = call.get("id").and_then(Value::as_str).map_or_else(|| format!("call_{i}"), str::to_owned);
        tool_calls.push(ToolCall { id, name: name.to_owned(), arguments });
    }
    let count = |key: &str| value.pointer(&format!("/usage/{key}")).and_then(Value::as_u64).unwrap_or(0);
    let usage = Usage { input_tokens: count("prompt_tokens"), output_tokens: count("completion_tokens") };
    Ok(ChatResponse { text, tool_calls, usage })
}
