//! Integration tests of hitl-protocol: golden fixtures, envelope rules, header rules.

mod envelope;
mod golden;
mod headers;
mod meta;
