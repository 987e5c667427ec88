//! `[[policy]]`: which tools may run, which need a person's review, which never run,
//! and which upstream resources and prompts are passed through. The first policy whose
//! globs match a tool's listed name decides; a tool no policy matches gets `[gateway]
//! default_action` (itself `allow` by default). Resources (`<prefix><uri>`) and prompts
//! (their listed names) are matched the same way against `resources` and `prompts`,
//! with `allow` or `deny` only; one no policy matches follows the default action, a
//! default of `review` denying it (a read cannot be reviewed).

pub use hitl_schema::DecisionKind;
use serde::Deserialize;

/// What a policy does with the calls it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Forward the call.
    Allow,
    /// Pause it for a person's review; run it once when approved.
    Review,
    /// Fail it with an error result that names the policy.
    Deny,
}

/// One `[[policy]]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Globs over listed tool names (`*` any run of characters, `?` one).
    #[serde(default)]
    pub tools: Vec<String>,
    /// Globs over upstream resources, each named `<prefix><uri>` (`fs.*`: every
    /// resource and template of upstream `fs`).
    #[serde(default)]
    pub resources: Vec<String>,
    /// Globs over listed prompt names (`ev.*`).
    #[serde(default)]
    pub prompts: Vec<String>,
    /// What happens to matching calls.
    pub action: Action,
    /// The review's allowed decisions (absent: all four).
    #[serde(default)]
    pub decisions: Option<Vec<DecisionKind>>,
    /// The review text, with `{argument}` replaced by the call's arguments.
    #[serde(default)]
    pub description: Option<String>,
    /// Who may call the matching tools: `user:<id>` and `group:<name>` entries
    /// (absent: every caller).
    #[serde(default)]
    pub callers: Option<Vec<String>>,
    /// Who decides a review, on hitl's approval page: `user:<id>` and `group:<name>`
    /// entries (absent: the MCP client's user, in the client).
    #[serde(default)]
    pub approvers: Option<Vec<String>>,
    /// A CEL expression over the call (`tool`, `upstream`, `args`, `caller`, `now`):
    /// the policy applies only to the calls it is true for (absent: every call).
    #[serde(default)]
    pub when: Option<String>,
    /// Calls each caller may make under this policy per window (`"30/minute"`).
    #[serde(default)]
    pub rate_limit: Option<crate::limit::RateLimit>,
    /// Seconds after an approval during which it also lets the same caller's later
    /// calls under this policy through, within `approval_scope` (absent: none).
    #[serde(default)]
    pub approval_ttl: Option<u64>,
    /// What such an approval covers: `call` (this call only, the default),
    /// `arguments` (identical arguments) or `tool` (any arguments).
    #[serde(default)]
    pub approval_scope: Option<crate::cover::ApprovalScope>,
}

/// The longest `approval_ttl`: a year, in seconds.
const MAX_APPROVAL_TTL: u64 = 365 * 24 * 3600;

impl Policy {
    /// The decisions a review under this policy offers.
    pub fn allowed(&self) -> Vec<&'static str> {
        self.decisions.as_deref().unwrap_or(&DecisionKind::ALL).iter().map(|d| d.as_str()).collect()
    }

    /// What its rate limits are counted under: a digest of the policy's text, so that
    /// a reload that moves it keeps the counts and one that changes it starts anew.
    pub fn key(&self) -> String {
        let digest = ring::digest::digest(&ring::digest::SHA256, format!("{self:?}").as_bytes());
        digest.as_ref()[..12].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// How the policy is named in errors: its globs.
    pub fn label(&self) -> String {
        let named = [("tools", &self.tools), ("resources", &self.resources), ("prompts", &self.prompts)];
        let shown: Vec<String> = named
            .iter()
            .filter(|(_, globs)| !globs.is_empty())
            .map(|(key, globs)| format!("{key} = {globs:?}"))
            .collect();
        if shown.is_empty() { "tools = []".to_owned() } else { shown.join(", ") }
    }

    fn globs(&self, kind: Kind) -> &[String] {
        match kind {
            Kind::Tool => &self.tools,
            Kind::Resource => &self.resources,
            Kind::Prompt => &self.prompts,
        }
    }
}

/// What a policy's globs name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Listed tool names (`tools`).
    Tool,
    /// Upstream resources as `<prefix><uri>` (`resources`).
    Resource,
    /// Listed prompt names (`prompts`).
    Prompt,
}

impl Policy {}

/// `[gateway]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewaySection {
    /// The action for tools no policy matches (absent: `allow`).
    #[serde(default)]
    pub default_action: Option<Action>,
    /// Seconds a 2025-era upstream's call that asks mid-call is held open for the
    /// client's answer (absent: 600).
    #[serde(default)]
    pub hold_timeout: Option<u64>,
    /// What a policy that matches no served tool does to the server (absent: `warn`).
    #[serde(default)]
    pub unmatched: Option<UnmatchedMode>,
}

/// `[gateway] unmatched`: a policy glob that matches nothing guards nothing (a typo, a
/// missing prefix), and the tool it meant runs under the default action.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnmatchedMode {
    /// Log it at `WARN` and serve.
    #[default]
    Warn,
    /// Refuse to start while one matches nothing (after every upstream's first
    /// listing); a later listing that leaves one is logged at `ERROR`.
    Error,
}

/// The policies in order, and the default.
#[derive(Debug, Clone, Default)]
pub struct Policies {
    policies: Vec<Policy>,
    /// Each policy's `when`, compiled once.
    conditions: Vec<Option<crate::when::Condition>>,
    /// Each policy's [`Policy::key`], computed once.
    keys: Vec<String>,
    default_action: Option<Action>,
    /// Where each policy is written (`hitl.toml:12`), for the messages that name it.
    locations: Vec<String>,
}

/// What an upstream has listed, for [`Policies::judge`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTools {
    /// The prefix of its listed names (`fs.`).
    pub prefix: String,
    /// Its tools' own names (`write_file`), or `None` before its first listing.
    pub tools: Option<Vec<String>>,
    /// Its resources' URIs and its templates' `uriTemplate`s, as it gave them (none
    /// before its first listing).
    pub resources: Option<Vec<String>>,
    /// Its prompts' own names (none before its first listing).
    pub prompts: Option<Vec<String>>,
}

impl UpstreamTools {
    /// What it listed of `kind`, by its own names (none before its first listing).
    fn names(&self, kind: Kind) -> Option<&Vec<String>> {
        match kind {
            Kind::Tool => self.tools.as_ref(),
            Kind::Resource => self.resources.as_ref(),
            Kind::Prompt => self.prompts.as_ref(),
        }
    }
}

/// A policy glob that matches no served tool.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UnmatchedGlob {
    /// The policy, as messages name it: where it is written, and its globs.
    pub policy: String,
    /// What the glob names: a tool, a resource or a prompt.
    pub kind: Kind,
    /// The glob that matches nothing.
    pub glob: String,
    /// A listed name it may have meant (`fs.write_file`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl UnmatchedGlob {
    /// Logs it: at `WARN`, or at `ERROR` when `[gateway] unmatched = "error"`.
    pub fn log(&self, mode: UnmatchedMode) {
        let meant = match self.kind {
            Kind::Tool => "the tool it meant runs",
            Kind::Resource => "the resource it meant is read",
            Kind::Prompt => "the prompt it meant is got",
        };
        match mode {
            UnmatchedMode::Warn => tracing::warn!("{self} (it guards nothing: {meant} under the default action)"),
            UnmatchedMode::Error => tracing::error!("{self} (it guards nothing: {meant} under the default action)"),
        }
    }
}

impl std::fmt::Display for UnmatchedGlob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let listed = match self.kind {
            Kind::Tool => "no listed tool and no agent",
            Kind::Resource => "no listed resource or resource template",
            Kind::Prompt => "no listed prompt",
        };
        write!(f, "{}: {:?} matches {listed}", self.policy, self.glob)?;
        if let Some(hint) = &self.hint {
            write!(f, "; did you mean {hint:?}?")?;
        }
        Ok(())
    }
}

/// Which policy globs match nothing, judged on what has been listed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Judgement {
    /// Globs that match no listed tool and no agent, and could match nothing an
    /// upstream not yet listed may list.
    pub unmatched: Vec<UnmatchedGlob>,
    /// Globs that match nothing yet, but name the prefix of an upstream that has not
    /// listed its tools yet.
    pub pending: Vec<UnmatchedGlob>,
}

impl Judgement {
    /// Each glob that matches nothing, and each that waits on an upstream that could
    /// not be listed, as a line that names its policy.
    pub fn problems(&self) -> Vec<String> {
        let mut problems: Vec<String> = self.unmatched.iter().map(ToString::to_string).collect();
        problems.extend(self.pending.iter().map(|p| {
            format!("{}: {:?} names an upstream that could not be listed; it was not checked", p.policy, p.glob)
        }));
        problems
    }

    /// How many policies have a glob that matches nothing.
    pub fn unmatched_policies(&self) -> usize {
        let mut policies: Vec<&str> = self.unmatched.iter().map(|u| u.policy.as_str()).collect();
        policies.dedup();
        policies.len()
    }
}

/// What the policies say about one tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decided<'a> {
    /// The action.
    pub action: Action,
    /// The policy that matched (`None`: the default).
    pub policy: Option<&'a Policy>,
    /// Where that policy is written (`hitl.toml:12`), when known.
    pub place: Option<&'a str>,
    /// That policy's [`Policy::key`].
    pub key: Option<&'a str>,
}

impl Policies {
    /// `policies` in file order over `gateway`'s default; a policy that matches
    /// nothing or offers no decision is refused here, with its position.
    pub fn new(policies: Vec<Policy>, gateway: GatewaySection) -> Result<Self, String> {
        for (i, policy) in policies.iter().enumerate() {
            let all = [&policy.tools, &policy.resources, &policy.prompts];
            if all.iter().all(|globs| globs.is_empty()) {
                return Err(format!(
                    "policy[{i}].tools: list at least one non-empty tool name or glob (or name resources or prompts)"
                ));
            }
            for (key, globs) in
                [("tools", &policy.tools), ("resources", &policy.resources), ("prompts", &policy.prompts)]
            {
                if globs.iter().any(String::is_empty) {
                    return Err(format!("policy[{i}].{key}: a name or glob is empty"));
                }
            }
            if policy.action == Action::Review && (!policy.resources.is_empty() || !policy.prompts.is_empty()) {
                return Err(format!(
                    "policy[{i}].action: a policy that names resources or prompts may only allow or deny (reading a resource or getting a prompt cannot be reviewed)"
                ));
            }
            if policy.rate_limit.is_some() && policy.action == Action::Deny {
                return Err(format!("policy[{i}].rate_limit: a deny policy admits no call to count"));
            }
            if (policy.when.is_some() || policy.rate_limit.is_some())
                && (!policy.resources.is_empty() || !policy.prompts.is_empty())
            {
                let key = if policy.when.is_some() { "when" } else { "rate_limit" };
                return Err(format!(
                    "policy[{i}].{key}: it is about tool calls; name resources and prompts in a policy of their own"
                ));
            }
            if policy.decisions.as_ref().is_some_and(Vec::is_empty) {
                return Err(format!("policy[{i}].decisions: a review needs at least one decision"));
            }
            for (field, entries) in [("callers", &policy.callers), ("approvers", &policy.approvers)] {
                for entry in entries.iter().flatten() {
                    let named = entry.strip_prefix("user:").or_else(|| entry.strip_prefix("group:"));
                    if named.is_none_or(str::is_empty) {
                        return Err(format!("policy[{i}].{field}: {entry:?} is not user:<id> or group:<name>"));
                    }
                }
            }
            if let Some(ttl) = policy.approval_ttl {
                if policy.action != Action::Review {
                    return Err(format!(
                        "policy[{i}].approval_ttl: only a policy with action = \"review\" has approvals to cover later calls"
                    ));
                }
                if !(1..=MAX_APPROVAL_TTL).contains(&ttl) {
                    return Err(format!(
                        "policy[{i}].approval_ttl: {ttl} is not between 1 and {MAX_APPROVAL_TTL} seconds (a year)"
                    ));
                }
                if policy.approval_scope.unwrap_or_default() == crate::cover::ApprovalScope::Call {
                    tracing::warn!(
                        "policy[{i}].approval_ttl: with approval_scope = \"call\" (the default) an approval covers its own call only; set approval_scope = \"arguments\" or \"tool\" to cover later calls"
                    );
                }
            } else if policy.approval_scope.is_some() {
                return Err(format!(
                    "policy[{i}].approval_scope: set approval_ttl (seconds) too; without it an approval covers its own call only"
                ));
            }
            if let Some(approvers) = &policy.approvers {
                if policy.action != Action::Review {
                    return Err(format!("policy[{i}].approvers: only a policy with action = \"review\" has approvers"));
                }
                if approvers.is_empty() {
                    return Err(format!("policy[{i}].approvers: name at least one approver, or leave the key out"));
                }
            }
        }
        let conditions = policies
            .iter()
            .enumerate()
            .map(|(i, policy)| {
                let Some(text) = &policy.when else { return Ok(None) };
                crate::when::Condition::compile(text).map(Some).map_err(|why| format!("policy[{i}].when: {why}"))
            })
            .collect::<Result<_, String>>()?;
        let keys = policies.iter().map(Policy::key).collect();
        Ok(Self { policies, conditions, keys, default_action: gateway.default_action, locations: Vec::new() })
    }

    /// Names each policy, in file order, by where it is written (`hitl.toml:12`).
    #[must_use]
    pub fn with_locations(mut self, locations: Vec<String>) -> Self {
        self.locations = locations;
        self
    }

    /// How messages name policy `index`: where it is written (else its position), and
    /// its globs.
    fn name(&self, index: usize) -> String {
        let globs = self.policies[index].label();
        match self.locations.get(index) {
            Some(at) => format!("policy at {at} ({globs})"),
            None => format!("policy[{index}] ({globs})"),
        }
    }

    /// Which globs match no tool of `upstreams` (as listed so far) and no agent named in
    /// `agents`. A glob is only `pending` while an upstream that has not listed yet
    /// could list a tool it matches; one without a `.` that is a listed tool's own
    /// name, or a listed name but for a character or two, gets the name as a hint.
    pub fn judge(&self, agents: &[String], upstreams: &[UpstreamTools]) -> Judgement {
        const KINDS: [Kind; 3] = [Kind::Tool, Kind::Resource, Kind::Prompt];
        // Policies name `<prefix><own name>`; hitl's own agents are tools only.
        let listed = KINDS.map(|kind| {
            let own = if kind == Kind::Tool { agents.to_vec() } else { Vec::new() };
            let served = upstreams
                .iter()
                .flat_map(|u| u.names(kind).into_iter().flatten().map(move |name| format!("{}{name}", u.prefix)));
            own.into_iter().chain(served).collect::<Vec<String>>()
        });
        let mut judgement = Judgement::default();
        for (index, policy) in self.policies.iter().enumerate() {
            for (kind, listed) in KINDS.into_iter().zip(&listed) {
                for glob in policy.globs(kind) {
                    if listed.iter().any(|name| glob_match(glob, name)) {
                        continue;
                    }
                    let found = UnmatchedGlob { policy: self.name(index), kind, glob: glob.clone(), hint: None };
                    if upstreams.iter().any(|u| u.names(kind).is_none() && may_name(glob, &u.prefix)) {
                        judgement.pending.push(found);
                    } else {
                        let hint = hint(glob, kind, upstreams, listed.iter());
                        judgement.unmatched.push(UnmatchedGlob { hint, ..found });
                    }
                }
            }
        }
        judgement
    }

    /// Whether a policy sets `approval_ttl` (an approval may cover later calls): its
    /// callers must then be known, or one anonymous caller's approval could cover
    /// another's calls.
    pub fn cover_later_calls(&self) -> bool {
        self.policies.iter().any(|p| p.approval_ttl.is_some())
    }

    /// Whether any policy limits its callers (then callers must be known: auth).
    pub fn limit_callers(&self) -> bool {
        self.policies.iter().any(|p| p.callers.is_some())
    }

    /// Every approver any policy names (each once), in file order.
    pub fn approvers(&self) -> Vec<String> {
        let mut all: Vec<String> = Vec::new();
        for approver in self.policies.iter().flat_map(|p| p.approvers.iter().flatten()) {
            if !all.contains(approver) {
                all.push(approver.clone());
            }
        }
        all
    }

    /// Whether any policy has approvers (then approvers must sign in: auth).
    pub fn have_approvers(&self) -> bool {
        self.policies.iter().any(|p| p.approvers.is_some())
    }

    /// Whether the caller named `principal`, in `groups`, may call `tool`: the first
    /// matching policy's `callers` decide (none: everyone may).
    pub fn may_call(&self, tool: &str, principal: Option<&str>, groups: &[String]) -> bool {
        let Some(callers) = self.decide(tool).policy.and_then(|p| p.callers.as_ref()) else { return true };
        names(callers, principal, groups)
    }

    /// Does some policy name `principal` (or one of `groups`) among its approvers?
    pub fn is_approver(&self, principal: Option<&str>, groups: &[String]) -> bool {
        self.policies.iter().filter_map(|p| p.approvers.as_ref()).any(|a| names(a, principal, groups))
    }

    /// The first policy that matches `tool`, or the default, whatever the call: what
    /// the arguments cannot change. It fails closed: a `review` or `deny` policy with
    /// `when` counts as matching, an `allow` one does not ([`Policies::decide_call`]
    /// decides a call).
    pub fn decide(&self, tool: &str) -> Decided<'_> {
        self.decide_for(Kind::Tool, tool)
    }

    /// Whether a call of `tool` is decided by what it carries: a policy with `when`
    /// matches its name before any policy without.
    pub fn conditional(&self, tool: &str) -> bool {
        let matching = self
            .policies
            .iter()
            .zip(&self.conditions)
            .filter(|(p, _)| p.globs(Kind::Tool).iter().any(|g| glob_match(g, tool)));
        matching.take_while(|(_, c)| c.is_some()).next().is_some()
    }

    /// The first policy whose globs match the call's tool and whose `when` is true
    /// for it (or absent), or the default. An expression that fails (a missing field, a
    /// wrong type) counts as true for a `review` or `deny` policy and false for an
    /// `allow` one, and is logged at `WARN` with the policy's place.
    pub fn decide_call(&self, call: &crate::when::CallFacts<'_>) -> Decided<'_> {
        self.explain_call(call, None)
    }

    /// [`Policies::decide_call`], telling `explained` why each earlier policy did not
    /// decide, and whether the one that did decided by its expression failing
    /// (`hitl policy explain`).
    pub fn explain_call<'a>(
        &'a self,
        call: &crate::when::CallFacts<'_>,
        mut explained: Option<&mut crate::when::Explanation>,
    ) -> Decided<'a> {
        let mut vars = None;
        for (index, (policy, condition)) in self.policies.iter().zip(&self.conditions).enumerate() {
            let mut skip = |reason: &str, detail: String| {
                if let Some(explained) = explained.as_deref_mut() {
                    let skipped = crate::when::Skipped { policy: self.place(index), reason: reason.to_owned(), detail };
                    explained.skipped.push(skipped);
                }
            };
            if !policy.tools.iter().any(|glob| glob_match(glob, call.tool)) {
                skip("glob", format!("{} does not match {:?}", policy.label(), call.tool));
                continue;
            }
            let decided = self.decided(index);
            let Some(condition) = condition else { return decided };
            let vars = vars.get_or_insert_with(|| call.variables());
            match condition.eval(vars) {
                Ok(true) => return decided,
                Ok(false) => skip("when_false", format!("when = {:?} is false", condition.text())),
                Err(why) => {
                    tracing::warn!(policy = %self.place(index), tool = call.tool, error = %why, "a policy's `when` failed; it counts as {}", if policy.action == Action::Allow { "false (allow fails closed)" } else { "true (review and deny fail closed)" });
                    if policy.action != Action::Allow {
                        if let Some(explained) = explained.as_deref_mut() {
                            explained.failed = Some(why);
                        }
                        return decided;
                    }
                    skip("error", why);
                }
            }
        }
        self.decide_for_default(Kind::Tool)
    }

    /// Where policy `index` is written (`hitl.toml:12`), else its position.
    pub fn place(&self, index: usize) -> String {
        self.locations.get(index).cloned().unwrap_or_else(|| format!("policy[{index}]"))
    }

    /// Where `policy` (one of these) is written.
    pub fn place_of(&self, policy: &Policy) -> Option<String> {
        let index = self.policies.iter().position(|p| std::ptr::eq(p, policy))?;
        Some(self.place(index))
    }

    /// The first policy whose `kind` globs match `name`, or the default. A resource or
    /// prompt is never reviewed: a default of `review` denies it.
    pub fn decide_for(&self, kind: Kind, name: &str) -> Decided<'_> {
        let matches = |p: &Policy| {
            p.globs(kind).iter().any(|glob| glob_match(glob, name)) && !(p.when.is_some() && p.action == Action::Allow)
        };
        match self.policies.iter().enumerate().find(|(_, p)| matches(p)) {
            Some((index, _)) => self.decided(index),
            None => self.decide_for_default(kind),
        }
    }

    /// The default action for `kind` (a resource or prompt is never reviewed).
    fn decide_for_default(&self, kind: Kind) -> Decided<'_> {
        let action = match (kind, self.default_action.unwrap_or(Action::Allow)) {
            (Kind::Resource | Kind::Prompt, Action::Review) => Action::Deny,
            (_, action) => action,
        };
        Decided { action, policy: None, place: None, key: None }
    }

    /// Policy `index` deciding.
    fn decided(&self, index: usize) -> Decided<'_> {
        let policy = &self.policies[index];
        Decided {
            action: policy.action,
            policy: Some(policy),
            place: self.locations.get(index).map(String::as_str),
            key: self.keys.get(index).map(String::as_str),
        }
    }

    /// Whether the caller named `principal`, in `groups`, may use resource or prompt
    /// `name` (of `kind`): allowed by its policy (or the default), and among the
    /// policy's `callers` when it names them.
    pub fn may_use(&self, kind: Kind, name: &str, principal: Option<&str>, groups: &[String]) -> bool {
        let decided = self.decide_for(kind, name);
        if decided.action != Action::Allow {
            return false;
        }
        let Some(callers) = decided.policy.and_then(|p| p.callers.as_ref()) else { return true };
        names(callers, principal, groups)
    }
}

/// Could `glob` match a name that begins with `prefix`? Compared up to the glob's
/// first wildcard.
/// Does one of `entries` (`user:<id>`, `group:<name>`) name `principal` or one of
/// `groups`?
fn names(entries: &[String], principal: Option<&str>, groups: &[String]) -> bool {
    entries.iter().any(|e| Some(e.as_str()) == principal || groups.contains(e))
}

fn may_name(glob: &str, prefix: &str) -> bool {
    let literal = glob.split(['*', '?']).next().unwrap_or_default();
    let wild = literal.len() < glob.len();
    if wild { literal.starts_with(prefix) || prefix.starts_with(literal) } else { literal.starts_with(prefix) }
}

/// The name a glob that matches nothing may have meant: a listed tool whose own name
/// it is (it lacks the prefix), else a served name one or two edits away (a typo).
fn hint<'a>(
    glob: &str,
    kind: Kind,
    upstreams: &[UpstreamTools],
    served: impl Iterator<Item = &'a String>,
) -> Option<String> {
    if glob.contains(['*', '?']) {
        return None;
    }
    // A URI holds dots of its own: any resource glob may lack the prefix.
    if kind == Kind::Resource || !glob.contains('.') {
        for upstream in upstreams {
            if upstream.names(kind).into_iter().flatten().any(|name| name == glob) {
                return Some(format!("{}{glob}", upstream.prefix));
            }
        }
    }
    served
        .map(|name| (edits(glob, name), name))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, n)| n.clone())
}

/// The edit distance of `a` and `b` (Levenshtein, on characters).
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substituted = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substituted.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

/// Does `name` match `glob` (`*` any run of characters, `?` exactly one)?
pub fn glob_match(glob: &str, name: &str) -> bool {
    let (glob, name): (Vec<char>, Vec<char>) = (glob.chars().collect(), name.chars().collect());
    // The classic two-pointer match: on a mismatch, let the last `*` take one more
    // character.
    let (mut g, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match glob.get(g) {
            Some('*') => {
                star = Some((g, n));
                g += 1;
            }
            Some(&c) if c == '?' || c == name[n] => {
                g += 1;
                n += 1;
            }
            _ => match star {
                Some((sg, sn)) => {
                    g = sg + 1;
                    n = sn + 1;
                    star = Some((sg, sn + 1));
                }
                None => return false,
            },
        }
    }
    glob[g..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn globs_match_as_a_shell_would() {
        let cases = [
            ("db.drop_*", "db.drop_partition", true),
            ("db.drop_*", "db.drop_", true),
            ("db.drop_*", "db.select", false),
            ("git.force_push", "git.force_push", true),
            ("git.force_push", "git.force_pushed", false),
            ("*", "anything", true),
            ("*.delete", "s3.delete", true),
            ("*.delete", "s3.delete.all", false),
            ("d?.x", "db.x", true),
            ("d?.x", "d.x", false),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
            ("", "", true),
            ("", "a", false),
        ];
        for (glob, name, expected) in cases {
            assert_eq!(glob_match(glob, name), expected, "{glob} ~ {name}");
        }
    }

    proptest! {
        #[test]
        fn a_name_matches_itself_and_a_star(name in "[a-z._]{0,12}") {
            prop_assert!(glob_match(&name, &name));
            prop_assert!(glob_match("*", &name));
            let prefix = format!("{}*", &name[..name.len() / 2]);
            prop_assert!(glob_match(&prefix, &name));
        }
    }

    fn policy(tools: &[&str], action: Action) -> Policy {
        Policy {
            tools: tools.iter().map(|t| (*t).to_owned()).collect(),
            resources: vec![],
            prompts: vec![],
            action,
            decisions: None,
            description: None,
            callers: None,
            approvers: None,
            when: None,
            rate_limit: None,
            approval_ttl: None,
            approval_scope: None,
        }
    }

    #[test]
    fn the_first_matching_policy_wins_and_the_default_covers_the_rest() {
        let policies = Policies::new(
            vec![policy(&["db.drop_*"], Action::Deny), policy(&["db.*"], Action::Review)],
            GatewaySection::default(),
        )
        .unwrap();
        assert_eq!(policies.decide("db.drop_table").action, Action::Deny);
        assert_eq!(policies.decide("db.select").action, Action::Review);
        let other = policies.decide("git.log");
        assert_eq!((other.action, other.policy), (Action::Allow, None));
        let strict =
            Policies::new(vec![], GatewaySection { default_action: Some(Action::Review), ..Default::default() })
                .unwrap();
        assert_eq!(strict.decide("git.log").action, Action::Review);
    }

    #[test]
    fn empty_globs_and_decisions_are_refused_with_their_position() {
        let no_tools = Policies::new(vec![policy(&[], Action::Allow)], GatewaySection::default()).unwrap_err();
        assert!(no_tools.starts_with("policy[0].tools"), "{no_tools}");
        let mut silent = policy(&["x"], Action::Review);
        silent.decisions = Some(vec![]);
        let error = Policies::new(vec![policy(&["a"], Action::Allow), silent], GatewaySection::default()).unwrap_err();
        assert!(error.starts_with("policy[1].decisions"), "{error}");
        assert_eq!(policy(&["x"], Action::Review).allowed(), ["approve", "edit", "reject", "respond"]);
    }
}

#[cfg(test)]
mod passed_through {
    use super::*;

    fn policy(resources: &[&str], prompts: &[&str], action: Action, callers: Option<&[&str]>) -> Policy {
        Policy {
            tools: vec![],
            resources: resources.iter().map(|g| (*g).to_owned()).collect(),
            prompts: prompts.iter().map(|g| (*g).to_owned()).collect(),
            action,
            decisions: None,
            description: None,
            callers: callers.map(|c| c.iter().map(|c| (*c).to_owned()).collect()),
            approvers: None,
            when: None,
            rate_limit: None,
            approval_ttl: None,
            approval_scope: None,
        }
    }

    #[test]
    fn resources_and_prompts_are_allowed_or_denied_by_their_own_globs() {
        let policies = Policies::new(
            vec![
                policy(&["fs.file:///secret/*"], &[], Action::Deny, None),
                policy(&["fs.*"], &["ev.admin-*"], Action::Allow, Some(&["group:ops"])),
                policy(&[], &["ev.*"], Action::Deny, None),
            ],
            GatewaySection::default(),
        )
        .unwrap();
        let ops = ["group:ops".to_owned()];
        assert!(!policies.may_use(Kind::Resource, "fs.file:///secret/key", Some("user:a"), &ops));
        assert!(policies.may_use(Kind::Resource, "fs.file:///notes", Some("user:a"), &ops));
        assert!(!policies.may_use(Kind::Resource, "fs.file:///notes", Some("user:b"), &[]), "not a caller");
        assert!(policies.may_use(Kind::Resource, "ev.demo://x", None, &[]), "unmatched: the default, allow");
        assert!(policies.may_use(Kind::Prompt, "ev.admin-report", None, &ops));
        assert!(!policies.may_use(Kind::Prompt, "ev.simple-prompt", None, &ops));
        assert_eq!(policies.decide("fs.read_file").policy, None, "resource globs judge no tool");
        let review =
            Policies::new(vec![], GatewaySection { default_action: Some(Action::Review), ..Default::default() })
                .unwrap();
        assert_eq!(review.decide_for(Kind::Prompt, "ev.x").action, Action::Deny, "a default review denies");
        assert_eq!(review.decide_for(Kind::Tool, "ev.x").action, Action::Review);
    }

    #[test]
    fn a_review_of_resources_or_prompts_and_a_policy_naming_nothing_are_refused() {
        let error =
            Policies::new(vec![policy(&["fs.*"], &[], Action::Review, None)], GatewaySection::default()).unwrap_err();
        assert!(error.starts_with("policy[0].action: a policy that names resources or prompts"), "{error}");
        let error =
            Policies::new(vec![policy(&[], &["ev.*"], Action::Review, None)], GatewaySection::default()).unwrap_err();
        assert!(error.starts_with("policy[0].action"), "{error}");
        let error = Policies::new(vec![policy(&[], &[], Action::Allow, None)], GatewaySection::default()).unwrap_err();
        assert!(error.starts_with("policy[0].tools: list at least one"), "{error}");
        let error =
            Policies::new(vec![policy(&[""], &[], Action::Allow, None)], GatewaySection::default()).unwrap_err();
        assert_eq!(error, "policy[0].resources: a name or glob is empty");
        assert_eq!(
            policy(&["fs.*"], &["ev.*"], Action::Deny, None).label(),
            r#"resources = ["fs.*"], prompts = ["ev.*"]"#
        );
    }

    #[test]
    fn resource_and_prompt_globs_are_judged_on_what_upstreams_list() {
        let policies = Policies::new(
            vec![
                policy(&["ev.demo://resource/static/*"], &["ev.simple-prompt"], Action::Deny, None),
                policy(&["demo://resource/static/document/architecture.md"], &[], Action::Deny, None),
                policy(
                    &["ev.demo://resource/dynamic/text/{resourceId}", "ev.demo://resorce/x"],
                    &[],
                    Action::Allow,
                    None,
                ),
                policy(&[], &["ev.simple_prompt", "simple-prompt", "ev.no-*"], Action::Allow, None),
                policy(&["db.*"], &["db.*"], Action::Deny, None),
            ],
            GatewaySection::default(),
        )
        .unwrap()
        .with_locations((1..=5).map(|i| format!("hitl.toml:{i}")).collect());
        let ev = UpstreamTools {
            prefix: "ev.".into(),
            tools: Some(vec!["echo".into()]),
            resources: Some(vec![
                "demo://resource/static/document/architecture.md".into(),
                "demo://resource/dynamic/text/{resourceId}".into(),
                "demo://resource/x".into(),
            ]),
            prompts: Some(vec!["simple-prompt".into()]),
        };
        let db = UpstreamTools { prefix: "db.".into(), tools: None, resources: None, prompts: None };
        let judged = policies.judge(&["greeter".into()], &[ev.clone(), db]);
        let shown: Vec<String> = judged.unmatched.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                r#"policy at hitl.toml:2 (resources = ["demo://resource/static/document/architecture.md"]): "demo://resource/static/document/architecture.md" matches no listed resource or resource template; did you mean "ev.demo://resource/static/document/architecture.md"?"#,
                r#"policy at hitl.toml:3 (resources = ["ev.demo://resource/dynamic/text/{resourceId}", "ev.demo://resorce/x"]): "ev.demo://resorce/x" matches no listed resource or resource template; did you mean "ev.demo://resource/x"?"#,
                r#"policy at hitl.toml:4 (prompts = ["ev.simple_prompt", "simple-prompt", "ev.no-*"]): "ev.simple_prompt" matches no listed prompt; did you mean "ev.simple-prompt"?"#,
                r#"policy at hitl.toml:4 (prompts = ["ev.simple_prompt", "simple-prompt", "ev.no-*"]): "simple-prompt" matches no listed prompt; did you mean "ev.simple-prompt"?"#,
                r#"policy at hitl.toml:4 (prompts = ["ev.simple_prompt", "simple-prompt", "ev.no-*"]): "ev.no-*" matches no listed prompt"#,
            ]
        );
        assert_eq!(judged.unmatched_policies(), 3);
        let kinds: Vec<Kind> = judged.unmatched.iter().map(|u| u.kind).collect();
        assert_eq!(kinds, [Kind::Resource, Kind::Resource, Kind::Prompt, Kind::Prompt, Kind::Prompt]);
        let pending: Vec<(&str, Kind)> = judged.pending.iter().map(|p| (p.glob.as_str(), p.kind)).collect();
        assert_eq!(pending, [("db.*", Kind::Resource), ("db.*", Kind::Prompt)], "db has not listed yet");
        let json = serde_json::to_value(&judged.unmatched[0]).unwrap();
        assert_eq!(json["kind"], "resource");
        // A tool glob is not satisfied by a resource or prompt of that name, nor the reverse.
        let crossed =
            Policies::new(vec![policy(&["ev.echo"], &["ev.echo"], Action::Deny, None)], GatewaySection::default())
                .unwrap();
        assert_eq!(crossed.judge(&[], &[ev]).unmatched.len(), 2);
    }
}

#[cfg(test)]
mod callers {
    use super::*;

    #[test]
    fn callers_limit_who_may_call_and_are_checked() {
        let ops = Policy {
            tools: vec!["db.*".into()],
            resources: vec![],
            prompts: vec![],
            action: Action::Review,
            decisions: None,
            description: None,
            callers: Some(vec!["group:ops".into(), "user:alice".into()]),
            approvers: None,
            when: None,
            rate_limit: None,
            approval_ttl: None,
            approval_scope: None,
        };
        let policies = Policies::new(vec![ops.clone()], GatewaySection::default()).unwrap();
        assert!(policies.limit_callers());
        assert!(policies.may_call("db.drop", Some("user:alice"), &[]));
        assert!(policies.may_call("db.drop", Some("user:bob"), &["group:ops".to_owned()]));
        assert!(!policies.may_call("db.drop", Some("user:bob"), &["group:dev".to_owned()]));
        assert!(!policies.may_call("db.drop", None, &[]), "no principal, no access");
        assert!(policies.may_call("git.log", None, &[]), "unmatched tools are open");
        let bad = Policy { callers: Some(vec!["alice".into()]), ..ops.clone() };
        let error = Policies::new(vec![bad], GatewaySection::default()).unwrap_err();
        assert_eq!(error, r#"policy[0].callers: "alice" is not user:<id> or group:<name>"#);
        let bad = Policy { approvers: Some(vec!["sre".into()]), ..ops.clone() };
        let error = Policies::new(vec![bad], GatewaySection::default()).unwrap_err();
        assert_eq!(error, r#"policy[0].approvers: "sre" is not user:<id> or group:<name>"#);
        let allow = Policy { approvers: Some(vec!["group:sre".into()]), action: Action::Allow, ..ops.clone() };
        let error = Policies::new(vec![allow], GatewaySection::default()).unwrap_err();
        assert!(error.starts_with("policy[0].approvers: only a policy with action"), "{error}");
        let none = Policy { approvers: Some(vec![]), ..ops };
        assert!(Policies::new(vec![none], GatewaySection::default()).is_err());
    }
}

#[cfg(test)]
mod unmatched {
    use super::*;

    fn policies(globs: &[&[&str]]) -> Policies {
        let list = globs
            .iter()
            .map(|tools| Policy {
                tools: tools.iter().map(|t| (*t).to_owned()).collect(),
                resources: vec![],
                prompts: vec![],
                action: Action::Review,
                decisions: None,
                description: None,
                callers: None,
                approvers: None,
                when: None,
                rate_limit: None,
                approval_ttl: None,
                approval_scope: None,
            })
            .collect();
        Policies::new(list, GatewaySection::default()).unwrap()
    }

    fn fs(tools: Option<&[&str]>) -> UpstreamTools {
        let owned = |names: &[&str]| names.iter().map(|s| (*s).to_owned()).collect();
        UpstreamTools { prefix: "fs.".into(), tools: tools.map(owned), resources: None, prompts: None }
    }

    #[test]
    fn typos_and_missing_prefixes_are_named_with_a_hint() {
        let policies = policies(&[&["fs.writefile"], &["write_file"], &["fs.write_*", "greeter"], &["nothing_*"]])
            .with_locations(vec!["hitl.toml:3".into(), "hitl.toml:7".into()]);
        let agents = vec!["greeter".to_owned()];
        let judged = policies.judge(&agents, &[fs(Some(&["write_file", "read_file"]))]);
        let shown: Vec<String> = judged.unmatched.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                r#"policy at hitl.toml:3 (tools = ["fs.writefile"]): "fs.writefile" matches no listed tool and no agent; did you mean "fs.write_file"?"#,
                r#"policy at hitl.toml:7 (tools = ["write_file"]): "write_file" matches no listed tool and no agent; did you mean "fs.write_file"?"#,
                r#"policy[3] (tools = ["nothing_*"]): "nothing_*" matches no listed tool and no agent"#,
            ]
        );
        assert_eq!(judged.unmatched_policies(), 3);
        assert!(judged.pending.is_empty());
    }

    #[test]
    fn an_upstream_not_listed_yet_leaves_its_globs_pending() {
        let policies = policies(&[&["fs.write_file"], &["*.delete"], &["write_file"], &["db.drop"]]);
        let judged = policies.judge(&[], &[fs(None)]);
        let pending: Vec<&str> = judged.pending.iter().map(|p| p.glob.as_str()).collect();
        assert_eq!(pending, ["fs.write_file", "*.delete"]);
        // No upstream lists unprefixed or other-prefixed names: judged at once.
        let unmatched: Vec<&str> = judged.unmatched.iter().map(|p| p.glob.as_str()).collect();
        assert_eq!(unmatched, ["write_file", "db.drop"]);
        let listed = policies.judge(&[], &[fs(Some(&["write_file"]))]);
        assert_eq!(
            listed.unmatched.iter().map(|p| p.glob.as_str()).collect::<Vec<_>>(),
            ["*.delete", "write_file", "db.drop"]
        );
        assert_eq!(listed.unmatched[1].hint.as_deref(), Some("fs.write_file"));
    }

    #[test]
    fn an_empty_prefix_may_name_anything() {
        let policies = policies(&[&["write_file"]]);
        let bare = UpstreamTools { prefix: String::new(), tools: None, resources: None, prompts: None };
        assert_eq!(policies.judge(&[], &[bare]).pending.len(), 1);
        assert_eq!(edits("fs.writefile", "fs.write_file"), 1);
        assert_eq!(edits("", "abc"), 3);
        assert_eq!(edits("kitten", "sitting"), 3);
    }
}

#[cfg(test)]
mod when_tests {
    use serde_json::{Map, Value, json};

    use super::*;
    use crate::when::CallFacts;

    fn policies(toml_like: &[(&str, Action, Option<&str>)]) -> Result<Policies, String> {
        let policies = toml_like
            .iter()
            .map(|(glob, action, when)| Policy {
                tools: vec![(*glob).to_owned()],
                resources: vec![],
                prompts: vec![],
                action: *action,
                decisions: None,
                description: None,
                callers: None,
                approvers: None,
                when: when.map(str::to_owned),
                rate_limit: None,
                approval_ttl: None,
                approval_scope: None,
            })
            .collect();
        Policies::new(policies, GatewaySection::default())
    }

    fn decide(policies: &Policies, tool: &str, args: Value, groups: &[&str]) -> (Action, Option<usize>) {
        let caller = hitl_graph::Caller {
            principal: Some("user:alice".into()),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            peer: None,
        };
        let args: Map<String, Value> = args.as_object().cloned().unwrap();
        let decided = policies.decide_call(&CallFacts::new(tool, "db", &args, Some(&caller)));
        let index = decided.policy.and_then(|p| policies.policies.iter().position(|q| std::ptr::eq(p, q)));
        (decided.action, index)
    }

    #[test]
    fn the_first_policy_whose_glob_matches_and_whose_when_is_true_decides() {
        let set = policies(&[
            ("db.drop_*", Action::Review, Some(r#"args.database == "prod" && !("group:dba" in caller.groups)"#)),
            ("payments.refund", Action::Review, Some("args.amount > 1000")),
            ("db.*", Action::Allow, None),
            ("payments.*", Action::Allow, None),
        ])
        .unwrap();
        assert_eq!(decide(&set, "db.drop_partition", json!({"database": "prod"}), &[]), (Action::Review, Some(0)));
        assert_eq!(
            decide(&set, "db.drop_partition", json!({"database": "prod"}), &["group:dba"]),
            (Action::Allow, Some(2))
        );
        assert_eq!(decide(&set, "db.drop_partition", json!({"database": "staging"}), &[]), (Action::Allow, Some(2)));
        assert_eq!(decide(&set, "payments.refund", json!({"amount": 50000}), &[]), (Action::Review, Some(1)));
        assert_eq!(decide(&set, "payments.refund", json!({"amount": 5}), &[]), (Action::Allow, Some(3)));
        assert!(set.conditional("db.drop_partition") && !set.conditional("db.select"));
        // Whatever the call, it fails closed: a reviewing `when` counts, an allowing one
        // does not.
        assert_eq!(set.decide("db.drop_partition").action, Action::Review);
        let allow_first =
            policies(&[("db.select", Action::Allow, Some("args.limit < 100")), ("db.*", Action::Review, None)])
                .unwrap();
        assert_eq!(allow_first.decide("db.select").action, Action::Review);
    }

    #[test]
    fn an_expression_that_fails_fails_closed() {
        let set = policies(&[
            ("db.select", Action::Allow, Some("args.limit < 100")),
            ("db.select", Action::Review, None),
            ("db.drop", Action::Review, Some("args.database == 'prod'")),
            ("db.*", Action::Allow, None),
        ])
        .unwrap();
        // A missing field: false for the allow policy (the review after it decides),
        // true for the review policy.
        assert_eq!(decide(&set, "db.select", json!({}), &[]), (Action::Review, Some(1)));
        assert_eq!(decide(&set, "db.select", json!({"limit": "many"}), &[]), (Action::Review, Some(1)));
        assert_eq!(decide(&set, "db.select", json!({"limit": 5}), &[]), (Action::Allow, Some(0)));
        assert_eq!(decide(&set, "db.drop", json!({}), &[]), (Action::Review, Some(2)));
        let mut explained = crate::when::Explanation::default();
        let args = Map::new();
        set.explain_call(&CallFacts::new("db.select", "db", &args, None), Some(&mut explained));
        assert_eq!(explained.skipped.len(), 1);
        assert_eq!((explained.skipped[0].reason.as_str(), &explained.failed), ("error", &None));
        let mut explained = crate::when::Explanation::default();
        set.explain_call(&CallFacts::new("db.drop", "db", &args, None), Some(&mut explained));
        assert!(explained.failed.is_some_and(|why| why.contains("database")), "the review decided by failing");
    }

    #[test]
    fn a_syntax_error_or_an_unknown_variable_is_refused_where_it_is_written() {
        let error = policies(&[("db.*", Action::Review, Some("args.amount >"))]).unwrap_err();
        assert!(error.starts_with("policy[0].when: not a CEL expression"), "{error}");
        assert!(error.contains("at 1:14 of the expression"), "{error}");
        let error = policies(&[("db.*", Action::Review, Some("arguments.amount > 1"))]).unwrap_err();
        assert_eq!(
            error,
            r#"policy[0].when: unknown variable "arguments" (an expression may name tool, upstream, args, caller, now)"#
        );
        let time = policies(&[(
            "db.*",
            Action::Deny,
            Some("now > timestamp('2020-01-01T00:00:00Z') && tool == 'db.x' && upstream == 'db'"),
        )])
        .unwrap();
        assert_eq!(decide(&time, "db.x", json!({}), &[]), (Action::Deny, Some(0)));
    }
}
