//! What a reload of the server's configuration changes in the pages while they serve:
//! where notifications go, who may read the audit trail, and who decides a call that
//! paused under earlier rules.

use std::sync::{Arc, RwLock};

use hitl_interrupt::PageView;

use crate::notify::Target;

/// The approvers the rules in force name for a paused call (none: the approvers named
/// when it paused still decide).
pub type ApproversFn = Arc<dyn Fn(&PageView) -> Option<Vec<String>> + Send + Sync>;

/// The pages' part of a configuration that a reload replaces whole.
#[derive(Clone, Default)]
pub struct Reloaded {
    /// The `[[notify]]` webhooks.
    pub notify: Vec<Target>,
    /// Who may read `GET /api/audit` (every policy's approvers).
    pub auditors: Vec<String>,
    /// Who decides a call now; see [`ApproversFn`].
    pub approvers: Option<ApproversFn>,
    /// `[slack] users` in force (none: as the pages were set up with).
    pub slack_users: Option<std::collections::BTreeMap<String, crate::slack::SlackUser>>,
}

impl std::fmt::Debug for Reloaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloaded").field("notify", &self.notify.len()).field("auditors", &self.auditors).finish()
    }
}

/// A handle on the pages' [`Reloaded`] part ([`crate::Pages::reload`]): each request
/// and notification reads what is in force when it starts.
#[derive(Clone, Debug)]
pub struct Reload(Arc<RwLock<Arc<Reloaded>>>);

impl Reload {
    pub(crate) fn new(reloaded: Reloaded) -> Self {
        Self(Arc::new(RwLock::new(Arc::new(reloaded))))
    }

    /// What is in force now.
    pub fn now(&self) -> Arc<Reloaded> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Puts `reloaded` in force.
    pub fn set(&self, reloaded: Reloaded) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(reloaded);
    }

    /// Who decides the paused call of `view`: the approvers the rules in force name,
    /// else those named when it paused.
    pub(crate) fn approvers(&self, view: &PageView) -> Vec<String> {
        self.now().approvers.as_ref().and_then(|now| now(view)).unwrap_or_else(|| view.approvers().to_vec())
    }
}
