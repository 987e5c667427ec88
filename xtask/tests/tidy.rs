//! Tidy checks: the crate layering of docs/ARCHITECTURE.md and the crate docs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// Every library crate under `crates/`, lowest layer first, in the order of the table
/// of docs/ARCHITECTURE.md: a crate depends only on crates listed before it.
const LIBRARIES: &[&str] = &[
    "hitl-protocol",
    "hitl-tls",
    "hitl-http",
    "hitl-schema",
    "hitl-graph",
    "hitl-model",
    "hitl-thread",
    "hitl-interrupt",
    "hitl-store-redis",
    "hitl-tower",
    "hitl-auth",
    "hitl-pages",
    "hitl-toolcall",
    "hitl-agents",
    "hitl-upstream",
    "hitl-gateway",
    "hitl-declared",
    "hitl-server",
];

/// Every dependency one workspace crate may have on another (normal or dev), as in
/// docs/ARCHITECTURE.md. Any other edge fails, and so does an entry no crate uses.
const ALLOWED_EDGES: &[(&str, &[&str])] = &[
    ("hitl-protocol", &[]),
    ("hitl-tls", &[]),
    ("hitl-http", &["hitl-protocol"]),
    ("hitl-schema", &["hitl-protocol"]),
    ("hitl-graph", &[]),
    ("hitl-thread", &["hitl-protocol", "hitl-graph"]),
    ("hitl-interrupt", &["hitl-protocol", "hitl-schema", "hitl-graph", "hitl-thread"]),
    ("hitl-store-redis", &["hitl-thread"]),
    ("hitl-tower", &["hitl-protocol", "hitl-http", "hitl-schema", "hitl-graph", "hitl-interrupt"]),
    ("hitl-auth", &["hitl-protocol", "hitl-http", "hitl-tls"]),
    (
        "hitl-pages",
        &["hitl-protocol", "hitl-http", "hitl-tls", "hitl-graph", "hitl-thread", "hitl-interrupt", "hitl-auth"],
    ),
    ("hitl-toolcall", &["hitl-schema", "hitl-graph", "hitl-model"]),
    ("hitl-agents", &["hitl-schema", "hitl-graph", "hitl-model", "hitl-toolcall"]),
    ("hitl-upstream", &["hitl-protocol", "hitl-tls"]),
    ("hitl-model", &["hitl-tls"]),
    ("hitl-gateway", &["hitl-protocol", "hitl-schema", "hitl-graph", "hitl-upstream"]),
    ("hitl-declared", &["hitl-schema", "hitl-graph", "hitl-toolcall", "hitl-model", "hitl-gateway"]),
    (
        "hitl-server",
        &[
            "hitl-protocol",
            "hitl-graph",
            "hitl-interrupt",
            "hitl-store-redis",
            "hitl-tower",
            "hitl-auth",
            "hitl-pages",
            "hitl-agents",
            "hitl-gateway",
            "hitl-declared",
            "hitl-upstream",
            "hitl-tls",
        ],
    ),
    ("hitl-e2e", &["hitl-graph", "hitl-server", "hitl-upstream", "hitl-model"]),
    ("hitl-bench", &["hitl-server", "hitl-store-redis"]),
    ("custom-agents", &["hitl-graph"]),
    ("custom-server", &["hitl-server", "custom-agents"]),
    ("axum-embed", &["hitl-server", "custom-agents"]),
    ("custom-store", &["hitl-thread", "hitl-server", "custom-agents"]),
    ("xtask", &[]),
];

/// Crates a crate must not reach, even transitively, through normal dependencies.
const FORBIDDEN: &[(&str, &[&str])] = &[
    ("hitl-protocol", &["tokio", "tower", "hyper", "redis"]),
    // The HTTPS connector names no hitl crate: every HTTP client of hitl may use it.
    (
        "hitl-tls",
        &[
            "hitl-protocol",
            "hitl-schema",
            "hitl-graph",
            "hitl-thread",
            "hitl-interrupt",
            "hitl-tower",
            "hitl-upstream",
            "hitl-model",
            "tower",
            "redis",
        ],
    ),
    ("hitl-graph", &["hitl-protocol", "tokio", "hyper", "redis"]),
    ("hitl-http", &["hitl-graph", "hitl-thread", "hitl-interrupt", "hitl-tower", "hyper", "redis"]),
    ("hitl-thread", &["hitl-schema", "hitl-interrupt", "hitl-tower", "tower", "hyper", "redis", "jsonschema"]),
    ("hitl-interrupt", &["hyper", "redis", "tower"]),
    ("hitl-store-redis", &["hitl-interrupt", "hitl-schema", "hitl-tower"]),
    ("hitl-tower", &["redis", "hyper", "hitl-store-redis"]),
    ("hitl-upstream", &["redis", "tower", "hitl-interrupt", "hitl-graph"]),
    ("hitl-gateway", &["redis", "hitl-interrupt", "hitl-tower"]),
    ("hitl-auth", &["redis", "hitl-store-redis", "hitl-gateway", "hitl-upstream", "hitl-tower", "hitl-interrupt"]),
    ("hitl-pages", &["redis", "hitl-store-redis", "hitl-gateway", "hitl-upstream", "hitl-tower"]),
    ("hitl-model", &["redis", "tower", "hitl-protocol", "hitl-graph", "hitl-interrupt", "hitl-tower"]),
    ("hitl-toolcall", &["redis", "tower", "hitl-interrupt", "hitl-tower", "hitl-agents"]),
    ("hitl-declared", &["redis", "hitl-interrupt", "hitl-tower", "hitl-agents"]),
];

fn metadata() -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let output = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["metadata", "--format-version", "1"])
        .current_dir(root)
        .output()
        .expect("cargo metadata runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

fn name_of(packages: &BTreeMap<String, String>, id: &str) -> String {
    packages.get(id).cloned().unwrap_or_default()
}

#[test]
fn the_crate_graph_has_only_the_allowed_edges() {
    let meta = metadata();
    let members: BTreeSet<&str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["source"].is_null())
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    for package in meta["packages"].as_array().unwrap().iter().filter(|p| p["source"].is_null()) {
        let name = package["name"].as_str().unwrap();
        let Some((_, allowed)) = ALLOWED_EDGES.iter().find(|(crate_name, _)| *crate_name == name) else {
            problems.push(format!("{name} is not in ALLOWED_EDGES"));
            continue;
        };
        for dep in package["dependencies"].as_array().unwrap() {
            let dep_name = dep["name"].as_str().unwrap();
            if !members.contains(dep_name) {
                continue;
            }
            if allowed.contains(&dep_name) {
                used.insert((name, dep_name));
            } else {
                problems.push(format!("{name} depends on {dep_name}, an edge ALLOWED_EDGES does not list"));
            }
        }
    }
    for (name, allowed) in ALLOWED_EDGES {
        for dep in *allowed {
            if members.contains(name) && !used.contains(&(*name, *dep)) {
                problems.push(format!("ALLOWED_EDGES lists {name} -> {dep}, which no manifest has"));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn forbidden_transitive_dependencies() {
    let meta = metadata();
    let packages: BTreeMap<String, String> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap().to_owned(), p["name"].as_str().unwrap().to_owned()))
        .collect();
    // Normal (non-dev, non-build) edges of the resolved graph.
    let mut edges: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for node in meta["resolve"]["nodes"].as_array().unwrap() {
        let id = node["id"].as_str().unwrap().to_owned();
        let deps = node["deps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["dep_kinds"].as_array().unwrap().iter().any(|k| k["kind"].is_null()))
            .map(|d| d["pkg"].as_str().unwrap().to_owned())
            .collect();
        edges.insert(id, deps);
    }
    let mut problems = Vec::new();
    for (krate, forbidden) in FORBIDDEN {
        let start = packages.iter().find(|(_, n)| n == krate).map(|(id, _)| id.clone()).expect("crate exists");
        let mut seen = BTreeSet::new();
        let mut todo = vec![start];
        while let Some(id) = todo.pop() {
            for dep in edges.get(&id).into_iter().flatten() {
                if seen.insert(dep.clone()) {
                    todo.push(dep.clone());
                }
            }
        }
        for dep in seen {
            let name = name_of(&packages, &dep);
            if forbidden.contains(&name.as_str()) {
                problems.push(format!("{krate} pulls {name}"));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn every_library_starts_with_crate_docs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut problems = Vec::new();
    for name in LIBRARIES {
        let lib = root.join("crates").join(name).join("src/lib.rs");
        let text = std::fs::read_to_string(&lib).unwrap_or_default();
        if !text.starts_with("//! ") {
            problems.push(format!("{} does not start with //! docs", lib.display()));
        }
        if !text.contains("```") {
            problems.push(format!("{} has no example in its crate docs", lib.display()));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// The names `hitl_…` in `text` (a metric's `_bucket`, `_count` and `_sum` series as
/// the metric).
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in text.match_indices("hitl_") {
        let name: String =
            text[at..].chars().take_while(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit()).collect();
        let name =
            ["_bucket", "_count", "_sum"].iter().fold(name, |n, s| n.strip_suffix(s).map_or(n.clone(), str::to_owned));
        names.insert(name);
    }
    names
}

#[test]
fn the_dashboard_and_the_alerts_use_only_documented_metrics() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let operations = std::fs::read_to_string(root.join("docs/operations.md")).unwrap();
    let table_start = operations.find("| metric |").expect("the metrics table");
    let table: String =
        operations[table_start..].lines().take_while(|l| l.starts_with('|')).collect::<Vec<_>>().join("\n");
    let documented = metric_names(&table);
    let recorder = std::fs::read_to_string(root.join("crates/hitl-server/src/metrics.rs")).unwrap();
    let dashboard = std::fs::read_to_string(root.join("docs/grafana-dashboard.json")).unwrap();
    let alerts = &operations[operations.find("```yaml").expect("the example alerts")..];
    let alerts = &alerts[..alerts[7..].find("```").expect("the alerts' end") + 7];
    for name in metric_names(&dashboard).iter().chain(metric_names(alerts).iter()) {
        assert!(documented.contains(name), "{name} is used but not in docs/operations.md's table");
        assert!(recorder.contains(&format!("\"{name}\"")), "{name} is used but not described in metrics.rs");
    }
}

#[test]
fn the_libraries_are_layered_as_the_architecture_table_says() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut problems = Vec::new();
    let mut on_disk: Vec<String> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = LIBRARIES.iter().map(|n| (*n).to_owned()).collect();
    listed.sort();
    if on_disk != listed {
        problems.push(format!("crates/ holds {on_disk:?}, LIBRARIES lists {listed:?}"));
    }
    // Each library's allowed edges name only libraries before it.
    for (at, name) in LIBRARIES.iter().enumerate() {
        let allowed = ALLOWED_EDGES.iter().find(|(n, _)| n == name).map(|(_, deps)| *deps).unwrap_or_default();
        for dep in allowed {
            if !LIBRARIES[..at].contains(dep) {
                problems.push(format!("{name} may depend on {dep}, which is not listed before it"));
            }
        }
    }
    // The table of docs/ARCHITECTURE.md: the same crates, in this order, with these edges.
    let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let rows: Vec<(String, String)> = doc
        .lines()
        .filter_map(|line| line.strip_prefix("| `hitl-"))
        .filter_map(|rest| rest.split_once("` | "))
        .map(|(name, deps)| (format!("hitl-{name}"), deps.to_owned()))
        .filter(|(name, _)| LIBRARIES.contains(&name.as_str()))
        .collect();
    let names: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
    if names != LIBRARIES {
        problems.push(format!("docs/ARCHITECTURE.md's table lists {names:?}, not LIBRARIES in order"));
    }
    for (name, deps) in &rows {
        let allowed = ALLOWED_EDGES.iter().find(|(n, _)| n == name).map(|(_, deps)| *deps).unwrap_or_default();
        for dep in allowed {
            if !deps.contains(&format!("`{dep}`")) {
                problems.push(format!("docs/ARCHITECTURE.md: {name}'s row does not name {dep}"));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_engine_stays_a_short_driver_that_names_no_era() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("crates/hitl-interrupt/src");
    let mut problems = Vec::new();
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    for line in lib.lines().filter(|l| l.starts_with("pub mod ")) {
        problems.push(format!("hitl-interrupt exports a module ({line}): export its types instead"));
    }
    let engine = std::fs::read_to_string(src.join("engine.rs")).unwrap();
    if engine.lines().count() >= 500 {
        problems.push(format!("engine.rs has {} lines (under 500)", engine.lines().count()));
    }
    let mut todo = vec![src.clone()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let name = path.strip_prefix(&src).unwrap().display().to_string();
            if name != "engine.rs" && text.lines().any(|l| l.trim_start().starts_with("impl Engine")) {
                problems.push(format!("{name} has an impl Engine block (only engine.rs may)"));
            }
            // The engine speaks rounds; the transport's era stays in hitl-tower.
            if text.contains("Era::") || text.contains("version::Era") {
                problems.push(format!("{name} names the protocol era"));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}
