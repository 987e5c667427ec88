//! `kind = "tool_calling"`: `hitl-toolcall`'s tool-calling runtime on a model API, over
//! the gateway's tools that `tools` names, each reviewed, run or denied as its policy
//! says.

use std::sync::Arc;

use hitl_gateway::{Admitted, Approved, Catalog, Listed, result_text};
use hitl_graph::payload::ToolResult;
use hitl_graph::{Agent, StepError};
use hitl_model::ModelClient;
use hitl_schema::DecisionKind;
use hitl_toolcall::ChatModel;
use hitl_toolcall::tool_agent::{self, Answer, CallGate, InterruptMode, Model, Pending, Tool, ToolReview, Toolbox};
use serde_json::{Value, json};

use crate::{AgentSpec, At, Problem, ReviewMode, foreign_keys, listable, unlisted};

/// Model turns of one call when `max_steps` is not given.
const MAX_STEPS: u32 = 10;

pub(crate) fn check(spec: &AgentSpec, at: &At, prefixes: &[String], problems: &mut Vec<Problem>) {
    foreign_keys(spec, at, problems);
    if spec.model.is_none() {
        problems.push(at.key("kind").problem("a tool_calling agent needs a model = { provider, model, … }"));
    }
    if spec.max_steps == Some(0) {
        problems.push(at.key("max_steps").problem("give at least 1"));
    }
    for (i, glob) in spec.tools.iter().flatten().enumerate() {
        if glob.is_empty() || !listable(glob, prefixes) {
            problems.push(at.key("tools").index(i).problem(unlisted(glob, prefixes)));
        }
    }
}

pub(crate) fn build(
    spec: &AgentSpec,
    at: &At,
    catalog: &Catalog,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Agent, Problem> {
    let model_spec = spec.model.as_ref().ok_or_else(|| at.key("kind").problem("a tool_calling agent needs a model"))?;
    let client = ModelClient::new(model_spec, env).map_err(|e| at.key("model").key("api_key_env").problem(e))?;
    let toolbox: Arc<dyn Toolbox> =
        Arc::new(Gatewayed { catalog: catalog.clone(), globs: spec.tools.clone().unwrap_or_default() });
    let model = Limited {
        inner: ChatModel::new(client, spec.system_prompt.clone(), toolbox.clone()),
        max_steps: spec.max_steps.unwrap_or(MAX_STEPS),
    };
    let mode = match spec.review_mode.unwrap_or(ReviewMode::Batched) {
        ReviewMode::Batched => InterruptMode::Batched,
        ReviewMode::PerCall => InterruptMode::PerCall,
    };
    let input = spec.input_schema.clone().unwrap_or_else(|| {
        json!({"type": "object", "properties": {"request": {"type": "string", "description": "What to do"}},
               "required": ["request"], "additionalProperties": false})
    });
    Ok(tool_agent::tool_agent(&spec.name, &spec.description, input, Arc::new(model), toolbox, mode, output))
}

/// The gateway's tools whose names match `globs`, as listed at each turn. A tool whose
/// policy names its callers is left out: the agent calls for whoever calls it.
struct Gatewayed {
    catalog: Catalog,
    globs: Vec<String>,
}

impl Toolbox for Gatewayed {
    fn tools(&self) -> Vec<Tool> {
        self.catalog.matching(&self.globs).into_iter().filter(|t| !t.limits_callers()).map(tool).collect()
    }
}

/// A listed tool as the runtime's: each call the model proposes is decided by the
/// policy that decides it (its `when` over the arguments and the caller, its rate
/// limit), as a client's call would be: run, reviewed as that policy says, or answered
/// with its error. An approval here covers no later call.
fn tool(listed: Arc<Listed>) -> Tool {
    let (name, description, schema) =
        (listed.name().to_owned(), listed.description().to_owned(), listed.input_schema());
    let judged = listed.clone();
    let gate: tool_agent::GateFn = Arc::new(move |call, ctx| {
        let (listed, args, ctx) = (judged.clone(), call.args.clone(), ctx.clone());
        Box::pin(async move {
            match listed.admit(&args, &ctx).await {
                Admitted::Run => CallGate::Run,
                Admitted::Answer(result) => CallGate::Answer(result_text(&result).err().unwrap_or_default()),
                Admitted::Review { decisions, description, approval } => {
                    let decisions =
                        DecisionKind::ALL.iter().copied().filter(|d| decisions.contains(&d.as_str())).collect();
                    let describe = description
                        .map(|text| Arc::new(move |_: &tool_agent::ToolCall| text.clone()) as tool_agent::Describe);
                    CallGate::Review(Box::new(ToolReview { decisions, describe, approval }))
                }
            }
        })
    });
    // In the caller's own upstream session, with the receipt of a person's approval.
    // Judged again as it runs: an edit into arguments a policy denies, or rules reloaded
    // to deny, is not run.
    let run: tool_agent::ToolFn = Arc::new(move |args, ran| {
        let listed = listed.clone();
        if let Some(denied) = listed.denied_now(&args, ran.ctx) {
            return Box::pin(async move { result_text(&denied) });
        }
        let approved = match ran.edited {
            Some(edited) => listed.approved(ran.proposed, edited),
            None => Approved::default(),
        };
        let ctx = ran.ctx.clone();
        Box::pin(async move { result_text(&listed.call_for(args, &approved, &ctx).await) })
    });
    Tool { name, description, args_schema: Some(schema), review: None, gate: Some(gate), run }
}

/// The model, stopped after `max_steps` turns of one call.
struct Limited {
    inner: ChatModel,
    max_steps: u32,
}

impl Model for Limited {
    fn next<'a>(&'a self, state: &'a Value) -> Pending<'a, Result<Answer, StepError>> {
        let turns = state["messages"].as_array().map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
        if turns >= self.max_steps as usize {
            let stopped =
                format!("the model made {turns} turns without a final answer (max_steps = {})", self.max_steps);
            return Box::pin(async move { Err(StepError::msg(stopped)) });
        }
        self.inner.next(state)
    }
}

/// The call's result: the model's final message, with the calls that ran and the tokens
/// used as structured content.
fn output(state: &Value) -> Value {
    let answer = state["messages"].as_array().and_then(|m| m.last()).map_or(Value::Null, |m| m["content"].clone());
    let sum = |field: &str| -> u64 {
        state["usage"].as_array().into_iter().flatten().filter_map(|u| u[field].as_u64()).sum()
    };
    let mut result = ToolResult::text(answer.as_str().unwrap_or_default(), false);
    result.0.insert(
        "structuredContent".into(),
        json!({
            "answer": answer,
            "tool_calls": state["ran"].as_array().cloned().unwrap_or_default(),
            "usage": {"input_tokens": sum("input_tokens"), "output_tokens": sum("output_tokens"),
                      "model_turns": state["usage"].as_array().map_or(0, Vec::len)},
        }),
    );
    result.to_value()
}
