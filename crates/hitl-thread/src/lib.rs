//! The thread record of hitl and the ports of the stores that keep it.
//!
//! Between rounds, nothing of a paused call lives in a process but its [`Thread`]
//! record in a store. This crate holds that record (its format, its questions, its
//! claim, the proof of its round's token) and the four ports a store implements:
//!
//! - [`ThreadStore`]: load, save (a compare-and-set on the version) and delete a
//!   thread, and, as opt-in hooks, claim a round in the step that loads it;
//! - [`PausedLedger`]: the paused calls counted per owner and in all, and creating and
//!   finishing a paused call in one step;
//! - [`Notes`]: one-shot notes between requests and single-use marks;
//! - [`Records`]: the approvals listing and the audit trail.
//!
//! [`Store`] is the four at once. [`MemoryStore`] implements them in this process;
//! `hitl-store-redis` on Redis. [`MeteredStore`] times any of them. A store written
//! elsewhere runs the `conformance` suite (feature `test-support`) in its tests.
//! The round logic that uses the record is `hitl-interrupt`'s.
//!
//! ```
//! use hitl_thread::{MemoryStore, THREAD_FORMAT, Thread, ThreadState, ThreadStore};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = MemoryStore::default();
//! let thread = Thread {
//!     format: THREAD_FORMAT,
//!     id: "01a22c5e-5403-766d-9808-1b6b86b6c2c2".into(),
//!     version: 1,
//!     tool: "choose_region".into(),
//!     args_digest: hitl_thread::digest_hex_shared(&serde_json::json!({})),
//!     principal: None,
//!     owner: None,
//!     state: ThreadState::Finished,
//!     last: None,
//!     task: None,
//!     expires_at_ms: u64::MAX,
//! };
//! store.save(thread.clone(), None).await.unwrap();
//! assert_eq!(store.load(&thread.id).await.unwrap(), Some(thread.clone()));
//! // A save is a compare-and-set on the version: a stale one loses.
//! assert!(store.save(Thread { version: 2, ..thread }, Some(7)).await.is_err());
//! # });
//! ```

#[cfg(any(test, feature = "test-support"))]
pub mod conformance;
mod digest;
mod memory;
mod metered;
mod packed;
mod records;
mod store;
mod thread;

pub use digest::{
    canonical, digest_hex, digest_hex_of_entries, digest_hex_shared, hex, prefixed_digest_of_entries, short_digest,
};
pub use memory::{FinishedLimits, MemoryStore};
pub use metered::MeteredStore;
pub use packed::{pack, packed_start, unpack};
pub use records::{AUDIT_KEPT, AUDIT_KEPT_IN_MEMORY, AuditLine, Records};
pub use store::{
    BoundCall, ClaimAttempt, Clock, LimitReached, Loaded, ManualClock, Notes, PausedLedger, PausedLimits, SaveError,
    Sleep, Store, StoreError, SystemClock, ThreadStore, create_paused_in_steps, save_finished_in_steps,
};
pub use thread::{
    About, CLAIM_BESIDE_FORMAT, Claim, Last, LastOutcome, Page, PageKind, Paused, Question, QuestionKind, Review,
    ReviewMode, Round, THREAD_FORMAT, TaskState, Thread, ThreadState, binding_digest, format_of, proof,
};
