//! The data-driven fixture suite of hitl-schema, one `check` helper per boundary, and
//! property tests.

mod fixtures;
mod props;
mod review;
