//! Model clients for hitl's declared agents: one conversation shape ([`ChatRequest`],
//! [`Message`], [`ToolSpec`]) spoken to the OpenAI-compatible Chat Completions API
//! (`provider = "openai"`: OpenAI, vLLM, Ollama, llama.cpp's server, LiteLLM) or the
//! Anthropic Messages API (`provider = "anthropic"`), with tool calling.
//!
//! Each request has a timeout; a `429`, a `5xx` or a connection that fails is tried
//! again after a growing pause (or the server's `Retry-After`), a few times. The API key
//! comes from the environment only (`api_key_env`), never from a file, and never appears
//! in an error. Token usage comes back with each answer.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use hitl_model::{ChatRequest, Message, ModelClient, ModelSpec};
//!
//! let spec: ModelSpec = serde_json::from_value(serde_json::json!({
//!     "provider": "openai", "base_url": "http://127.0.0.1:11434/v1", "model": "llama3.1",
//! }))?;
//! let client = ModelClient::new(&spec, |name| std::env::var(name).ok())?;
//! let request = ChatRequest { system: Some("Be brief.".into()), messages: vec![Message::user("Hi")], tools: vec![] };
//! let answer = client.chat(&request).await?;
//! println!("{:?} ({} tokens in)", answer.text, answer.usage.input_tokens);
//! # Ok(()) }
//! ```

mod anthropic;
mod http;
mod openai;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};

/// Which API a model speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// Chat Completions (`POST <base_url>/chat/completions`).
    #[serde(rename = "openai")]
    OpenAi,
    /// Messages (`POST <base_url>/v1/messages`).
    Anthropic,
}

/// A model, as `[[agent]] model = { … }` gives it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// The API.
    pub provider: Provider,
    /// Where it is served (default: the provider's public API).
    #[serde(default)]
    pub base_url: Option<String>,
    /// The model's name.
    pub model: String,
    /// The environment variable holding the API key (none: no key is sent).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Seconds one request may take (default 60).
    #[serde(default)]
    pub timeout: Option<u64>,
    /// Retries after a `429`, a `5xx` or a failed connection (default 2).
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// The most tokens of one answer (Anthropic requires it; default 1024).
    #[serde(default)]
    pub max_tokens: Option<u32>,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// The user's words.
    User(String),
    /// The model's turn: text, tool calls, or both.
    Assistant {
        /// What it said.
        text: Option<String>,
        /// The calls it asked for.
        tool_calls: Vec<ToolCall>,
    },
    /// A tool's answer to call `call_id`.
    Tool {
        /// The call answered.
        call_id: String,
        /// The result, as text.
        content: String,
        /// Whether the call failed (refused by a policy, rejected by a reviewer).
        is_error: bool,
    },
}

impl Message {
    /// A user message.
    pub fn user(text: impl Into<String>) -> Self {
        Self::User(text.into())
    }
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of its arguments (an object).
    pub input_schema: Value,
}

/// A call the model asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// Its id, which the tool's answer names.
    pub id: String,
    /// The tool.
    pub name: String,
    /// The arguments.
    pub arguments: Map<String, Value>,
}

/// A conversation to continue.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatRequest {
    /// The system prompt.
    pub system: Option<String>,
    /// The messages so far.
    pub messages: Vec<Message>,
    /// The tools it may call.
    pub tools: Vec<ToolSpec>,
}

/// Tokens one request used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Tokens read.
    pub input_tokens: u64,
    /// Tokens written.
    pub output_tokens: u64,
}

/// The model's turn.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatResponse {
    /// What it said.
    pub text: Option<String>,
    /// The calls it asks for (none: its answer is final).
    pub tool_calls: Vec<ToolCall>,
    /// What it cost.
    pub usage: Usage,
}

/// Why a model gave no answer. Never holds the API key.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// No answer in time (after the retries).
    #[error("the model at {url} did not answer within {seconds} s")]
    Timeout {
        /// The endpoint.
        url: String,
        /// The timeout of one request.
        seconds: u64,
    },
    /// The server answered with an error status (after the retries, when it was one to
    /// retry).
    #[error("the model at {url} answered HTTP {status}: {body}")]
    Status {
        /// The endpoint.
        url: String,
        /// The status.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// The server could not be reached.
    #[error("the model at {url} is unreachable: {reason}")]
    Unreachable {
        /// The endpoint.
        url: String,
        /// Why.
        reason: String,
    },
    /// The answer is not what the API returns.
    #[error("the model at {url} answered something that is not a {api} response: {reason}")]
    Protocol {
        /// The endpoint.
        url: String,
        /// The API.
        api: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// A model to talk to.
#[derive(Clone)]
pub struct ModelClient {
    provider: Provider,
    url: String,
    model: String,
    key: Option<String>,
    timeout: Duration,
    max_retries: u32,
    max_tokens: u32,
    http: http::Http,
}

impl std::fmt::Debug for ModelClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelClient")
            .field("provider", &self.provider)
            .field("url", &self.url)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl ModelClient {
    /// A client for `spec`, reading its key with `env` now: a named variable that is
    /// not set is an error, so a missing key is found at start, not at the first call.
    pub fn new(spec: &ModelSpec, env: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let key = match &spec.api_key_env {
            None => None,
            Some(name) => match env(name) {
                Some(key) if !key.is_empty() => Some(key),
                _ => return Err(format!("api_key_env: the environment variable {name} is not set")),
            },
        };
        let base = match (&spec.base_url, spec.provider) {
            (Some(base), _) => base.trim_end_matches('/').to_owned(),
            (None, Provider::OpenAi) => "https://api.openai.com/v1".to_owned(),
            (None, Provider::Anthropic) => "https://api.anthropic.com".to_owned(),
        };
        let url = match spec.provider {
            Provider::OpenAi => format!("{base}/chat/completions"),
            Provider::Anthropic => format!("{base}/v1/messages"),
        };
        let parsed: ::http::Uri = url.parse().map_err(|e| format!("base_url {base:?}: {e}"))?;
        if !matches!(parsed.scheme_str(), Some("http" | "https")) || parsed.host().is_none() {
            return Err(format!("base_url {base:?}: give an http:// or https:// URL"));
        }
        if spec.model.is_empty() {
            return Err("model: name the model".into());
        }
        Ok(Self {
            provider: spec.provider,
            url,
            model: spec.model.clone(),
            key,
            timeout: Duration::from_secs(spec.timeout.unwrap_or(60).max(1)),
            max_retries: spec.max_retries.unwrap_or(2),
            max_tokens: spec.max_tokens.unwrap_or(1024),
            http: http::Http::new(),
        })
    }

    /// The endpoint requests go to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The model's next turn in `request`'s conversation.
    pub async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ModelError> {
        let (body, headers, api) = match self.provider {
            Provider::OpenAi => {
                let headers = self.key.iter().map(|k| ("authorization", format!("Bearer {k}"))).collect();
                (openai::body(&self.model, request), headers, "Chat Completions")
            }
            Provider::Anthropic => {
                let mut headers = vec![("anthropic-version", anthropic::VERSION.to_owned())];
                headers.extend(self.key.iter().map(|k| ("x-api-key", k.clone())));
                (anthropic::body(&self.model, self.max_tokens, request), headers, "Messages")
            }
        };
        let answer = self.http.post(&self.url, &headers, body.to_string(), self.timeout, self.max_retries).await?;
        let protocol = |reason: String| ModelError::Protocol { url: self.url.clone(), api, reason };
        let value: Value = serde_json::from_slice(&answer).map_err(|e| protocol(format!("not JSON: {e}")))?;
        match self.provider {
            Provider::OpenAi => openai::read(&value),
            Provider::Anthropic => anthropic::read(&value),
        }
        .map_err(protocol)
    }
}

#[cfg(test)]
mod tests;
