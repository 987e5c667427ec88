//! `hitl policy explain` and `POST /api/policy/explain`: which policy would decide a
//! call, and why each earlier one did not, without making the call.

use serde_json::{Map, Value, json};

use hitl_gateway::{Policies, UpstreamSpec};

/// What the policies say of a call of `tool` with `args` by `caller` in `groups`:
/// `{"policy": "hitl.toml:12", "action": "review", "skipped": [{"policy", "reason",
/// "detail"}]}` (`policy` is `[gateway] default_action` when no policy decides), and
/// `"error"` when the deciding policy's expression failed (it then counts as true).
pub(crate) fn explain(
    policies: &Policies,
    upstreams: &[UpstreamSpec],
    tool: &str,
    args: &Map<String, Value>,
    caller: Option<&str>,
    groups: &[String],
) -> Value {
    let upstream = upstream_of(upstreams, tool);
    let who = hitl_gateway::when::Caller { principal: caller.map(str::to_owned), groups: groups.to_vec(), peer: None };
    let facts = hitl_gateway::when::CallFacts::new(tool, upstream, args, Some(&who));
    let mut explained = hitl_gateway::when::Explanation::default();
    let decided = policies.explain_call(&facts, Some(&mut explained));
    let policy =
        decided.policy.and_then(|p| policies.place_of(p)).unwrap_or_else(|| "[gateway] default_action".to_owned());
    let mut answer = json!({ "policy": policy, "action": decided.action, "skipped": explained.skipped });
    if let Some(why) = explained.failed {
        // It decided because its expression failed (review and deny fail closed).
        answer["error"] = why.into();
    }
    answer
}

/// The upstream whose prefix the listed name `tool` carries (empty: one of hitl's
/// agents).
pub(crate) fn upstream_of<'a>(upstreams: &'a [UpstreamSpec], tool: &str) -> &'a str {
    upstreams
        .iter()
        .filter(|spec| tool.starts_with(&spec.listed_name("")))
        .max_by_key(|spec| spec.listed_name("").len())
        .map_or("", |spec| spec.name.as_str())
}

/// The request `POST /api/policy/explain` takes: `{"tool", "args", "caller", "groups"}`.
pub(crate) fn explain_request(policies: &Policies, upstreams: &[UpstreamSpec], body: &Value) -> Result<Value, String> {
    let tool = body.get("tool").and_then(Value::as_str).ok_or("give \"tool\": the listed name of a tool")?;
    let args = match body.get("args") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(args)) => args.clone(),
        Some(_) => return Err("\"args\" must be an object".into()),
    };
    let caller = match body.get("caller") {
        None | Some(Value::Null) => None,
        Some(Value::String(caller)) => Some(caller.as_str()),
        Some(_) => return Err("\"caller\" must be a string (user:<id>)".into()),
    };
    let groups = match body.get("groups") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(groups)) => groups
            .iter()
            .map(|g| g.as_str().map(str::to_owned).ok_or("\"groups\" must be strings (group:<name>)"))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("\"groups\" must be an array of group:<name>".into()),
    };
    Ok(explain(policies, upstreams, tool, &args, caller, &groups))
}
