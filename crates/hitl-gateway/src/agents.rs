//! Policies on agents: every tool hitl lists is under the policies, agents too. On an
//! agent, `deny` and `review` act before it starts: a guard step in front of its graph
//! ([`hitl_graph::Graph::guarded`]) fails the call naming the policy, or asks the
//! seed's review question and then runs the agent as asked, on the edited arguments,
//! or not at all (reject, respond).

use std::sync::Arc;

use hitl_graph::{Agent, StepContext, StepError};
use serde_json::{Map, Value, json};

use crate::PolicyState;
use crate::policy::{Action, Policies};
use crate::tools::{Carried, Gated, arguments};

/// The guard step's name, and the state key of its verdict (the call's result when the
/// agent does not run).
const GUARD: &str = "hitl:gate";
const VERDICT: &str = "hitl:verdict";

/// `agent` under `policies`: as it is when they allow it, else behind its gate (which
/// counts its calls in `kept` when its policy has a `rate_limit`, and keeps there the
/// approvals that cover later calls). Fails when the agent's graph already has a step
/// of the guard's name.
pub fn gate(agent: Agent, policies: &Arc<Policies>, kept: Option<&PolicyState>) -> Result<Agent, String> {
    gate_with(agent, policies, kept, false)
}

/// [`gate`] for a server whose rules may be reloaded: the guard is there even when the
/// policies allow the agent, so that a call paused for review under earlier rules
/// resumes on it and its answer is carried out under the rules then in force.
pub fn gate_reloadable(agent: Agent, policies: &Arc<Policies>, kept: Option<&PolicyState>) -> Result<Agent, String> {
    gate_with(agent, policies, kept, true)
}

fn gate_with(
    agent: Agent,
    policies: &Arc<Policies>,
    kept: Option<&PolicyState>,
    always: bool,
) -> Result<Agent, String> {
    let decided = policies.decide(&agent.name);
    let mut spec = Map::new();
    spec.insert("name".into(), json!(agent.name));
    spec.insert("inputSchema".into(), agent.input_schema.clone());
    let mut gated = Gated::new(agent.name.clone(), spec, None, decided);
    if policies.conditional(&agent.name) {
        gated = gated.with_conditions(policies.clone());
    }
    gated.kept = kept.cloned();
    if !gated.guarded() && !always {
        return Ok(agent);
    }
    let gated = Arc::new(gated);
    let guard = move |state: Value, ctx: StepContext| {
        let gated = gated.clone();
        async move { guard(&gated, &state, &ctx).await }
    };
    let graph = agent
        .graph
        .guarded(GUARD, guard, VERDICT)
        .ok_or_else(|| format!("agent {:?} has a step named {GUARD:?}: it cannot be gated", agent.name))?;
    Ok(Agent { graph, ..agent })
}

/// Denies, or asks and carries out the decision: the edited arguments replace the
/// call's (those the edit leaves out become null), a rejection or a response is the
/// verdict.
async fn guard(gated: &Gated, state: &Value, ctx: &StepContext) -> Result<Value, StepError> {
    let gated = gated.for_call(state, ctx);
    if let Some(refused) = gated.over_limit(ctx).await {
        return Ok(json!({ VERDICT: refused.to_value() }));
    }
    if gated.covered(state, ctx).await.is_some() {
        return Ok(json!({}));
    }
    gated.record_decision(ctx);
    let answer = match gated.action {
        Action::Review => Some(gated.review(state, ctx)?),
        // Asked under earlier rules (a reload changed them since): the answer stands.
        Action::Allow | Action::Deny => ctx.answered(),
    };
    if let Some(answer) = &answer {
        if let Some(denied) = gated.edit_denied(answer, ctx)? {
            return Ok(json!({ VERDICT: denied.to_value() }));
        }
        gated.grant(answer, state, ctx).await;
    }
    let carried = answer.as_ref().map(|answer| gated.carry_out(Some(answer))).transpose()?;
    match carried {
        Some(Carried::Answer(result)) => Ok(json!({ VERDICT: result.to_value() })),
        _ if gated.action == Action::Deny => Ok(json!({ VERDICT: gated.denied().to_value() })),
        None | Some(Carried::Run(None)) => Ok(json!({})),
        Some(Carried::Run(Some(edited))) => {
            let mut update: Map<String, Value> = arguments(state).into_iter().map(|(k, _)| (k, Value::Null)).collect();
            update.extend(edited);
            Ok(Value::Object(update))
        }
    }
}
