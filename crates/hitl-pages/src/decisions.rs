//! Approving from one's own MCP client (`[approvals] mcp_decisions`): two tools, listed
//! to approvers only, outside every `[[policy]]`. `hitl_pending_approvals` lists the
//! approvals the caller may decide; `hitl_decide_approval` restates the call it decides
//! in a form its caller's client must show and accept (as far as MCP can tell a person
//! from software), then decides under the page's rules: the approvers in force, the
//! two-person rule, the first decision wins.

use std::sync::{Arc, OnceLock};

use hitl_graph::payload::ToolResult;
use hitl_graph::{Agent, Caller, END, START, StateGraph, StepContext, StepError};
use hitl_interrupt::Engine;
use hitl_protocol::display;
use serde_json::{Map, Value, json};

use crate::session::Session;
use crate::{Refusal, Shared};

/// The tool that lists the approvals the caller may decide.
pub const PENDING_TOOL: &str = "hitl_pending_approvals";
/// The tool that decides one, once the caller's person confirms it.
pub const DECIDE_TOOL: &str = "hitl_decide_approval";

/// Where the decision tools find the pages and the engine once the server is built
/// ([`crate::PagesConfig::decision_desk`]): the agents are made before either exists.
#[derive(Clone, Default)]
pub struct DecisionDesk(Arc<OnceLock<(Arc<Shared>, Engine)>>);

impl std::fmt::Debug for DecisionDesk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionDesk").field("open", &self.0.get().is_some()).finish()
    }
}

impl DecisionDesk {
    pub(crate) fn open(&self, shared: Arc<Shared>, engine: Engine) {
        let _ = self.0.set((shared, engine));
    }

    fn get(&self) -> Result<&(Arc<Shared>, Engine), StepError> {
        self.0.get().ok_or_else(|| StepError::msg("approvals are not served here"))
    }

    /// The two tools, to serve beside the agents (never under a policy).
    pub fn agents(&self) -> Vec<Agent> {
        let desk = self.clone();
        let pending = StateGraph::new()
            .add_step("list", move |_, ctx| {
                let desk = desk.clone();
                async move { desk.pending(&ctx).await }
            })
            .add_edge(START, "list")
            .add_edge("list", END)
            .output_key("result")
            .compile()
            .expect("the listing graph compiles");
        let desk = self.clone();
        let decide = StateGraph::new()
            .add_step("decide", move |state, ctx| {
                let desk = desk.clone();
                async move { desk.decide(&state, &ctx).await }
            })
            .add_edge(START, "decide")
            .add_edge("decide", END)
            .output_key("result")
            .compile()
            .expect("the decision graph compiles");
        let decide_input = json!({"type": "object", "properties": {
            "id": {"type": "string", "description": "The approval's id (from hitl_pending_approvals)"},
            "decision": {"type": "string", "enum": ["approve", "edit", "reject", "respond"]},
            "message": {"type": "string", "description": "Why not (reject), or the answer to send instead (respond)"},
            "edited_arguments": {"type": "object", "description": "The arguments to run the call with (edit)"}
        }, "required": ["id", "decision"], "additionalProperties": false});
        vec![
            Agent::new(
                PENDING_TOOL,
                "The approvals waiting for you: each call, who asked, under which policy",
                json!({"type": "object", "properties": {}, "additionalProperties": false}),
                pending,
            ),
            Agent::new(
                DECIDE_TOOL,
                "Decide an approval waiting for you; your client asks you to confirm the call first",
                decide_input,
                decide,
            ),
        ]
    }

    /// The approver the call is made by, as a page session would know them.
    fn approver(ctx: &StepContext) -> Result<Session, Value> {
        let caller = ctx.extension::<Caller>();
        let Some(principal) = caller.and_then(|c| c.principal.clone()) else {
            return Err(error("An approver must be signed in (a bearer token) to decide approvals."));
        };
        let groups = caller.map(|c| c.groups.clone()).unwrap_or_default();
        Ok(Session {
            id: String::new(),
            principal,
            groups,
            expires: u64::MAX,
            scope: None,
            credential: None,
            approver: true,
        })
    }

    async fn pending(&self, ctx: &StepContext) -> Result<Value, StepError> {
        let (shared, engine) = self.get()?;
        let who = match Self::approver(ctx) {
            Ok(who) => who,
            Err(refused) => return Ok(json!({ "result": refused })),
        };
        let listed = shared.approvals(engine).await.map_err(|e| StepError::transient(format!("the store: {e}")))?;
        let mine: Vec<Value> = listed
            .into_iter()
            .filter(|e| crate::ApprovalStatus::of_entry(e).is_some_and(crate::ApprovalStatus::is_pending))
            .filter(|e| crate::api::may_see(&who, e))
            .filter(|e| !shared.config.two_person || e["caller"].as_str() != Some(who.principal.as_str()))
            .map(|e| {
                json!({"id": e["id"], "tool": e["tool"], "arguments": e["arguments"], "caller": e["caller"],
                       "policy": e["policy"], "decisions": e["decisions"], "link": e["link"],
                       "requested_at_ms": e["requested_at_ms"]})
            })
            .collect();
        let text = match mine.len() {
            0 => "No approval is waiting for you.".to_owned(),
            n => format!("{n} approval(s) waiting for you:\n{}", display::json(&Value::Array(mine.clone()))),
        };
        let mut result = ToolResult::text(text, false);
        result.0.insert("structuredContent".into(), json!({ "approvals": mine }));
        Ok(json!({ "result": result.to_value() }))
    }

    async fn decide(&self, state: &Value, ctx: &StepContext) -> Result<Value, StepError> {
        let (shared, engine) = self.get()?;
        let who = match Self::approver(ctx) {
            Ok(who) => who,
            Err(refused) => return Ok(json!({ "result": refused })),
        };
        let id = state["id"].as_str().unwrap_or_default();
        let decision = state["decision"].as_str().unwrap_or_default();
        let view = match engine.pages().get(id).await {
            Ok(Some(view)) => view,
            Ok(None) => return Ok(json!({ "result": error(&format!("No approval is waiting under {id}.")) })),
            Err(e) => return Err(StepError::transient(format!("the store: {e}"))),
        };
        // Refused before the person is asked: not theirs, their own call.
        if let Err(Refusal(_, why)) = shared.may_decide(&view, &who) {
            return Ok(json!({ "result": error(&why) }));
        }
        let mut content = Map::new();
        content.insert("decision".into(), Value::from(decision));
        if let Some(message) = state["message"].as_str() {
            content.insert("message".into(), Value::from(message));
        }
        if let Some(edited) = state.get("edited_arguments").filter(|a| a.is_object()) {
            content.insert("args".into(), Value::String(edited.to_string()));
        }
        let args = view.review.as_ref().map(|r| Value::Object(r.args.clone())).unwrap_or(Value::Null);
        let mut restated = format!(
            "Confirm your decision: {decision} the call of {} by {}.\n\nArguments: {}\nPolicy: {}",
            display::escape(view.review.as_ref().map_or(view.tool.as_str(), |r| r.tool.as_str())),
            display::escape(view.principal.as_deref().unwrap_or("an anonymous caller")),
            display::json(&args),
            display::escape(&view_policy(&view)),
        );
        if let Some(edited) = content.get("args") {
            restated.push_str(&format!("\nRun instead with: {}", display::escape(edited.as_str().unwrap_or(""))));
        }
        if let Some(message) = content.get("message").and_then(Value::as_str) {
            restated.push_str(&format!("\nMessage: {}", display::escape(message)));
        }
        let form = json!({"type": "object", "properties": {
            "confirm": {"type": "boolean", "title": "I confirm this decision", "default": false}
        }, "required": ["confirm"]});
        let answer = ctx.interrupt_with_schema(Value::String(restated), form)?;
        if answer["confirm"] != Value::Bool(true) {
            return Ok(json!({ "result": error("Not decided: the decision was not confirmed.") }));
        }
        ctx.begin_effect().await?;
        let result = match shared.decide(engine, id, &who, content).await {
            Ok(_) => ToolResult::text(format!("Decided: {decision} ({id})."), false).to_value(),
            Err(Refusal(_, why)) => error(&why),
        };
        Ok(json!({ "result": result }))
    }
}

/// The policy an approval was asked under, as its page names it.
fn view_policy(view: &hitl_interrupt::PageView) -> String {
    match &view.page.kind {
        hitl_thread::PageKind::Approval { policy, .. } => policy.clone(),
        _ => String::new(),
    }
}

fn error(text: &str) -> Value {
    ToolResult::error(text).to_value()
}
