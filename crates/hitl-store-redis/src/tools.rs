//! The tools this store put in the set of tools (the `hitl_paused_calls` gauge's names),
//! so that a paused call of a tool already there does not add it again: one command
//! fewer in the script that counts each pause. A tool is added again once
//! [`REJOIN`] has passed, so a set lost meanwhile (`FLUSHDB`) names it again by then.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::Fast;

/// How long a tool this store added counts as in the set of tools.
pub(crate) const REJOIN: Duration = Duration::from_secs(60);

#[derive(Default)]
pub(crate) struct Joined {
    added: Mutex<HashMap<Box<str>, Instant, Fast>>,
}

impl Joined {
    /// `tool` if a pause of it should add it to the set of tools, else `""`.
    pub(crate) fn to_add<'t>(&self, tool: &'t str, now: Instant) -> &'t str {
        let added = self.added.lock().unwrap_or_else(PoisonError::into_inner);
        match added.get(tool) {
            Some(at) if now.saturating_duration_since(*at) < REJOIN => "",
            _ => tool,
        }
    }

    /// Notes that a script added `tool` (given by [`Joined::to_add`]) at `now`.
    pub(crate) fn added(&self, tool: &str, now: Instant) {
        if tool.is_empty() {
            return;
        }
        let mut added = self.added.lock().unwrap_or_else(PoisonError::into_inner);
        match added.get_mut(tool) {
            Some(at) => *at = now,
            None => {
                added.insert(tool.into(), now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_is_added_once_then_again_after_a_while() {
        let joined = Joined::default();
        let start = Instant::now();
        assert_eq!(joined.to_add("deploy", start), "deploy", "first added");
        assert_eq!(joined.to_add("deploy", start), "deploy", "until a script did");
        joined.added("deploy", start);
        assert_eq!(joined.to_add("deploy", start + REJOIN / 2), "", "then not again");
        assert_eq!(joined.to_add("other", start), "other", "another tool is its own");
        assert_eq!(joined.to_add("deploy", start + REJOIN), "deploy", "again after a while");
        joined.added("", start + REJOIN);
        assert_eq!(joined.to_add("", start + REJOIN), "", "nothing noted for no tool");
    }
}
