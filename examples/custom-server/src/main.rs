//! A program that serves its own agents with hitl, wrapped in its own tower layer: the
//! embeddable server's example. Run it with `cargo run -p custom-server [ADDR]`.

use std::task::{Context, Poll};

use tower::{Layer, Service};

/// Stamps `x-served-by: custom-server` on every MCP response: a tower layer of the
/// program's own.
#[derive(Clone)]
struct StampLayer;

impl<S> Layer<S> for StampLayer {
    type Service = Stamp<S>;

    fn layer(&self, inner: S) -> Stamp<S> {
        Stamp { inner }
    }
}

#[derive(Clone)]
struct Stamp<S> {
    inner: S,
}

impl<S, Req, B> Service<Req> for Stamp<S>
where
    S: Service<Req, Response = http::Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<B>;
    type Error = S::Error;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<http::Response<B>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        // Call the service that was polled ready, leaving a fresh clone in its place.
        let clone = self.inner.clone();
        let response = std::mem::replace(&mut self.inner, clone).call(request);
        Box::pin(async move {
            let mut response = response.await?;
            response.headers_mut().insert("x-served-by", http::HeaderValue::from_static("custom-server"));
            Ok(response)
        })
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:8124".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("custom-server listening on http://{}/mcp", listener.local_addr()?);
    let server = hitl_server::Server::builder().agent(custom_agents::order_coffee()).layer(StampLayer).build();
    server.serve(listener, async { drop(tokio::signal::ctrl_c().await) }).await?;
    Ok(())
}
