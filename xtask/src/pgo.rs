//! Profile-guided release builds, as `cargo xtask bench --peers` measures them.
//!
//! A round runs a long path of code about once (hyper, tower, our crates, serde), so
//! its time goes to instruction-cache misses and mispredicted branches more than to
//! its instructions. The compiler lays that path out well only when it knows which
//! branches a round takes: a build instrumented with `-Cprofile-generate` serves a
//! training load, `llvm-profdata` merges what it counted, and the release build
//! made again with `-Cprofile-use` puts the path's code together and the rest aside.
//!
//! ```text
//! let hitl = pgo::build(&pgo::Build::HITL, |program| train(program))?;
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::{cargo, ensure_apt, on_path, run, workspace_root};

/// What to build: its name (its folder under `target/pgo`), what `cargo build
/// --release` is told beside the target folder, and the program it makes.
pub(crate) struct Build {
    pub(crate) name: &'static str,
    pub(crate) args: &'static [&'static str],
    pub(crate) program: &'static str,
}

impl Build {
    /// The `hitl` binary of the workspace.
    pub(crate) const HITL: Self = Self { name: "hitl", args: &["-p", "hitl-server", "--bin", "hitl"], program: "hitl" };
    /// The rmcp peer, its own Cargo project.
    pub(crate) const RMCP: Self = Self {
        name: "rmcp",
        args: &["--locked", "--manifest-path", "bench/peers/rmcp/Cargo.toml"],
        program: "choose-region-rmcp",
    };
}

/// `build` made twice: instrumented, trained by `train` (given the instrumented
/// program, which must exit normally for its counts to be written), then optimized
/// with the merged profile. The optimized program.
///
/// The flags reach build scripts and proc macros too (no `--target`): the counts they
/// write while building are thrown away before the training.
pub(crate) fn build(build: &Build, train: impl FnOnce(&Path) -> anyhow::Result<()>) -> anyhow::Result<PathBuf> {
    let profdata = llvm_profdata()?;
    let root = workspace_root();
    let dir = root.join("target/pgo").join(build.name);
    let profiles = dir.join("profiles");
    let compile = |kind: &str, flag: String| -> anyhow::Result<PathBuf> {
        let target = dir.join(kind);
        let mut cargo = cargo();
        cargo.current_dir(&root).args(["build", "--release"]).args(build.args).arg("--target-dir").arg(&target);
        // Only the flag (encoded: a path with a space stays one argument); a RUSTFLAGS
        // of the caller's would change what is measured.
        cargo.env("CARGO_ENCODED_RUSTFLAGS", flag).env_remove("RUSTFLAGS");
        run(cargo)?;
        Ok(target.join("release").join(build.program))
    };
    let instrumented = compile("instrumented", format!("-Cprofile-generate={}", profiles.display()))?;
    // Build scripts and proc macros were instrumented too, and wrote their counts
    // while building: only the training's are wanted.
    let _ = std::fs::remove_dir_all(&profiles);
    std::fs::create_dir_all(&profiles)?;
    train(&instrumented).with_context(|| format!("training {}", build.name))?;
    let raw: Vec<PathBuf> = std::fs::read_dir(&profiles)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|e| e == "profraw"))
        .collect();
    if raw.is_empty() {
        bail!("training {} wrote no profile into {} (did the program exit normally?)", build.name, profiles.display());
    }
    let merged = dir.join("merged.profdata");
    let mut merge = Command::new(profdata);
    merge.arg("merge").arg("-o").arg(&merged).args(&raw);
    run(merge)?;
    compile("optimized", format!("-Cprofile-use={}", merged.display()))
}

/// The `llvm-profdata` of the LLVM that rustc is built on (its profiles are read only
/// by the same major version), installed with apt-get (`llvm-N`) when missing.
fn llvm_profdata() -> anyhow::Result<PathBuf> {
    let version = Command::new("rustc").arg("-vV").output().context("running rustc -vV")?;
    let major = llvm_major(&String::from_utf8_lossy(&version.stdout)).context("rustc -vV names no LLVM version")?;
    let program = format!("llvm-profdata-{major}");
    let found = || {
        if on_path(&program) {
            Some(PathBuf::from(&program))
        } else {
            Some(PathBuf::from(format!("/usr/lib/llvm-{major}/bin/llvm-profdata"))).filter(|p| p.is_file())
        }
    };
    if let Some(path) = found() {
        return Ok(path);
    }
    ensure_apt(&program, &format!("llvm-{major}"))?;
    found().with_context(|| format!("{program} is not installed (apt-get install llvm-{major})"))
}

/// The major version of `LLVM version: 22.1.2` in rustc's `-vV`.
fn llvm_major(verbose: &str) -> Option<u32> {
    verbose.lines().find_map(|line| line.strip_prefix("LLVM version:"))?.trim().split('.').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_llvm_major_is_read_from_rustcs_verbose_version() {
        let verbose = "rustc 1.95.0 (59807616e 2026-04-14)\nbinary: rustc\nhost: x86_64-unknown-linux-gnu\nrelease: 1.95.0\nLLVM version: 22.1.2\n";
        assert_eq!(llvm_major(verbose), Some(22));
        assert_eq!(llvm_major("rustc 1.95.0\n"), None, "no LLVM line");
        assert_eq!(llvm_major("LLVM version: x.1\n"), None, "not a number");
    }
}
