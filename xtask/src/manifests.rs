//! The Kubernetes manifests of `deploy/kubernetes`, checked against the Kubernetes API
//! schemas by `kubernetes-validate` (PyPI, pinned, in a virtualenv of its own under
//! `target/`: its `jsonschema` and `referencing` need not agree with the MCP SDK's).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, ensure};

use crate::{run, workspace_root};

/// The validator, and the Kubernetes version whose schemas it checks against.
const KUBERNETES_VALIDATE: &str = "kubernetes-validate==1.37.0";
const KUBERNETES_VERSION: &str = "1.37.0";

/// `target/kubernetes-validate` with the pinned validator; returns its program.
pub(crate) fn validator() -> Result<PathBuf, String> {
    let venv = workspace_root().join("target/kubernetes-validate");
    let program = venv.join("bin/kubernetes-validate");
    let (name, version) = KUBERNETES_VALIDATE.split_once("==").expect("a pinned requirement");
    let installed = || {
        Command::new(venv.join("bin/python"))
            .args(["-c", &format!("import importlib.metadata as m; assert m.version({name:?}) == {version:?}")])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
            && program.is_file()
    };
    if installed() {
        return Ok(program);
    }
    let status = Command::new("python3").arg("-m").arg("venv").arg(&venv).status();
    if !status.is_ok_and(|s| s.success()) {
        return Err("python3 -m venv failed (is python3 with venv installed?)".into());
    }
    eprintln!("installing {KUBERNETES_VALIDATE} into {}", venv.display());
    let status =
        Command::new(venv.join("bin/python")).args(["-m", "pip", "install", "-q", KUBERNETES_VALIDATE]).status();
    if !status.is_ok_and(|s| s.success()) || !installed() {
        return Err(format!("pip install {KUBERNETES_VALIDATE} failed (no access to PyPI?)"));
    }
    Ok(program)
}

/// Every manifest of `deploy/kubernetes`, strictly (an unknown field is an error).
pub(crate) fn validate(program: &Path) -> anyhow::Result<()> {
    let dir = workspace_root().join("deploy/kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|f| f.extension().is_some_and(|e| e == "yaml"));
    files.sort();
    ensure!(!files.is_empty(), "no manifests in {}", dir.display());
    let mut command = Command::new(program);
    command.args(["--strict", "--quiet", "--kubernetes-version", KUBERNETES_VERSION]).args(&files);
    run(command).context("the Kubernetes manifests of deploy/kubernetes do not validate")?;
    eprintln!("{} Kubernetes manifests validate against the {KUBERNETES_VERSION} schemas", files.len());
    Ok(())
}
