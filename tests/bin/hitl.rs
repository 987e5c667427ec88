//! The `hitl` program, built for the end-to-end tests.

fn main() -> anyhow::Result<()> {
    hitl_server::main()
}
