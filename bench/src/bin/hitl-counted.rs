//! The `hitl` program with a counting allocator, for `cargo xtask bench`: how many heap
//! allocations a round makes and how much heap a paused call holds, exact where RSS is
//! not. With `HITL_COUNTS_LISTEN=ADDR` set, every connection to ADDR reads one line:
//! `<allocations> <bytes allocated> <bytes live>` (reallocations count as allocations).
//! It allocates through the system allocator, not mimalloc: the counts are the same.

use std::alloc::System;
use std::io::Write as _;

use anyhow::Context as _;
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static COUNTED: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn main() -> anyhow::Result<()> {
    if let Ok(addr) = std::env::var("HITL_COUNTS_LISTEN") {
        let listener = std::net::TcpListener::bind(&addr).with_context(|| format!("binding {addr}"))?;
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                let s = COUNTED.stats();
                // A reallocation's growth or shrinking is in these two already.
                let live = s.bytes_allocated as i64 - s.bytes_deallocated as i64;
                let line = format!("{} {} {live}\n", s.allocations + s.reallocations, s.bytes_allocated);
                let _ = stream.write_all(line.as_bytes());
            }
        });
    }
    hitl_server::main()
}
