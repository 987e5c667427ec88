//! The whole server over real HTTP: the binary is started per test on a free port.

mod harness;
mod rules;
mod skeleton;
