//! The gated tools as listed now, for agents that call them (`[[agent]]`s declared in
//! the configuration): each tool with its upstream and what the policies decided, so
//! an agent's call is allowed, reviewed or denied exactly as a client's would be.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use hitl_graph::payload::{ApprovalBy, ToolResult};
use hitl_graph::{StepContext, StepError};
use hitl_upstream::Upstream;
use serde_json::{Map, Value, json};

use crate::policy::{Action, glob_match};
use crate::tools::{Carried, Gated, fill_shown};

/// Every upstream's listed tools, swapped whole per upstream at each listing. Cheap to
/// clone; every clone sees the same listing.
#[derive(Clone, Default)]
pub struct Catalog(Arc<RwLock<BTreeMap<String, Vec<Arc<Listed>>>>>);

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog").field("tools", &self.matching(&["*".to_owned()]).len()).finish()
    }
}

impl Catalog {
    /// The listed tools whose names match any of `globs`, by name.
    pub fn matching(&self, globs: &[String]) -> Vec<Arc<Listed>> {
        let listing = self.0.read().unwrap_or_else(|p| p.into_inner());
        let mut found: Vec<Arc<Listed>> = listing
            .values()
            .flatten()
            .filter(|tool| globs.iter().any(|glob| glob_match(glob, &tool.gated.listed)))
            .cloned()
            .collect();
        found.sort_by(|a, b| a.gated.listed.cmp(&b.gated.listed));
        found
    }

    /// The listed tool named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Listed>> {
        let listing = self.0.read().unwrap_or_else(|p| p.into_inner());
        listing.values().flatten().find(|tool| tool.gated.listed == name).cloned()
    }

    /// Puts `tools` in place of what upstream `upstream` listed before.
    pub(crate) fn replace(&self, upstream: &str, tools: Vec<Arc<Listed>>) {
        self.0.write().unwrap_or_else(|p| p.into_inner()).insert(upstream.to_owned(), tools);
    }
}

/// One listed tool: what it is, what the policies say, and the upstream serving it.
pub struct Listed {
    pub(crate) gated: Gated,
    pub(crate) upstream: Arc<Upstream>,
}

/// What the policies let an agent do with one call.
#[derive(Debug)]
pub enum Gate {
    /// Run it with these arguments (the call's, or a reviewer's edit), and what let it
    /// through ([`Listed::call_for`] sends the receipt of a person's approval with it).
    Run(Map<String, Value>, Approved),
    /// Do not run it: this is its result (denied, rejected, answered by the reviewer).
    Answer(ToolResult),
}

/// What let a call through, for the receipt its upstream gets (`[receipts]`): a
/// person's approval or edit, an earlier approval that covers it, or nothing (allowed).
#[derive(Debug, Clone, Default)]
pub struct Approved(Option<Value>);

/// What the policies say of a call a model proposes ([`Listed::admit`]).
#[derive(Debug)]
pub enum Admitted {
    /// Run it as proposed.
    Run,
    /// Ask for a review first, with these decisions, this review text (none: the
    /// seed's) and, when others decide, its approval page.
    Review {
        /// The decisions the review offers.
        decisions: Vec<&'static str>,
        /// The policy's review text, filled in with the call's arguments.
        description: Option<String>,
        /// Who decides on hitl's approval page, when not the client's user.
        approval: Option<ApprovalBy>,
    },
    /// Do not run it: this is its result (denied, or over its rate limit).
    Answer(ToolResult),
}

impl Listed {
    /// Its listed name.
    pub fn name(&self) -> &str {
        &self.gated.listed
    }

    /// Its description, as the upstream gives it.
    pub fn description(&self) -> &str {
        self.gated.spec.get("description").and_then(Value::as_str).unwrap_or_default()
    }

    /// Its input schema, as the upstream gives it.
    pub fn input_schema(&self) -> Value {
        self.gated.spec.get("inputSchema").cloned().unwrap_or_else(|| json!({"type": "object"}))
    }

    /// Whether its policy names who may call it (then an agent may not call it for
    /// every one of its own callers).
    pub fn limits_callers(&self) -> bool {
        self.gated.limits_callers
    }

    /// What the policies let a step do with a call with `args`, exactly as for a
    /// client's call of the tool: the policy that decides this call (its `when` over
    /// the arguments and the caller of `ctx`) denies it, counts it against its
    /// `rate_limit`, lets an earlier approval that covers it through, or asks the
    /// gateway's review question (the step is interrupted) and carries out the
    /// decision (an edit to arguments it denies is not run; an approval may cover
    /// later calls), or lets it run.
    pub async fn gate(&self, args: Map<String, Value>, ctx: &StepContext) -> Result<Gate, StepError> {
        let state = Value::Object(args);
        let args = || state.as_object().cloned().unwrap_or_default();
        let gated = self.gated.for_call(&state, ctx);
        if let Some(refused) = gated.over_limit(ctx).await {
            return Ok(Gate::Answer(refused));
        }
        if let Some(approval) = gated.covered(&state, ctx).await {
            return Ok(Gate::Run(args(), Approved(Some(gated.covered_state(&state, &approval)))));
        }
        gated.record_decision(ctx);
        let decision = match gated.action {
            Action::Review => gated.review(&state, ctx)?,
            // Asked under earlier rules, the call is carried out as its answer says (a
            // rejection or a response stays one), as the gateway does. Only a review's
            // decision: the step's next answer may be one of its secrets.
            Action::Allow => match ctx.answered_if(is_decision) {
                Some(decision) => decision,
                None => return Ok(Gate::Run(args(), Approved(None))),
            },
            Action::Deny => return Ok(Gate::Answer(gated.denied())),
        };
        if let Some(denied) = gated.edit_denied(&decision, ctx)? {
            return Ok(Gate::Answer(denied));
        }
        gated.grant(&decision, &state, ctx).await;
        let approved = Approved(Some(gated.decided_state(&state, &decision)));
        Ok(match gated.carry_out(Some(&decision))? {
            Carried::Run(edited) => Gate::Run(edited.unwrap_or_else(args), approved),
            Carried::Answer(result) => Gate::Answer(result),
        })
    }

    /// What the policies say of a call with `args` that a model proposes, by the
    /// caller of `ctx`, before anyone reviews it: the policy that decides this call
    /// (its `when`) denies it, counts it against its `rate_limit` (over it: the error
    /// result), or lets it run, or it needs that policy's review.
    pub async fn admit(&self, args: &Map<String, Value>, ctx: &StepContext) -> Admitted {
        let state = Value::Object(args.clone());
        let gated = self.gated.for_call(&state, ctx);
        if let Some(refused) = gated.over_limit(ctx).await {
            return Admitted::Answer(refused);
        }
        gated.record_decision(ctx);
        match gated.action {
            Action::Allow => Admitted::Run,
            Action::Deny => Admitted::Answer(gated.denied()),
            Action::Review => Admitted::Review {
                decisions: gated.decisions.clone(),
                description: gated.description.as_deref().map(|template| fill_shown(template, args)),
                approval: gated.approval(),
            },
        }
    }

    /// The error a call with `args` meets when the policy that decides it now denies it
    /// (a reviewer's edit into arguments a policy denies, or rules reloaded to deny),
    /// judged without counting it against a rate limit: for a call about to run that
    /// was admitted earlier ([`Listed::admit`]).
    pub fn denied_now(&self, args: &Map<String, Value>, ctx: &StepContext) -> Option<ToolResult> {
        let gated = self.gated.for_call(&Value::Object(args.clone()), ctx);
        (gated.action == Action::Deny).then(|| gated.denied())
    }

    /// What let a call of `proposed` through when a person approved it (`edited`: with
    /// their edit) outside [`Listed::gate`]: a tool-calling agent's own review. Only for
    /// a call a person did approve: the receipt made of it says so upstream.
    pub fn approved(&self, proposed: &Map<String, Value>, edited: bool) -> Approved {
        let decision = json!({ "type": if edited { "edit" } else { "approve" } });
        Approved(Some(self.gated.decided_state(&Value::Object(proposed.clone()), &decision)))
    }

    /// Calls the tool upstream for the caller of `ctx`, in its own upstream session (a
    /// 2025-era upstream's state of one caller is never another's), with the receipt of
    /// what let it through ([`Gate::Run`]) when a person approved it and `[receipts]` is
    /// set, and returns its result as it is. The caller marks the effect first
    /// (`StepContext::begin_effect`). An upstream that asks for input mid-call is
    /// answered that no one can (this call is an agent's, with no client to relay to),
    /// and one that answers `input_required` ends the call with an error result that
    /// says so.
    pub async fn call_for(&self, args: Map<String, Value>, approved: &Approved, ctx: &StepContext) -> ToolResult {
        let mut extra = Map::new();
        if let Some(receipt) = approved.0.as_ref().and_then(|state| self.gated.receipt(state, &args, ctx)) {
            extra.insert("_meta".into(), json!({ crate::receipts::META_KEY: receipt }));
        }
        match self.upstream.call_tool_for(crate::tools::caller(ctx), &self.gated.tool, args, extra).await {
            Ok(Value::Object(result)) if result.get("resultType").and_then(Value::as_str) == Some("input_required") => {
                ToolResult::error(format!(
                    "{} asked for input, which an agent's call to it cannot relay",
                    self.gated.listed
                ))
            }
            Ok(Value::Object(mut result)) => {
                if let Some(Value::Object(meta)) = result.get_mut("_meta") {
                    meta.remove(hitl_protocol::meta_keys::SERVER_INFO);
                }
                ToolResult(result)
            }
            Ok(other) => ToolResult::error(format!("upstream {} answered with {other}", self.upstream.name())),
            Err(error) => ToolResult::error(error.to_string()),
        }
    }
}

/// Is `answer` a review's decision (`{"type": "approve" | "edit" | "reject" | "respond"}`)?
fn is_decision(answer: &Value) -> bool {
    matches!(answer.get("type").and_then(Value::as_str), Some("approve" | "edit" | "reject" | "respond"))
}

/// A tool result as text for a model: its text blocks joined, else its structured
/// content as JSON, else its content blocks as JSON; `Err` when it is an error result.
pub fn result_text(result: &ToolResult) -> Result<String, String> {
    let blocks = result.0.get("content").and_then(Value::as_array).cloned().unwrap_or_default();
    let texts: Vec<&str> = blocks.iter().filter(|b| b["type"] == "text").filter_map(|b| b["text"].as_str()).collect();
    let text = if !texts.is_empty() {
        texts.join("\n")
    } else if let Some(structured) = result.0.get("structuredContent") {
        structured.to_string()
    } else {
        Value::Array(blocks).to_string()
    };
    if result.0.get("isError") == Some(&Value::Bool(true)) { Err(text) } else { Ok(text) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_read_as_text_for_a_model() {
        let text = ToolResult(
            serde_json::from_value(json!({"content": [
            {"type": "text", "text": "one"}, {"type": "image", "data": "", "mimeType": "image/png"},
            {"type": "text", "text": "two"}]}))
            .unwrap(),
        );
        assert_eq!(result_text(&text), Ok("one\ntwo".to_owned()));
        let structured =
            ToolResult(serde_json::from_value(json!({"content": [], "structuredContent": {"rows": 3}})).unwrap());
        assert_eq!(result_text(&structured), Ok("{\"rows\":3}".to_owned()));
        assert_eq!(result_text(&ToolResult::error("no such table")), Err("no such table".to_owned()));
    }
}
