//! `cargo run -p axum-embed [ADDR]`: the app of `lib.rs` on ADDR (default 127.0.0.1:8125).

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:8125".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let local = listener.local_addr()?;
    println!("axum-embed listening on http://{local}/ (hitl at /hitl/mcp)");
    axum::serve(listener, axum_embed::app(&format!("http://{local}/hitl")))
        .with_graceful_shutdown(async { drop(tokio::signal::ctrl_c().await) })
        .await?;
    Ok(())
}
