//! `[[policy]]`: which tools may run, which need a person's review, which never run.
//! The first policy whose globs match a tool's listed name decides; a tool no policy
//! matches gets `[gateway] default_action` (itself `allow` by default).

pub use hitl_schema::Decision;
use serde::Deserialize;

/// What a policy does with the calls it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
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
    pub tools: Vec<String>,
    /// What happens to matching calls.
    pub action: Action,
    /// The review's allowed decisions (absent: all four).
    #[serde(default)]
    pub decisions: Option<Vec<Decision>>,
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
}

impl Policy {
    /// The decisions a review under this policy offers.
    pub fn allowed(&self) -> Vec<&'static str> {
        self.decisions.as_deref().unwrap_or(&Decision::ALL).iter().map(|d| d.as_str()).collect()
    }

    /// How the policy is named in errors: its globs.
    pub fn label(&self) -> String {
        format!("tools = {:?}", self.tools)
    }
}

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
}

/// The policies in order, and the default.
#[derive(Debug, Clone, Default)]
pub struct Policies {
    policies: Vec<Policy>,
    default_action: Option<Action>,
}

/// What the policies say about one tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decided<'a> {
    /// The action.
    pub action: Action,
    /// The policy that matched (`None`: the default).
    pub policy: Option<&'a Policy>,
}

impl Policies {
    /// `policies` in file order over `gateway`'s default; a policy that matches
    /// nothing or offers no decision is refused here, with its position.
    pub fn new(policies: Vec<Policy>, gateway: GatewaySection) -> Result<Self, String> {
        for (i, policy) in policies.iter().enumerate() {
            if policy.tools.is_empty() || policy.tools.iter().any(String::is_empty) {
                return Err(format!("policy[{i}].tools: list at least one non-empty tool name or glob"));
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
            if let Some(approvers) = &policy.approvers {
                if policy.action != Action::Review {
                    return Err(format!("policy[{i}].approvers: only a policy with action = \"review\" has approvers"));
                }
                if approvers.is_empty() {
                    return Err(format!("policy[{i}].approvers: name at least one approver, or leave the key out"));
                }
            }
        }
        Ok(Self { policies, default_action: gateway.default_action })
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
        callers.iter().any(|c| Some(c.as_str()) == principal || groups.contains(c))
    }

    /// The first policy that matches `tool`, or the default.
    pub fn decide(&self, tool: &str) -> Decided<'_> {
        match self.policies.iter().find(|p| p.tools.iter().any(|glob| glob_match(glob, tool))) {
            Some(policy) => Decided { action: policy.action, policy: Some(policy) },
            None => Decided { action: self.default_action.unwrap_or(Action::Allow), policy: None },
        }
    }
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
            action,
            decisions: None,
            description: None,
            callers: None,
            approvers: None,
        }
    }

    #[test]
    fn the_first_matching_policy_wins_and_the_default_covers_the_rest() {
        let policies = Policies::new(
            vec![policy(&["db.drop_*"], Action::Deny), policy(&["db.*"], Action::Review)],
            GatewaySection { default_action: None, hold_timeout: None },
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
mod callers {
    use super::*;

    #[test]
    fn callers_limit_who_may_call_and_are_checked() {
        let ops = Policy {
            tools: vec!["db.*".into()],
            action: Action::Review,
            decisions: None,
            description: None,
            callers: Some(vec!["group:ops".into(), "user:alice".into()]),
            approvers: None,
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
