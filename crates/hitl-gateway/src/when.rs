//! `[[policy]] when`: a CEL expression (cel-rust's `cel` crate) over the call, compiled
//! once when the policies are made; a syntax error or an unknown variable is refused
//! there.
//!
//! ```
//! use hitl_gateway::when::{CallFacts, Condition};
//! use serde_json::json;
//!
//! let prod = Condition::compile(r#"args.database == "prod" && !("group:dba" in caller.groups)"#).unwrap();
//! let args = json!({"database": "prod"});
//! let call = CallFacts::new("db.drop_partition", "db", args.as_object().unwrap(), None);
//! assert_eq!(prod.eval(&call.variables()), Ok(true));
//! assert!(Condition::compile("arguments.database == 1").unwrap_err().contains("unknown variable"));
//! ```

use std::sync::Arc;

pub use hitl_graph::Caller;
use serde_json::{Map, Value, json};

/// The variables an expression may name.
pub const VARIABLES: [&str; 5] = ["tool", "upstream", "args", "caller", "now"];

/// A compiled `when`.
#[derive(Clone)]
pub struct Condition {
    text: String,
    program: Arc<cel::Program>,
}

impl std::fmt::Debug for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Condition").field(&self.text).finish()
    }
}

impl Condition {
    /// `text` compiled, or why not: a syntax error (with its line and column in the
    /// expression) or a variable other than [`VARIABLES`].
    pub fn compile(text: &str) -> Result<Self, String> {
        let program = cel::Program::compile(text).map_err(|errors| {
            let shown: Vec<String> = errors
                .errors
                .iter()
                .map(|e| format!("{} (at {}:{} of the expression)", e.msg, e.pos.0, e.pos.1))
                .collect();
            format!("not a CEL expression: {}", shown.join("; "))
        })?;
        let references = program.references();
        let mut unknown: Vec<&str> = references.variables().into_iter().filter(|v| !VARIABLES.contains(v)).collect();
        unknown.sort_unstable();
        if let Some(first) = unknown.first() {
            return Err(format!("unknown variable {first:?} (an expression may name {})", VARIABLES.join(", ")));
        }
        Ok(Self { text: text.to_owned(), program: Arc::new(program) })
    }

    /// The expression as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether the expression is true of the call; an error (a missing field, a wrong
    /// type, a result that is not a boolean) says why.
    pub fn eval(&self, vars: &Variables) -> Result<bool, String> {
        match self.program.execute(&vars.0) {
            Ok(cel::Value::Bool(value)) => Ok(value),
            Ok(other) => Err(format!("the expression gives {other:?}, not a boolean")),
            Err(error) => Err(error.to_string()),
        }
    }
}

/// What an expression sees of one call.
#[derive(Debug, Clone)]
pub struct CallFacts<'a> {
    /// The listed name.
    pub tool: &'a str,
    /// The upstream that serves it (empty for hitl's own agents).
    pub upstream: &'a str,
    /// The call's arguments.
    pub args: &'a Map<String, Value>,
    /// Who calls, when known.
    pub caller: Option<&'a hitl_graph::Caller>,
    /// When (ms since the epoch).
    pub now_ms: u64,
}

impl<'a> CallFacts<'a> {
    /// A call made now.
    pub fn new(
        tool: &'a str,
        upstream: &'a str,
        args: &'a Map<String, Value>,
        caller: Option<&'a hitl_graph::Caller>,
    ) -> Self {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Self { tool, upstream, args, caller, now_ms: u64::try_from(now.as_millis()).unwrap_or(u64::MAX) }
    }

    /// The variables of [`VARIABLES`] for this call: `caller` is
    /// `{id, groups, authenticated}` (`id` empty for an anonymous caller).
    pub fn variables(&self) -> Variables {
        let mut context = cel::Context::default();
        let caller = match self.caller {
            Some(caller) => json!({
                "id": caller.principal.clone().unwrap_or_default(),
                "groups": caller.groups,
                "authenticated": caller.principal.is_some(),
            }),
            None => json!({"id": "", "groups": [], "authenticated": false}),
        };
        let now = chrono::DateTime::from_timestamp_millis(i64::try_from(self.now_ms).unwrap_or(i64::MAX))
            .unwrap_or_default()
            .fixed_offset();
        // Plain JSON values: adding them cannot fail.
        let _ = context.add_variable("tool", self.tool);
        let _ = context.add_variable("upstream", self.upstream);
        let _ = context.add_variable("args", Value::Object(self.args.clone()));
        let _ = context.add_variable("caller", caller);
        context.add_variable_from_value("now", cel::Value::Timestamp(now));
        Variables(context)
    }
}

/// The variables of one call, made once and shared by the policies that look at it.
pub struct Variables(cel::Context<'static, 'static>);

/// How the policies came to their decision on a call, for `hitl policy explain`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Explanation {
    /// The policies before the one that decided, each with why it did not.
    pub skipped: Vec<Skipped>,
    /// Why the deciding policy's expression failed, when it decided by failing closed.
    pub failed: Option<String>,
}

/// Why a policy did not decide a call, for `hitl policy explain`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Skipped {
    /// Where it is written (`hitl.toml:4`).
    pub policy: String,
    /// `glob`, `when_false` or `error`.
    pub reason: String,
    /// What was found.
    pub detail: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The examples of docs/policies.md compile and run on a call that has their fields.
    #[test]
    fn the_documented_examples_compile_and_run() {
        let args = json!({"database": "prod", "amount": 5, "path": "/etc/passwd", "force": true});
        let caller = Caller { principal: Some("user:alice".into()), groups: vec!["group:oncall".into()], peer: None };
        let call = CallFacts::new("s3.delete", "s3", args.as_object().unwrap(), Some(&caller));
        let vars = call.variables();
        for (text, expected) in [
            (r#"args.database == "prod""#, true),
            ("args.amount > 1000 && !caller.authenticated", false),
            (r#""group:oncall" in caller.groups"#, true),
            (r#"args.path.startsWith("/etc/") || args.path.contains("..")"#, true),
            ("has(args.force) && args.force == true", true),
            (r#"now.getHours("Europe/Paris") >= 0"#, true),
            (r#"tool.endsWith(".delete") && upstream == "s3""#, true),
        ] {
            let condition = Condition::compile(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(condition.eval(&vars), Ok(expected), "{text}");
        }
    }
}
