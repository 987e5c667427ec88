//! The `choose_region` tool on rmcp 3.11, written the way its documentation and MRTR
//! tests show a multi-round-trip tool (protocol 2026-07-28): the `#[tool]` method reads
//! the client's answers with the `InputResponses` extractor and, without one, returns
//! an `InputRequiredResult` with one form elicitation. Served by `StreamableHttpService`
//! (stateless, JSON responses) under axum on 127.0.0.1 (a free port); prints its URL on
//! the first line of stdout. A peer of hitl in `cargo xtask bench --peers`.

use std::sync::Arc;

use rmcp::handler::server::tool::InputResponses;
use rmcp::model::{
    CallToolResponse, CallToolResult, ElicitRequest, ElicitRequestParams, InputRequest, InputRequests,
    InputRequiredResult, ServerCapabilities, ServerConfig,
};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler, tool, tool_handler, tool_router};
use serde_json::json;

#[derive(Clone)]
struct ChooseRegion;

#[tool_router]
impl ChooseRegion {
    /// Asks where to deploy, then says so.
    #[tool(description = "Asks where to deploy, then says so.")]
    async fn choose_region(&self, InputResponses(responses): InputResponses) -> Result<CallToolResponse, ErrorData> {
        let given = responses.as_ref().and_then(|r| r.get("region")).and_then(|r| r["content"]["response"].as_str());
        let Some(region) = given else {
            let schema =
                json!({"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"]});
            let question = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: "Which region should the service deploy to?".into(),
                requested_schema: serde_json::from_value(schema)
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?,
            };
            let mut requests = InputRequests::new();
            requests.insert("region".to_owned(), InputRequest::Elicitation(ElicitRequest::new(question)));
            return Ok(InputRequiredResult::new(Some(requests), None).into());
        };
        let region = json!({"region": region});
        Ok(CallToolResult::structured(region).into())
    }
}

#[tool_handler]
impl ServerHandler for ChooseRegion {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let service = StreamableHttpService::new(
        || Ok(ChooseRegion),
        Arc::new(NeverSessionManager::default()),
        StreamableHttpServerConfig::default().with_legacy_session_mode(false).with_json_response(true),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    // Stops on SIGTERM by returning, so that a build instrumented for profile-guided
    // optimization writes its counts as it exits (`cargo xtask bench --peers`); the
    // handler is in place before the address says the server is up.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("http://{}/mcp", listener.local_addr()?);
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            terminate.recv().await;
        })
        .await
}
