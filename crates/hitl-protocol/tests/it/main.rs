//! Integration tests of hitl-protocol: golden fixtures, envelope rules, header rules,
//! what a person is shown of a value.

mod display;
mod envelope;
mod golden;
mod headers;
mod meta;
