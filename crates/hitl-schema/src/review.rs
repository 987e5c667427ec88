//! The form of a tool-call review: one question per call the agent wants to make.

use hitl_protocol::RequestedSchema;
use serde_json::{Map, Value, json};

use crate::CannotAsk;

/// The largest arguments prefilled in the `args` field, in bytes of compact JSON.
/// Larger arguments make a form too big for many clients to show: the question is then
/// asked without the `edit` choice.
pub const MAX_PREFILL_BYTES: usize = 16 * 1024;

/// The kind of decision a reviewer can take (in configuration files, its wire name):
/// what a policy allows and a review form offers. The decision taken, with its edited
/// arguments or message, is `hitl_graph::payload::Decision`, the one decision type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DecisionKind {
    /// Run the call as proposed.
    Approve,
    /// Run it with other arguments.
    Edit,
    /// Do not run it.
    Reject,
    /// Answer in place of the tool.
    Respond,
}

impl DecisionKind {
    /// Every decision, in the order the form lists them.
    pub const ALL: [DecisionKind; 4] = [Self::Approve, Self::Edit, Self::Reject, Self::Respond];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Edit => "edit",
            Self::Reject => "reject",
            Self::Respond => "respond",
        }
    }

    /// The title shown for the choice.
    pub fn title(self) -> &'static str {
        match self {
            Self::Approve => "Approve",
            Self::Edit => "Edit the arguments",
            Self::Reject => "Reject",
            Self::Respond => "Answer for the tool",
        }
    }

    /// Reads a wire name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.as_str() == name)
    }
}

/// The review form of a call with `args` that allows `allowed`: a required `decision`
/// among the allowed choices, a `message` when `reject` or `respond` is allowed, and
/// `args` prefilled with the arguments as JSON text when `edit` is allowed and they fit
/// in [`MAX_PREFILL_BYTES`]. Returns the form and the decisions it offers.
pub fn review_form(
    allowed: &[DecisionKind],
    args: &Map<String, Value>,
) -> Result<(RequestedSchema, Vec<DecisionKind>), CannotAsk> {
    let prefill = serde_json::to_string(args).unwrap_or_default();
    let mut offered: Vec<DecisionKind> = DecisionKind::ALL.into_iter().filter(|d| allowed.contains(d)).collect();
    if prefill.len() > MAX_PREFILL_BYTES {
        offered.retain(|d| *d != DecisionKind::Edit);
    }
    if offered.is_empty() {
        let why = if allowed.contains(&DecisionKind::Edit) {
            format!("the call allows only edit, and its arguments ({} bytes) are too large to prefill", prefill.len())
        } else {
            "the call allows no decision".to_owned()
        };
        return Err(CannotAsk::at("/properties/decision", why));
    }
    let choices: Vec<Value> = offered.iter().map(|d| json!({"const": d.as_str(), "title": d.title()})).collect();
    let mut properties = Map::new();
    properties.insert("decision".into(), json!({"type": "string", "title": "Decision", "oneOf": choices}));
    if offered.iter().any(|d| matches!(d, DecisionKind::Reject | DecisionKind::Respond)) {
        properties.insert(
            "message".into(),
            json!({"type": "string", "title": "Message",
                   "description": "Why you reject the call, or the answer to send in its place"}),
        );
    }
    if offered.contains(&DecisionKind::Edit) {
        properties.insert(
            "args".into(),
            json!({"type": "string", "title": "Arguments",
                   "description": "The arguments to run the tool with, as a JSON object", "default": prefill}),
        );
    }
    let schema =
        RequestedSchema { schema: None, type_: "object".into(), properties, required: Some(vec!["decision".into()]) };
    Ok((schema, offered))
}

/// The review form's field that says whether an approval also covers later calls
/// (`[[policy]] approval_ttl`): a boolean, `true` unless the reviewer narrows the
/// approval to this call.
pub const COVER_FIELD: &str = "cover";

/// Adds the [`COVER_FIELD`] to a review `form`, saying what an approval covers
/// (`covers`: "this call, and your calls of … for 15 min").
pub fn offer_cover(form: &mut RequestedSchema, covers: &str) {
    form.properties.insert(
        COVER_FIELD.into(),
        json!({"type": "boolean", "title": "Cover later calls", "default": true,
               "description": format!("An approval covers {covers}. Set to false to approve this call only.")}),
    );
}

/// Whether `form` offers to cover later calls.
pub fn offers_cover(form: &RequestedSchema) -> bool {
    form.properties.contains_key(COVER_FIELD)
}
