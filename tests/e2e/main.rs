//! The whole server over real HTTP: the binary is started per test on a free port.

mod admin;
mod approvals;
mod auth;
mod browser;
mod config;
mod declared;
mod edge;
mod fixtures;
mod gateway;
mod harness;
mod metrics;
mod push;
mod python_sdk;
mod redis_faults;
mod redis_tls;
mod replicas;
mod review;
mod rules;
mod skeleton;
mod tasks;
mod telemetry;
mod trust;
mod trust_display;
mod trust_pages;
mod trust_sessions;
mod upstream;
