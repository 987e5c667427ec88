//! An axum app with routes of its own that mounts hitl under `/hitl`: the MCP endpoint
//! at `/hitl/mcp`, the probes at `/hitl/healthz` and `/hitl/livez`, hitl's pages at
//! `/hitl/approvals`, `/hitl/login`, … beside the app's `/` and `/orders`. The pages'
//! base URL names the mount, so their links, redirects and cookies stay under it. Run
//! it with `cargo run -p axum-embed [ADDR]`.
//!
//! ```no_run
//! # async fn run() -> anyhow::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8125").await?;
//! let base = format!("http://{}/hitl", listener.local_addr()?);
//! axum::serve(listener, axum_embed::app(&base)).await?;
//! # Ok(())
//! # }
//! ```

use axum::Router;
use axum::routing::get;

/// The app: its own routes, and hitl (serving the `order_coffee` agent, with its
/// pages) under `/hitl`, which `hitl_url` names (`http://127.0.0.1:8125/hitl`).
pub fn app(hitl_url: &str) -> Router {
    let hitl = hitl_server::Server::builder()
        .agent(custom_agents::order_coffee())
        .pages(hitl_server::PagesConfig::new(hitl_url))
        .build();
    Router::new()
        .route("/", get(|| async { "the coffee shop's own app; MCP is at /hitl/mcp\n" }))
        .route("/orders", get(|| async { "[]" }))
        // hitl sees paths without the prefix (`/mcp`), as axum's nest_service gives them.
        .nest_service("/hitl", hitl.into_app(None))
}
