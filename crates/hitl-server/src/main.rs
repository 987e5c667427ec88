//! `hitl`: human-in-the-loop over MCP for agent graphs.

fn main() -> anyhow::Result<()> {
    hitl_server::main()
}
