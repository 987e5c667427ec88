//! Each upstream tool as an [`Agent`], so a gated call is a thread like any agent's
//! call (its `requestState`, its binding to tool, arguments and caller, its lifetimes,
//! resume once): `allow` forwards it, `deny` fails it, `review` asks first.

use std::sync::Arc;
use std::time::Duration;

use hitl_graph::payload::{
    self, ActionRequest, ApprovalBy, Covers, Decision, Relay, RelayReply, RelayedRequest, ReviewConfig, ToolApproval,
    ToolResult,
};
use std::borrow::Cow;

use hitl_graph::{Agent, AuditSink, CallThread, Caller, END, START, StateGraph, StepContext, StepError};
use hitl_protocol::{ClientCapabilities, display};
use hitl_upstream::Upstream;
use serde_json::{Map, Value, json};

use crate::PolicyState;
use crate::cover::{ApprovalScope, cover_key};
use crate::hold::{ASKED, HELD, Holds, Link, PAGES, RESULT, report};
use crate::limit::RateLimit;
use crate::policy::{Action, Decided, Policies};
use crate::receipts::Receipts;
use crate::when::CallFacts;

/// State keys the gateway writes next to the call's arguments: the reviewer's decision
/// (the result, the upstream's open round, the hold and the pages are
/// [`crate::hold`]'s, as a call's outcome).
const DECISION: &str = "hitl:decision";
/// The key of a held call's question in its round.
const HELD_KEY: &str = "input";
/// The arguments the upstream was called with (an edit's, when edited).
const SENT: &str = "hitl:arguments";
/// The earlier approval that let the call through (`approval_ttl`): its id and scope.
const COVERED: &str = "hitl:covered";

/// An upstream tool as listed, with what the policies decided for it.
#[derive(Clone)]
pub(crate) struct Gated {
    /// The listed name.
    pub(crate) listed: String,
    /// The name upstream.
    pub(crate) tool: String,
    /// The upstream's tool object.
    pub(crate) spec: Map<String, Value>,
    /// The upstream that serves it (none: one of hitl's own agents).
    pub(crate) upstream: Option<String>,
    /// What the policies say.
    pub(crate) action: Action,
    /// The review's decisions and text.
    pub(crate) decisions: Vec<&'static str>,
    pub(crate) description: Option<String>,
    /// The policy, as errors name it.
    pub(crate) policy: String,
    /// Who decides on hitl's approval page (none: the client's user).
    pub(crate) approvers: Option<Vec<String>>,
    /// Whether the policy names who may call the tool.
    pub(crate) limits_callers: bool,
    /// The policies, when a `when` decides this tool's calls one by one (the fields
    /// above are then the rule for its name alone).
    pub(crate) conditions: Option<Arc<Policies>>,
    /// The policy's rate limit and the key it is counted under.
    pub(crate) rate: Option<(RateLimit, String)>,
    /// What an approval under the policy covers besides its call, and for how many
    /// seconds (`approval_ttl`).
    pub(crate) cover: Option<(ApprovalScope, u64)>,
    /// Where calls are counted against the rate limit and approvals that cover are kept.
    pub(crate) kept: Option<PolicyState>,
    /// What signs the receipt of an approved call sent upstream (`[receipts]`).
    pub(crate) receipts: Option<Arc<Receipts>>,
    /// Where the policy is written, and a digest of its text: the version of the rules
    /// an approval was asked under, for the audit trail.
    pub(crate) policy_at: Option<String>,
    pub(crate) policy_digest: Option<String>,
}

impl Gated {
    pub(crate) fn new(listed: String, spec: Map<String, Value>, upstream: Option<&str>, decided: Decided<'_>) -> Self {
        let tool = spec.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
        Self {
            listed,
            tool,
            spec,
            upstream: upstream.map(str::to_owned),
            action: decided.action,
            decisions: decided.policy.map_or_else(
                || hitl_schema::DecisionKind::ALL.map(hitl_schema::DecisionKind::as_str).to_vec(),
                |p| p.allowed(),
            ),
            description: decided.policy.and_then(|p| p.description.clone()),
            policy: decided.policy.map_or_else(|| "[gateway] default_action".to_owned(), |p| p.label()),
            approvers: decided.policy.and_then(|p| p.approvers.clone()),
            limits_callers: decided.policy.is_some_and(|p| p.callers.is_some()),
            conditions: None,
            rate: decided.policy.and_then(|p| Some((p.rate_limit?, decided.key?.to_owned()))),
            cover: decided.policy.and_then(|p| Some((p.approval_scope.unwrap_or_default(), p.approval_ttl?))),
            kept: None,
            receipts: None,
            policy_at: decided.place.map(str::to_owned),
            policy_digest: decided.key.map(str::to_owned),
        }
    }

    /// Whether the call must pass the `review` step before it runs: it may be denied
    /// or reviewed, decided one by one, or counted.
    pub(crate) fn guarded(&self) -> bool {
        self.action != Action::Allow || self.conditions.is_some() || (self.rate.is_some() && self.kept.is_some())
    }

    /// The error result of a call past its policy's rate limit, when it is: counted
    /// otherwise (per caller: its principal, else its address). Counted when the policy
    /// first admits the call: an allowed call as it runs, a reviewed one as it pauses
    /// (an answer carried back is not counted again, so an approved call is never
    /// refused after). A count that cannot be read refuses the call.
    pub(crate) async fn over_limit(&self, ctx: &StepContext) -> Option<ToolResult> {
        if self.action == Action::Deny || ctx.has_answer() {
            return None;
        }
        let (Some((limit, policy_key)), Some(kept)) = (&self.rate, &self.kept) else { return None };
        let caller = ctx.extension::<Caller>();
        let who = caller.and_then(|c| c.principal.as_deref().or(c.peer.as_deref())).unwrap_or("");
        let key = format!("{policy_key}:{who}");
        match kept.limiter.admit(&key, *limit, crate::cover::now_ms()).await {
            Ok(None) => None,
            Ok(Some(wait_ms)) => {
                metrics::counter!("hitl_rate_limited_total", "policy" => self.policy.clone()).increment(1);
                Some(ToolResult::error(format!(
                    "rate limit of {limit} for {} reached; retry in {} s",
                    self.policy,
                    wait_ms.div_ceil(1000)
                )))
            }
            Err(error) => {
                tracing::error!(policy = %self.policy, %error, "a rate limit could not be counted; the call is refused");
                Some(ToolResult::error(format!(
                    "the rate limit of {limit} for {} cannot be counted now; retry shortly",
                    self.policy
                )))
            }
        }
    }

    /// This tool with its calls decided one by one under `policies` (a `when` decides
    /// them).
    #[must_use]
    pub(crate) fn with_conditions(mut self, policies: Arc<Policies>) -> Self {
        self.conditions = Some(policies);
        self
    }

    /// This tool under the policy that decides the call whose step state is `state`
    /// by the caller of `ctx`: itself, unless a `when` decides its calls (only then
    /// are the arguments read).
    pub(crate) fn for_call(&self, state: &Value, ctx: &StepContext) -> Cow<'_, Gated> {
        let Some(policies) = &self.conditions else { return Cow::Borrowed(self) };
        let decided = policies.decide_call(&self.facts(&arguments(state), ctx));
        let mut gated = Gated::new(self.listed.clone(), self.spec.clone(), self.upstream.as_deref(), decided);
        gated.kept = self.kept.clone();
        gated.receipts = self.receipts.clone();
        Cow::Owned(gated.with_conditions(policies.clone()))
    }

    fn facts<'a>(&'a self, args: &'a Map<String, Value>, ctx: &'a StepContext) -> CallFacts<'a> {
        CallFacts::new(&self.listed, self.upstream.as_deref().unwrap_or(""), args, ctx.extension::<Caller>())
    }

    /// The deny error when `decision` is an edit whose arguments the policies in force
    /// deny (a `when` on the arguments): what runs is what is judged.
    pub(crate) fn edit_denied(&self, decision: &Value, ctx: &StepContext) -> Result<Option<ToolResult>, StepError> {
        let Some(policies) = &self.conditions else { return Ok(None) };
        let Carried::Run(Some(edited)) = self.carry_out(Some(decision))? else { return Ok(None) };
        let decided = policies.decide_call(&self.facts(&edited, ctx));
        if decided.action != Action::Deny {
            return Ok(None);
        }
        Ok(Some(Gated::new(self.listed.clone(), self.spec.clone(), self.upstream.as_deref(), decided).denied()))
    }

    /// The agent that serves this tool through `upstream`; calls that ask mid-call are
    /// held in `holds` for at most `hold_timeout`.
    pub(crate) fn agent(self, upstream: Arc<Upstream>, holds: Arc<Holds>, hold_timeout: Duration) -> Agent {
        let description = self.spec.get("description").and_then(Value::as_str).unwrap_or_default().to_owned();
        let mut input_schema = self.spec.get("inputSchema").cloned().unwrap_or_else(|| json!({"type": "object"}));
        // `hitl:` names are the gateway's own state (a review's decision): an upstream
        // that declares one does not make it the caller's to send.
        if let Some(properties) = input_schema.get_mut("properties").and_then(Value::as_object_mut) {
            properties.retain(|name, _| !name.starts_with("hitl:"));
        }
        let gated = Arc::new(self);
        let through = Through { upstream, holds, hold_timeout };
        // One shape whatever the policy says, so that a call paused for review resumes
        // on the graph the rules in force list (a reload may have changed its action):
        // `review` decides, then `call` runs unless it wrote the result. An allowed
        // call starts at `call`.
        let gate = gated.clone();
        let graph = StateGraph::new()
            .add_step("review", move |state, ctx| {
                let gate = gate.clone();
                async move { gate.gate(&state, &ctx).await }
            })
            .add_conditional_edges("review", |state: &Value| {
                let ended = state.get(RESULT).is_some_and(|v| !v.is_null());
                vec![if ended { END } else { "call" }.to_owned()]
            });
        let graph = relaying(graph, &gated, &through);
        let graph = match gated.guarded() {
            false => graph.add_edge(START, "call"),
            true => graph.add_edge(START, "review"),
        };
        let graph = graph.output_key(RESULT);
        let graph = graph.compile().unwrap_or_else(|e| panic!("the gateway graph of {} compiles: {e}", gated.listed));
        // Each caller has an upstream session of its own.
        Agent::new(gated.listed.clone(), description, input_schema, graph).per_caller()
    }

    /// The review question's text: the policy's description filled with the arguments,
    /// else the seed's. Argument values show as they are, hidden characters escaped
    /// ([`hitl_protocol::display`]), so what the person reads is what runs.
    fn review_text(&self, args: &Map<String, Value>) -> String {
        match &self.description {
            Some(template) => fill_shown(template, args),
            None => format!(
                "Tool execution requires approval\n\nTool: {}\nArgs: {}",
                display::escape(&self.listed),
                display::json(&Value::Object(args.clone()))
            ),
        }
    }

    /// Who decides on hitl's approval page (none: the client's user), with what the page
    /// shows of the tool: the upstream that runs it, its description and annotations.
    pub(crate) fn approval(&self) -> Option<ApprovalBy> {
        let approvers = self.approvers.clone()?;
        Some(ApprovalBy {
            approvers,
            policy: self.policy.clone(),
            upstream: self.upstream.clone(),
            tool_description: self.spec.get("description").and_then(Value::as_str).map(str::to_owned),
            annotations: self.spec.get("annotations").and_then(Value::as_object).cloned(),
            policy_at: self.policy_at.clone(),
            policy_digest: self.policy_digest.clone(),
        })
    }

    /// What an approval of this call would cover besides it, for the review to say and
    /// offer: none unless the policy's `approval_scope` reaches later calls, they can be
    /// kept, and the caller is authenticated.
    fn covers(&self, ctx: &StepContext) -> Option<Covers> {
        let (scope, ttl_seconds) = self.cover?;
        if scope == ApprovalScope::Call || self.kept.is_none() || self.policy_digest.is_none() {
            return None;
        }
        let caller = ctx.extension::<Caller>()?.principal.clone()?;
        let same_arguments = scope == ApprovalScope::Arguments;
        Some(Covers { tool: self.listed.clone(), same_arguments, ttl_seconds, caller })
    }

    /// What the upstream asks the client, marked as the upstream's: an elicitation's
    /// message begins with `<upstream>: `, so it cannot pass for hitl's own question.
    fn marked(&self, method: String, mut params: Value) -> RelayedRequest {
        if method == "elicitation/create"
            && let (Some(upstream), Some(message)) = (&self.upstream, params.get_mut("message"))
        {
            let text = message.as_str().unwrap_or_default();
            *message = Value::String(format!("{upstream}: {text}"));
        }
        RelayedRequest::method(method, params)
    }

    /// The `review` step under the rules in force: `deny` fails the call, `review`
    /// asks, `allow` lets it through. A call that was asked before the rules changed
    /// carries its answer: a rejection or response ends it as the answer says whatever
    /// the rules now are; an approval or edit runs it unless it is now denied.
    async fn gate(&self, state: &Value, ctx: &StepContext) -> Result<Value, StepError> {
        let gated = self.for_call(state, ctx);
        if let Some(refused) = gated.over_limit(ctx).await {
            return Ok(json!({ RESULT: refused.to_value() }));
        }
        if let Some(approval) = gated.covered(state, ctx).await {
            return Ok(json!({ COVERED: gated.covered_mark(&approval) }));
        }
        gated.record_decision(ctx);
        let decision = match gated.action {
            Action::Review => Some(gated.review(state, ctx)?),
            Action::Allow => ctx.answered(),
            Action::Deny => {
                let result = match ctx.answered() {
                    Some(answer) => match gated.carry_out(Some(&answer))? {
                        Carried::Answer(result) => result,
                        Carried::Run(_) => gated.denied(),
                    },
                    None => gated.denied(),
                };
                return Ok(json!({ RESULT: result.to_value() }));
            }
        };
        let Some(decision) = decision else { return Ok(json!({})) };
        match gated.edit_denied(&decision, ctx)? {
            Some(denied) => Ok(json!({ RESULT: denied.to_value() })),
            None => {
                gated.grant(&decision, state, ctx).await;
                Ok(json!({ DECISION: decision }))
            }
        }
    }

    /// Whether an earlier approval covers this call (`approval_ttl`): it then runs
    /// without a review of its own, in the audit trail as `approved_by_earlier` with the
    /// id of that approval. Only a call this policy reviews, when it is first made (an
    /// answer carried back was asked); a grant that cannot be read covers nothing.
    pub(crate) async fn covered(&self, state: &Value, ctx: &StepContext) -> Option<String> {
        if self.action != Action::Review || ctx.has_answer() {
            return None;
        }
        let (Some(kept), Some(key)) = (&self.kept, self.cover_key(state, ctx)) else { return None };
        match kept.grants.granted(&key, crate::cover::now_ms()).await {
            Ok(Some(approval)) => {
                self.audit(ctx, "approved_by_earlier", Some(&approval));
                Some(approval)
            }
            Ok(None) => None,
            Err(error) => {
                tracing::warn!(policy = %self.policy, %error, "approvals that cover later calls cannot be read; the call is reviewed");
                None
            }
        }
    }

    /// The `_meta` of the upstream call of `args` made for the caller of `ctx`: the
    /// client's capabilities and, when a person approved it (now, or earlier for
    /// calls like it), its signed receipt.
    fn upstream_meta(&self, state: &Value, args: &Map<String, Value>, ctx: &StepContext) -> Map<String, Value> {
        let mut extra = on_behalf(ctx);
        if let Some(receipt) = self.receipt(state, args, ctx)
            && let Some(Value::Object(meta)) = extra.get_mut("_meta")
        {
            meta.insert(crate::receipts::META_KEY.into(), Value::String(receipt));
        }
        extra
    }

    /// What a call an earlier `approval` covers keeps of it: its id and scope.
    fn covered_mark(&self, approval: &str) -> Value {
        json!({"approval": approval, "scope": self.cover.map(|(scope, _)| scope.as_str())})
    }

    /// `state` (a call's arguments) marked covered by `approval`, as [`Gated::receipt`]
    /// reads it.
    pub(crate) fn covered_state(&self, state: &Value, approval: &str) -> Value {
        let mut marked = state.clone();
        marked[COVERED] = self.covered_mark(approval);
        marked
    }

    /// `state` (a call's arguments) marked with the reviewer's `decision`, as
    /// [`Gated::receipt`] reads it.
    pub(crate) fn decided_state(&self, state: &Value, decision: &Value) -> Value {
        let mut marked = state.clone();
        marked[DECISION] = decision.clone();
        marked
    }

    /// The receipt of a call a person approved (or edited), or that an earlier approval
    /// covers, sent with `args` (`[receipts]`): none for a call no one approved.
    pub(crate) fn receipt(&self, state: &Value, args: &Map<String, Value>, ctx: &StepContext) -> Option<String> {
        let receipts = self.receipts.as_ref()?;
        let upstream = self.upstream.as_deref()?;
        let covered = state.get(COVERED).filter(|c| c.is_object());
        let decided = state.get(DECISION).and_then(|d| d.get("type")).and_then(Value::as_str);
        if covered.is_none() && !matches!(decided, Some("approve" | "edit")) {
            return None;
        }
        let policy = self.for_call(state, ctx);
        let caller = ctx.extension::<Caller>().and_then(|c| c.principal.clone());
        // On a page, the policy's approvers decide; else the caller, in their client.
        let approvers = policy.approvers.clone().unwrap_or_else(|| caller.iter().cloned().collect());
        let thread = ctx.extension::<CallThread>().map_or("", |t| t.0.as_str());
        let now = crate::cover::now_ms() / 1000;
        let mut claims = json!({
            "aud": upstream, "tool": self.tool, "args_sha256": crate::receipts::args_sha256(args),
            "sub": caller, "approvers": approvers, "policy": policy.policy, "iat": now,
            "exp": now + crate::receipts::LIFETIME_SECONDS,
            "jti": format!("{thread}.{}", uuid::Uuid::new_v4().simple()),
        });
        // An anonymous caller is no subject: `sub` is left out (JWT libraries refuse a
        // `sub` that is not a string).
        if claims["sub"].is_null()
            && let Some(claims) = claims.as_object_mut()
        {
            claims.remove("sub");
        }
        if let Some(covered) = covered {
            claims["scope"] = covered["scope"].clone();
            claims["approval"] = covered["approval"].clone();
        }
        Some(receipts.sign(&claims))
    }

    /// Keeps an approval that covers later calls: `decision` approved the call as asked
    /// under a policy with `approval_ttl`, and its reviewer left `cover` on (an edit, a
    /// rejection or a narrowed approval covers nothing). Named by its page's id, or by
    /// the call's thread when the caller approved in their client.
    pub(crate) async fn grant(&self, decision: &Value, state: &Value, ctx: &StepContext) {
        if self.action != Action::Review
            || decision.get("type").and_then(Value::as_str) != Some("approve")
            || decision.get(hitl_schema::COVER_FIELD) != Some(&Value::Bool(true))
        {
            return;
        }
        let (Some((_, ttl)), Some(kept), Some(key)) = (self.cover, &self.kept, self.cover_key(state, ctx)) else {
            return;
        };
        let approval = decision.get("approval").and_then(Value::as_str).map(str::to_owned);
        let approval = approval.or_else(|| ctx.extension::<CallThread>().map(|t| t.0.clone())).unwrap_or_default();
        let until = crate::cover::now_ms().saturating_add(ttl.saturating_mul(1000));
        if let Err(error) = kept.grants.grant(&key, &approval, until).await {
            tracing::warn!(policy = %self.policy, %error, "an approval that covers later calls cannot be kept; they will be reviewed");
        }
    }

    /// The key this call's approval is kept under and later calls are looked up by:
    /// the policy, the authenticated caller, the tool and (scope `arguments`) the
    /// arguments' digest. `None` when nothing later is covered.
    fn cover_key(&self, state: &Value, ctx: &StepContext) -> Option<String> {
        let (scope, _) = self.cover?;
        let principal = ctx.extension::<Caller>()?.principal.as_deref()?;
        let digest = match scope {
            ApprovalScope::Arguments => crate::receipts::args_sha256(&arguments(state)),
            ApprovalScope::Call | ApprovalScope::Tool => String::new(),
        };
        cover_key(self.policy_digest.as_deref()?, principal, scope, &self.listed, &digest)
    }

    /// Writes to the audit trail, when the server keeps one, what this policy decided
    /// for the call (`allowed`, `denied`, or `review_asked`) and which policy it is
    /// (its globs, where it is written, a digest of its text), so a reader can tell
    /// which version of the rules let a call through. Once per call: not when an
    /// answer is carried back (the approval's own entries say what came of it).
    pub(crate) fn record_decision(&self, ctx: &StepContext) {
        if ctx.has_answer() {
            return;
        }
        let event = match self.action {
            Action::Allow => "allowed",
            Action::Deny => "denied",
            Action::Review => "review_asked",
        };
        self.audit(ctx, event, None);
    }

    /// Writes `event` about this call and its policy to the audit trail, when the
    /// server keeps one (with the `approval` it names).
    fn audit(&self, ctx: &StepContext, event: &str, approval: Option<&str>) {
        let Some(sink) = ctx.extension::<AuditSink>() else { return };
        let mut entry = json!({
            "event": event, "tool": self.listed, "upstream": self.upstream, "policy": self.policy,
            "policy_at": self.policy_at, "policy_digest": self.policy_digest,
        });
        if let Some(approval) = approval {
            entry["approval"] = Value::from(approval);
        }
        sink.record(entry);
    }

    /// The error result of a denied call, naming the policy.
    pub(crate) fn denied(&self) -> ToolResult {
        ToolResult::error(format!("{} is denied by the policy {}", self.listed, self.policy))
    }

    /// What the reviewer's `decision` (none: approved) says to do.
    pub(crate) fn carry_out(&self, decision: Option<&Value>) -> Result<Carried, StepError> {
        let decision = match decision {
            None | Some(Value::Null) => Decision::Approve,
            Some(value) => serde_json::from_value(value.clone())
                .map_err(|e| StepError::msg(format!("the review's decision is not valid: {e}")))?,
        };
        Ok(match decision {
            Decision::Approve => Carried::Run(None),
            Decision::Edit { edited_action } => Carried::Run(Some(edited_action.args)),
            Decision::Reject { message } => Carried::Answer(ToolResult::error(
                message.unwrap_or_else(|| format!("The reviewer rejected the call to {}", self.listed)),
            )),
            Decision::Respond { message } => Carried::Answer(self.responded(message)),
        })
    }

    /// The result of a reviewer's `respond`: their text. On a tool that declares an
    /// `outputSchema`, clients expect structured content: a text that is JSON valid
    /// against the schema is also the `structuredContent`; any other text is an error
    /// result (SDK clients refuse a success without it).
    fn responded(&self, message: String) -> ToolResult {
        let Some(schema) = self.spec.get("outputSchema") else { return ToolResult::text(message, false) };
        match serde_json::from_str::<Value>(&message) {
            Ok(value) if value.is_object() && hitl_schema::validate_value(schema, &value).is_ok() => {
                let mut result = ToolResult::text(message, false);
                result.0.insert("structuredContent".into(), value);
                result
            }
            _ => ToolResult::text(message, true),
        }
    }

    /// Asks for a decision on the call (the seed's per-call review: the tool, its
    /// arguments, the allowed decisions, edits checked against the tool's schema).
    pub(crate) fn review(&self, state: &Value, ctx: &StepContext) -> Result<Value, StepError> {
        let args = arguments(state);
        let text = self.review_text(&args);
        let approval = ToolApproval {
            covers: self.covers(ctx),
            action_request: ActionRequest::new(&self.listed, args, Some(text)),
            review_config: Some(ReviewConfig::new(&self.listed, self.decisions.iter().copied())),
            approval: self.approval(),
        };
        let schema =
            payload::decision_schema(&self.listed, Some(&closed(self.spec.get("inputSchema"))), &self.decisions);
        Ok(ctx.interrupt_with_schema(approval.to_value(), schema)?)
    }
}

/// How a gated tool reaches its upstream.
#[derive(Clone)]
struct Through {
    upstream: Arc<Upstream>,
    holds: Arc<Holds>,
    hold_timeout: Duration,
}

impl Through {
    /// The link of one call, made for the client of `ctx`.
    fn link(&self, gated: &Gated, ctx: &StepContext) -> Link {
        Link {
            upstream: self.upstream.clone(),
            hold_timeout: self.hold_timeout,
            capabilities: ctx.extension::<ClientCapabilities>().cloned().unwrap_or_default(),
            legacy_client: ctx.metadata().get("legacyClient").and_then(Value::as_bool).unwrap_or(false),
            tool: gated.listed.clone(),
            report: report(ctx),
        }
    }
}

/// What a review decided.
pub(crate) enum Carried {
    /// Run the call: with the edited arguments, or (`None`) as it was made.
    Run(Option<Map<String, Value>>),
    /// Do not run it: answer with this result.
    Answer(ToolResult),
}

/// `call`, then `relay` for as long as a 2026-07-28 upstream answers `input_required`,
/// or `hold` for as long as a 2025-era upstream asks mid-call.
fn relaying(graph: StateGraph, gated: &Arc<Gated>, through: &Through) -> StateGraph {
    let set = |state: &Value, key: &str| state.get(key).is_some_and(|v| !v.is_null());
    let done = move |state: &Value| {
        let next = if set(state, RESULT) {
            END
        } else if set(state, HELD) {
            "hold"
        } else if set(state, PAGES) {
            "pages"
        } else {
            "relay"
        };
        vec![next.to_owned()]
    };
    graph
        .add_step("call", call_step(gated.clone(), through.clone()))
        .add_step("relay", relay_step(gated.clone(), through.clone()))
        .add_step("hold", hold_step(gated.clone(), through.holds.clone()))
        .add_step("pages", pages_step(gated.clone(), through.clone()))
        .add_conditional_edges("call", done)
        .add_conditional_edges("relay", done)
        .add_conditional_edges("hold", done)
        .add_conditional_edges("pages", done)
}

/// The step that asks the client what a held upstream call asked, and hands the
/// answer to it (on whichever replica holds it).
fn hold_step(gated: Arc<Gated>, holds: Arc<Holds>) -> impl Fn(Value, StepContext) -> StepFuture + Send + Sync {
    move |state, ctx| {
        let (gated, holds) = (gated.clone(), holds.clone());
        Box::pin(async move {
            let held = state.get(HELD).cloned().unwrap_or_default();
            let method = held["method"].as_str().unwrap_or("elicitation/create").to_owned();
            let request = gated.marked(method, held["params"].clone());
            let reply: RelayReply =
                serde_json::from_value(ctx.interrupt(Relay::input([(HELD_KEY, request)]).to_value())?)
                    .map_err(|e| StepError::msg(format!("the relayed answer is not valid: {e}")))?;
            // Handing the answer over lets the upstream go on: an effect.
            ctx.begin_effect().await?;
            Ok(holds.answer(&held, reply.response(HELD_KEY).clone(), &gated.listed, report(&ctx)).await)
        })
    }
}

/// The step that asks a 2026-07-28 client to open the pages an upstream's `-32042`
/// named (URL questions, keyed by their elicitation ids) and, once the user accepted
/// them all, makes the call again, as the error asks of its client.
fn pages_step(gated: Arc<Gated>, through: Through) -> impl Fn(Value, StepContext) -> StepFuture + Send + Sync {
    move |state, ctx| {
        let (gated, through) = (gated.clone(), through.clone());
        Box::pin(async move {
            let pages = state.get(PAGES).and_then(Value::as_array).cloned().unwrap_or_default();
            let questions: Vec<(String, RelayedRequest)> = pages
                .iter()
                .enumerate()
                .map(|(n, page)| {
                    let key = page
                        .get("elicitationId")
                        .and_then(Value::as_str)
                        .map_or_else(|| format!("page-{n}"), str::to_owned);
                    let message = page.get("message").and_then(Value::as_str).unwrap_or_default();
                    let url = page.get("url").and_then(Value::as_str).unwrap_or_default();
                    let params = json!({"mode": "url", "message": message, "url": url});
                    (key, gated.marked("elicitation/create".into(), params))
                })
                .collect();
            let keys: Vec<String> = questions.iter().map(|(key, _)| key.clone()).collect();
            let reply: RelayReply = serde_json::from_value(ctx.interrupt(Relay::input(questions).to_value())?)
                .map_err(|e| StepError::msg(format!("the relayed answers are not valid: {e}")))?;
            if let Some(refused) = keys.iter().filter_map(|key| reply.action(key)).find(|action| *action != "accept") {
                let text = format!(
                    "The request for input was {}.",
                    if refused == "decline" { "declined" } else { "cancelled" }
                );
                return Ok(json!({ RESULT: ToolResult::error(text).to_value(), PAGES: null }));
            }
            ctx.begin_effect().await?;
            let sent = state.get(SENT).and_then(Value::as_object).cloned().unwrap_or_else(|| arguments(&state));
            let extra = gated.upstream_meta(&state, &sent, &ctx);
            let call = through.upstream.start_call_for(caller(&ctx), &gated.tool, sent, extra, ctx.wants_progress());
            Ok(through.holds.follow(call, through.link(&gated, &ctx)).await)
        })
    }
}

/// The step that relays the upstream's questions to the client and sends the answers
/// back with the upstream's `requestState`.
fn relay_step(gated: Arc<Gated>, through: Through) -> impl Fn(Value, StepContext) -> StepFuture + Send + Sync {
    move |state, ctx| {
        let (gated, through) = (gated.clone(), through.clone());
        Box::pin(async move {
            let asked = state.get(ASKED).and_then(Value::as_object).cloned().unwrap_or_default();
            let requests = asked.get("inputRequests").and_then(Value::as_object).cloned().unwrap_or_default();
            let relay = Relay::input(requests.into_iter().map(|(key, request)| {
                let method = request.get("method").and_then(Value::as_str).unwrap_or("elicitation/create").to_owned();
                (key, gated.marked(method, request.get("params").cloned().unwrap_or(json!({}))))
            }));
            let reply: RelayReply = serde_json::from_value(ctx.interrupt(relay.to_value())?)
                .map_err(|e| StepError::msg(format!("the relayed answers are not valid: {e}")))?;
            let request_state = asked.get("requestState").and_then(Value::as_str).map(str::to_owned);
            ctx.begin_effect().await?;
            let sent = state.get(SENT).and_then(Value::as_object).cloned().unwrap_or_else(|| arguments(&state));
            let mut extra = gated.upstream_meta(&state, &sent, &ctx);
            extra.insert("inputResponses".into(), Value::Object(reply.responses));
            if let Some(state) = request_state {
                extra.insert("requestState".into(), Value::String(state));
            }
            let call = through.upstream.start_call_for(caller(&ctx), &gated.tool, sent, extra, ctx.wants_progress());
            Ok(through.holds.follow(call, through.link(&gated, &ctx)).await)
        })
    }
}

type StepFuture = std::pin::Pin<Box<dyn Future<Output = Result<Value, StepError>> + Send>>;

/// The `_meta` of an upstream call made for the calling client: its capabilities (the
/// run's typed extension, which the engine gives it), so the upstream asks only what
/// the client can answer.
fn on_behalf(ctx: &StepContext) -> Map<String, Value> {
    let capabilities = ctx.extension::<ClientCapabilities>().cloned().unwrap_or_default();
    let meta = json!({ hitl_protocol::meta_keys::CLIENT_CAPABILITIES: capabilities });
    Map::from_iter([("_meta".to_owned(), meta)])
}

/// Who the call is made for, so each caller has an upstream session of its own: the
/// engine's key of the caller (its principal or address, with its 2025-era session with
/// hitl or its declared capabilities), never a value the client sent alone. A resumed
/// call, on any replica, is made for the same caller, so in a session for the same key.
pub(crate) fn caller(ctx: &StepContext) -> Option<&str> {
    ctx.metadata().get("caller").and_then(Value::as_str)
}

/// The step that carries out the decision (none: approved) and forwards the call.
fn call_step(gated: Arc<Gated>, through: Through) -> impl Fn(Value, StepContext) -> StepFuture + Send + Sync {
    move |state, ctx| {
        let (gated, through) = (gated.clone(), through.clone());
        Box::pin(async move {
            // A tool no review step guards is allowed by its name alone: said here.
            if !gated.guarded() {
                gated.record_decision(&ctx);
            }
            let args = match gated.carry_out(state.get(DECISION))? {
                Carried::Run(args) => args.unwrap_or_else(|| arguments(&state)),
                Carried::Answer(result) => return Ok(json!({ RESULT: result.to_value() })),
            };
            // Recorded first: a resend after this server died mid-call learns the
            // outcome is unknown, and the upstream is never called twice.
            ctx.begin_effect().await?;
            let extra = gated.upstream_meta(&state, &args, &ctx);
            let call =
                through.upstream.start_call_for(caller(&ctx), &gated.tool, args.clone(), extra, ctx.wants_progress());
            let mut next = through.holds.follow(call, through.link(&gated, &ctx)).await;
            next[SENT] = Value::Object(args);
            Ok(next)
        })
    }
}

/// The call's arguments: the state without the gateway's keys.
pub(crate) fn arguments(state: &Value) -> Map<String, Value> {
    state.as_object().map_or_else(Map::new, |s| {
        s.iter().filter(|(k, _)| !k.starts_with("hitl:")).map(|(k, v)| (k.clone(), v.clone())).collect()
    })
}

/// The tool's input schema with no arguments beyond those it declares (an edit may
/// not add any).
fn closed(schema: Option<&Value>) -> Value {
    let mut schema = schema.cloned().unwrap_or_else(|| json!({"type": "object"}));
    if let Some(map) = schema.as_object_mut()
        && map.get("type").and_then(Value::as_str) == Some("object")
    {
        map.entry("additionalProperties").or_insert(Value::Bool(false));
    }
    schema
}

/// `template` with each `{name}` replaced by argument `name` (strings as they are,
/// other values as JSON); unknown names stay as written.
pub fn fill(template: &str, args: &Map<String, Value>) -> String {
    fill_with(template, args, |value| match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

/// [`fill`] for a text a person reads before the call runs: each value on one line,
/// with newlines, control and other hidden characters escaped
/// ([`hitl_protocol::display::value`]), so an argument can neither hide what it is nor
/// push the rest of the text out of view.
pub fn fill_shown(template: &str, args: &Map<String, Value>) -> String {
    fill_with(template, args, display::value)
}

fn fill_with(template: &str, args: &Map<String, Value>, show: impl Fn(&Value) -> String) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(close) if args.contains_key(&after[..close]) => {
                out.push_str(&show(&args[&after[..close]]));
                rest = &after[close + 1..];
            }
            _ => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_take_the_arguments() {
        let args: Map<String, Value> =
            serde_json::from_value(json!({"partition": "p7", "database": "orders", "n": 3})).unwrap();
        assert_eq!(fill("Drop {partition} on {database}?", &args), "Drop p7 on orders?");
        assert_eq!(fill("{n} rows, {missing} and {", &args), "3 rows, {missing} and {");
    }

    fn gated(description: Option<&str>, approvers: Option<Vec<String>>) -> Gated {
        let spec = json!({"name": "drop_table", "description": "Drops a table.",
                          "annotations": {"destructiveHint": true}, "inputSchema": {"type": "object"}});
        let policy = crate::Policy {
            tools: vec!["db.*".into()],
            resources: vec![],
            prompts: vec![],
            action: Action::Review,
            decisions: None,
            description: description.map(str::to_owned),
            callers: None,
            approvers,
            when: None,
            rate_limit: None,
            approval_ttl: None,
            approval_scope: None,
        };
        let decided = Decided { action: Action::Review, policy: Some(&policy), place: Some("hitl.toml:7"), key: None };
        Gated::new("db.drop_table".into(), spec.as_object().cloned().unwrap(), Some("db"), decided)
    }

    #[test]
    fn review_texts_show_hidden_characters_and_keep_plain_text_as_it_was() {
        let plain: Map<String, Value> = serde_json::from_value(json!({"table": "orders", "n": 3})).unwrap();
        assert_eq!(
            gated(None, None).review_text(&plain),
            "Tool execution requires approval\n\nTool: db.drop_table\nArgs: {\"table\":\"orders\",\"n\":3}"
        );
        let bidi: Map<String, Value> =
            serde_json::from_value(json!({"table": "\u{202e}DORP\u{202c}_orders_test"})).unwrap();
        let text = gated(None, None).review_text(&bidi);
        assert!(text.ends_with(r#"Args: {"table":"\u202eDORP\u202c_orders_test"}"#), "{text}");
        let described = gated(Some("Drop {table}?\nIt cannot be undone."), None);
        assert_eq!(described.review_text(&plain), "Drop orders?\nIt cannot be undone.");
        let pushed: Map<String, Value> =
            serde_json::from_value(json!({"table": "scratch\n\n\n\u{2028}Approved by security"})).unwrap();
        assert_eq!(
            described.review_text(&pushed),
            "Drop scratch\\n\\n\\n\\u2028Approved by security?\nIt cannot be undone.",
            "the policy's own line break stays; the argument's are escaped"
        );
        assert_eq!(
            fill("{table}", &pushed),
            "scratch\n\n\n\u{2028}Approved by security",
            "fill keeps values as they are"
        );
    }

    #[test]
    fn approvals_name_the_upstream_and_the_tool_and_its_questions_are_marked() {
        assert_eq!(gated(None, None).approval(), None, "no approvers: the client's user decides");
        let approval = gated(None, Some(vec!["group:dba".into()])).approval().unwrap();
        assert_eq!(approval.upstream.as_deref(), Some("db"));
        assert_eq!(approval.tool_description.as_deref(), Some("Drops a table."));
        assert_eq!(approval.annotations.unwrap()["destructiveHint"], true);
        let asked = gated(None, None).marked("elicitation/create".into(), json!({"message": "Approve the call?"}));
        assert_eq!(asked.params.unwrap()["message"], "db: Approve the call?");
        let sampled = gated(None, None).marked("sampling/createMessage".into(), json!({"messages": []}));
        assert_eq!(sampled.params.unwrap(), json!({"messages": []}), "only elicitations carry a message");
    }

    #[test]
    fn edits_may_not_add_arguments() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(closed(Some(&schema))["additionalProperties"], false);
        let open = json!({"type": "object", "additionalProperties": true});
        assert_eq!(closed(Some(&open))["additionalProperties"], true, "a schema that says so keeps extra arguments");
        let state = json!({"a": 1, DECISION: {"type": "approve"}, RESULT: null});
        assert_eq!(Value::Object(arguments(&state)), json!({"a": 1}));
    }
}
