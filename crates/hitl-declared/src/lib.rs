//! Agents declared in `hitl.toml`, without Rust: `[[agent]]` tables of two kinds.
//!
//! - `kind = "tool_calling"`: a model (`hitl-model`: an OpenAI-compatible Chat
//!   Completions API or the Anthropic Messages API) calls the gateway's tools that
//!   `tools` names, under the same policies as a client's calls: an allowed tool runs,
//!   a reviewed one pauses the agent with the seed's review question (`review_mode`
//!   batched or per call), a denied one is reported to the model as an error.
//! - `kind = "workflow"`: `steps` in order: `ask` (a text question, a typed form, a URL,
//!   a secret typed on hitl's page), `stop_unless` (end with `result` unless an answer
//!   is true), `call` (an upstream tool with templated `args`, under its policy), and
//!   `result` (the call's result, templated). `{name}` in a template is an argument of
//!   the call or a field an earlier `ask` gave.
//!
//! [`check`] finds every problem of a list of specs without connecting anywhere, each
//! with the keys that lead to it (the server turns them into `file:line:column`);
//! [`build`] makes the agents over the gateway's live [`Catalog`].
//!
//! ```
//! let specs: Vec<hitl_declared::AgentSpec> = serde_json::from_value(serde_json::json!([{
//!     "name": "release",
//!     "kind": "workflow",
//!     "input_schema": {"type": "object", "properties": {"service": {"type": "string"}}},
//!     "steps": [
//!         {"ask": {"message": "Release {service}?", "schema": {"type": "object",
//!             "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}}},
//!         {"stop_unless": "confirm", "result": "Deployment aborted by user."},
//!         {"call": "deploy.release", "args": {"service": "{service}"}}
//!     ]
//! }])).unwrap();
//! assert!(hitl_declared::check(&specs, &["deploy.".to_owned()]).is_empty());
//! let problems = hitl_declared::check(&specs, &["db.".to_owned()]);
//! assert_eq!(problems[0].to_string(), "agent[0].steps[2].call: no [[upstream]] lists \"deploy.release\" (tool names start with \"db.\")");
//! ```

mod template;
mod tool_calling;
mod workflow;

use std::fmt;

use hitl_gateway::Catalog;
use hitl_graph::Agent;
use hitl_model::ModelSpec;
use serde::Deserialize;
use serde_json::{Map, Value};

/// One `[[agent]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSpec {
    /// The tool's name.
    pub name: String,
    /// The tool's description.
    #[serde(default)]
    pub description: String,
    /// `tool_calling` or `workflow`.
    pub kind: Kind,
    /// The tool's input schema (default: a tool-calling agent takes one `request`
    /// string; a workflow takes no arguments).
    #[serde(default)]
    pub input_schema: Option<Value>,
    /// The model of a tool-calling agent.
    #[serde(default)]
    pub model: Option<ModelSpec>,
    /// What a tool-calling agent's model is told first.
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// Globs over the gateway's listed tool names a tool-calling agent may call.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// How a tool-calling agent's reviewed calls are asked (default `batched`).
    #[serde(default)]
    pub review_mode: Option<ReviewMode>,
    /// The most model turns of one call of a tool-calling agent (default 10).
    #[serde(default)]
    pub max_steps: Option<u32>,
    /// A workflow's steps, in order.
    #[serde(default)]
    pub steps: Option<Vec<StepSpec>>,
}

/// The two kinds of declared agents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A model that calls tools.
    ToolCalling,
    /// A fixed sequence of questions, conditions and calls.
    Workflow,
}

/// The seed's two interrupt modes of a tool call review.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReviewMode {
    /// One question per reviewed call, all of a turn's in one round.
    Batched,
    /// One round per reviewed call.
    PerCall,
}

/// One workflow step: exactly one of `ask`, `stop_unless` (with `result`), `call`
/// (with `args`) or `result`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepSpec {
    /// A question.
    #[serde(default)]
    pub ask: Option<AskSpec>,
    /// End the workflow with `result` unless this answer or argument is true.
    #[serde(default)]
    pub stop_unless: Option<String>,
    /// The workflow's result text (templated): after `stop_unless`, when it stops;
    /// alone, the result of the workflow.
    #[serde(default)]
    pub result: Option<String>,
    /// The listed name of an upstream tool to call.
    #[serde(default)]
    pub call: Option<String>,
    /// The call's arguments; strings are templates (`"{name}"` alone keeps the value's
    /// type).
    #[serde(default)]
    pub args: Option<Map<String, Value>>,
}

/// A workflow's question: a text question (no `schema`, `url` or `secret`), a typed
/// form (`schema`), a URL to visit (`url`), or a secret typed on hitl's page
/// (`secret`, its label).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AskSpec {
    /// What the person is asked (templated).
    pub message: String,
    /// A form's JSON Schema; its fields become answers.
    #[serde(default)]
    pub schema: Option<Value>,
    /// A page to visit (https, or http on localhost).
    #[serde(default)]
    pub url: Option<String>,
    /// A secret's label; the secret goes only to the next `call`'s arguments.
    #[serde(default)]
    pub secret: Option<String>,
    /// The question's key (default: derived from the question) and the answer's name
    /// for a text question (default `response`), a URL (true once accepted) or a
    /// secret (default `secret`).
    #[serde(default)]
    pub key: Option<String>,
}

/// A problem of the configuration: the keys that lead to it from the `[[agent]]` list,
/// and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// `agent`, its index, then keys and indexes down to the offending value.
    pub at: Vec<Segment>,
    /// What is wrong.
    pub message: String,
}

/// One step of a [`Problem`]'s path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// A table key.
    Key(String),
    /// An array index.
    Index(usize),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.at.iter().enumerate() {
            match segment {
                Segment::Index(n) => write!(f, "[{n}]")?,
                Segment::Key(key) if i == 0 => write!(f, "{key}")?,
                Segment::Key(key) => write!(f, ".{key}")?,
            }
        }
        write!(f, ": {}", self.message)
    }
}

/// Where a problem is, as it is being found.
#[derive(Clone)]
struct At(Vec<Segment>);

impl At {
    fn agent(index: usize) -> Self {
        Self(vec![Segment::Key("agent".into()), Segment::Index(index)])
    }

    fn key(&self, key: &str) -> Self {
        let mut at = self.0.clone();
        at.push(Segment::Key(key.to_owned()));
        Self(at)
    }

    fn index(&self, index: usize) -> Self {
        let mut at = self.0.clone();
        at.push(Segment::Index(index));
        Self(at)
    }

    /// Down a JSON Pointer (`/properties/confirm/type`) into a value given in the file.
    fn pointer(&self, pointer: &str) -> Self {
        let mut at = self.clone();
        for token in pointer.split('/').skip(1).filter(|t| !t.is_empty()) {
            let token = token.replace("~1", "/").replace("~0", "~");
            at = match token.parse::<usize>() {
                Ok(n) => at.index(n),
                Err(_) => at.key(&token),
            };
        }
        at
    }

    fn problem(&self, message: impl Into<String>) -> Problem {
        Problem { at: self.0.clone(), message: message.into() }
    }
}

/// Every problem of `specs`, given the prefixes of the gateway's listed tool names (one
/// per `[[upstream]]`): names, keys that belong to the other kind, tools no upstream
/// can list, schemas that cannot become forms, templates naming fields no step gives.
/// Nothing is connected to.
pub fn check(specs: &[AgentSpec], prefixes: &[String]) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let at = At::agent(i);
        let valid = |c: char| c.is_ascii_alphanumeric() || "_-.".contains(c);
        if spec.name.is_empty() || !spec.name.chars().all(valid) {
            problems.push(at.key("name").problem("use letters, digits, '_', '-' and '.'"));
        }
        if specs[..i].iter().any(|s| s.name == spec.name) {
            problems.push(at.key("name").problem(format!("another [[agent]] is named {:?}", spec.name)));
        }
        if let Some(schema) = &spec.input_schema
            && schema.get("type").and_then(Value::as_str) != Some("object")
        {
            problems
                .push(at.key("input_schema").problem("a tool's input schema is an object schema (type = \"object\")"));
        }
        match spec.kind {
            Kind::ToolCalling => tool_calling::check(spec, &at, prefixes, &mut problems),
            Kind::Workflow => workflow::check(spec, &at, prefixes, &mut problems),
        }
    }
    problems
}

/// The agents of `specs` (checked by [`check`] first), calling the tools of `catalog`;
/// `env` gives the models' API keys. A missing key is a problem at its `api_key_env`.
pub fn build(
    specs: &[AgentSpec],
    catalog: &Catalog,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Vec<Agent>, Problem> {
    specs
        .iter()
        .enumerate()
        .map(|(i, spec)| match spec.kind {
            Kind::ToolCalling => tool_calling::build(spec, &At::agent(i), catalog, &env),
            Kind::Workflow => Ok(workflow::build(spec, catalog)),
        })
        .collect()
}

/// What the gateway's listing leaves unmet now: a tool-calling agent's glob that
/// matches no listed tool, a workflow's call of a tool that is not listed. For the log
/// at start: an upstream may be down, or list the tool later.
pub fn unmet(specs: &[AgentSpec], catalog: &Catalog) -> Vec<String> {
    let mut unmet = Vec::new();
    for spec in specs {
        for glob in spec.tools.iter().flatten() {
            if catalog.matching(std::slice::from_ref(glob)).is_empty() {
                unmet.push(format!("agent {:?}: no listed tool matches {glob:?}", spec.name));
            }
        }
        for tool in spec.steps.iter().flatten().filter_map(|step| step.call.as_ref()) {
            if catalog.get(tool).is_none() {
                unmet.push(format!("agent {:?}: {tool:?} is not listed", spec.name));
            }
        }
    }
    unmet
}

/// Keys given to an agent of the other kind.
fn foreign_keys(spec: &AgentSpec, at: &At, problems: &mut Vec<Problem>) {
    let tool_calling = [
        ("model", spec.model.is_some()),
        ("system_prompt", spec.system_prompt.is_some()),
        ("tools", spec.tools.is_some()),
        ("review_mode", spec.review_mode.is_some()),
        ("max_steps", spec.max_steps.is_some()),
    ];
    let (foreign, kind): (Vec<(&str, bool)>, &str) = match spec.kind {
        Kind::ToolCalling => (vec![("steps", spec.steps.is_some())], "workflow"),
        Kind::Workflow => (tool_calling.to_vec(), "tool_calling"),
    };
    for (key, given) in foreign {
        if given {
            problems.push(at.key(key).problem(format!("{key} is a key of kind = \"{kind}\" agents")));
        }
    }
}

/// Can a tool named `name` (or matching glob `name`) be listed by an upstream whose
/// names start with one of `prefixes`?
fn listable(name: &str, prefixes: &[String]) -> bool {
    let head = &name[..name.find(['*', '?']).unwrap_or(name.len())];
    let exact = head.len() == name.len();
    prefixes.iter().any(|prefix| head.starts_with(prefix.as_str()) || (!exact && prefix.starts_with(head)))
}

/// "no [[upstream]] lists …" with the prefixes there are.
fn unlisted(what: &str, prefixes: &[String]) -> String {
    if prefixes.is_empty() {
        return format!("no [[upstream]] is configured, so no tool {what:?} is listed");
    }
    let known: Vec<String> = prefixes.iter().map(|p| format!("{p:?}")).collect();
    format!("no [[upstream]] lists {what:?} (tool names start with {})", known.join(" or "))
}

#[cfg(test)]
mod tests;
