//! Protocol revisions and the eras they belong to.

/// The modern revision: stateless, per-request `_meta`, `input_required` results.
pub const MODERN: &str = "2026-07-28";

/// The legacy revisions served through `initialize`, newest first.
pub const LEGACY: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

/// Every revision hitl serves, newest first, as `server/discover` and `-32022` list them.
pub const SUPPORTED: &[&str] = &[MODERN, "2025-11-25", "2025-06-18", "2025-03-26"];

/// The revision a legacy client is assumed to speak when it sends no version header.
pub const LEGACY_DEFAULT: &str = "2025-03-26";

/// Which set of rules a request is served under.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Era {
    /// 2026-07-28: stateless, every request carries its `_meta`.
    #[default]
    Modern,
    /// 2025-11-25 and earlier: the `initialize` handshake.
    Legacy,
}

/// Is `version` one of the legacy revisions (or an older date)?
///
/// Versions are dates, so an unknown version earlier than the modern one is legacy and
/// anything else (a later date, or not a date at all) is treated as modern, so that it
/// gets the modern `-32022` error.
pub fn era_of(version: &str) -> Era {
    let is_date = version.len() == 10
        && version.bytes().enumerate().all(|(i, b)| if i == 4 || i == 7 { b == b'-' } else { b.is_ascii_digit() });
    if is_date && version < MODERN { Era::Legacy } else { Era::Modern }
}

/// The legacy revision to answer `initialize` with: the requested one when served,
/// else the newest legacy revision.
pub fn negotiate_legacy(requested: &str) -> &'static str {
    LEGACY.iter().copied().find(|v| *v == requested).unwrap_or(LEGACY[0])
}
