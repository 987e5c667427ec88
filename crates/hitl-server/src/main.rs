//! `hitl`: human-in-the-loop over MCP for agent graphs.

/// A round allocates and frees many small JSON values; mimalloc is much faster at that
/// than the system allocator (see `cargo xtask bench`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    hitl_server::main()
}
