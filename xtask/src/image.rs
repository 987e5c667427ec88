//! `cargo xtask image`: the container image of `Containerfile`, built with buildah and
//! tested by running it.
//!
//! The image has no base: the stripped release build of `hitl`, the shared libraries
//! `ldd` names (none for a static build) and the loader, the host's CA bundle, a
//! non-root user, and what host-name resolution reads. The test runs it with
//! `buildah run` on the host's network, as its own user: `/healthz`, a paused `greeter`
//! call resumed over HTTP with the threads in a Redis named `localhost`, and a call
//! through the gateway to an `https://` upstream whose certificate a test CA signed
//! (trusted through a copy of the image's bundle with the test CA added, mounted over
//! it; without it the same upstream is refused).

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use serde_json::{Value, json};

use crate::{cargo, run, workspace_root};

/// The image may take at most this much, uncompressed (`buildah images`).
const MAX_SIZE: u64 = 40 * 1024 * 1024;
/// The user the image runs as: not root, and not a user of the host.
const UID: u32 = 10001;
const ENTRYPOINT: &str = "/usr/local/bin/hitl";
const CMD: [&str; 3] = ["serve", "--listen", "0.0.0.0:8123"];
/// Where a test container's name starts: the test removes its own by this name.
const CONTAINER: &str = "hitl-xtask-image-test";

pub(crate) fn image() -> anyhow::Result<()> {
    crate::ensure_apt("buildah", "buildah")?;
    let mut build = cargo();
    build.args(["build", "--release", "-p", "hitl-server", "--bin", "hitl"]);
    // `cargo run` gives xtask the variables of its own package, and build scripts (ring's)
    // watch some: without them, this is the build `cargo build --release` makes, not a
    // second one.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_PKG_")
            || ["CARGO_MANIFEST_DIR", "CARGO_MANIFEST_PATH", "CARGO_CRATE_NAME", "CARGO_BIN_NAME"].contains(&&*name)
        {
            build.env_remove(&*name);
        }
    }
    run(build)?;
    let dir = workspace_root().join("target/image");
    let context = dir.join("context");
    stage(&workspace_root().join("target/release/hitl"), &context.join("rootfs"))?;
    let buildah = Buildah { root: dir.join("storage"), runroot: dir.join("run") };
    let tag = format!("localhost/hitl:{}", env!("CARGO_PKG_VERSION"));
    // The last build's image goes first, so the storage holds one.
    let _ = buildah.command(&["rmi", "--force", &tag]).stderr(Stdio::null()).stdout(Stdio::null()).status();
    let mut bud = buildah.command(&["bud", "--isolation", "chroot", "--tag", &tag, "--file"]);
    bud.arg(workspace_root().join("Containerfile")).arg(&context);
    run(bud)?;
    let size = buildah.size(&tag)?;
    eprintln!("image {tag}: {size} bytes ({:.1} MiB) uncompressed", size as f64 / 1024.0 / 1024.0);
    let mut images = buildah.command(&["images", &tag]);
    images.stdout(std::io::stderr());
    run(images)?;
    ensure!(size <= MAX_SIZE, "the image takes {size} bytes, over the limit of {MAX_SIZE} (40 MiB)");
    test_image(&buildah, &tag, &context.join("rootfs"))?;
    eprintln!("image {tag} passed its tests");
    Ok(())
}

/// buildah with its own storage under `target/image` (vfs: no kernel overlay needed).
struct Buildah {
    root: PathBuf,
    runroot: PathBuf,
}

impl Buildah {
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("buildah");
        command.arg("--root").arg(&self.root).arg("--runroot").arg(&self.runroot);
        command.args(["--storage-driver", "vfs"]).args(args);
        command
    }

    fn output(&self, args: &[&str]) -> anyhow::Result<String> {
        let output = self.command(args).stderr(Stdio::inherit()).output().context("running buildah")?;
        ensure!(output.status.success(), "buildah {args:?} failed with {}", output.status);
        Ok(String::from_utf8(output.stdout)?)
    }

    /// The image's size as `buildah images` reports it (`31.2 MB`), in bytes.
    fn size(&self, tag: &str) -> anyhow::Result<u64> {
        let listed: Value = serde_json::from_str(&self.output(&["images", "--json", tag])?)?;
        let size = listed[0]["size"].as_str().unwrap_or_default();
        bytes(size).with_context(|| format!("no size in `buildah images --json`: {listed}"))
    }
}

/// A size as buildah writes it (Docker's `units.HumanSize`: `31.2 MB`, powers of 1000),
/// in bytes.
fn bytes(size: &str) -> Option<u64> {
    let (number, unit) = size.split_once(' ')?;
    let power = ["B", "kB", "MB", "GB", "TB"].iter().position(|u| *u == unit)?;
    let number: f64 = number.parse().ok()?;
    Some((number * 1000f64.powi(power as i32)) as u64)
}

/// The image's files, under `rootfs`: everything `COPY rootfs/ /` puts in it.
fn stage(binary: &Path, rootfs: &Path) -> anyhow::Result<()> {
    if rootfs.exists() {
        std::fs::remove_dir_all(rootfs)?;
    }
    let place = |path: &str| -> anyhow::Result<PathBuf> {
        let to = rootfs.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(to.parent().expect("a file's folder"))?;
        Ok(to)
    };
    let mut strip = Command::new("strip");
    strip.arg("--strip-all").arg("-o").arg(place(ENTRYPOINT)?).arg(binary);
    run(strip).context("strip (binutils) makes the image's binary")?;
    for library in shared_libraries(binary)? {
        // Copied as files: the host's symbolic links point at names the image lacks.
        std::fs::copy(&library, place(&library)?).with_context(|| format!("copying {library}"))?;
    }
    let bundle = "/etc/ssl/certs/ca-certificates.crt";
    std::fs::copy(bundle, place(bundle)?).with_context(|| format!("copying {bundle} (install ca-certificates)"))?;
    let files = [
        ("/etc/passwd", format!("root:x:0:0:root:/root:/sbin/nologin\nhitl:x:{UID}:{UID}:hitl:/:/sbin/nologin\n")),
        ("/etc/group", format!("root:x:0:\nhitl:x:{UID}:\n")),
        // glibc reads it for every name it resolves: the hosts file first, then DNS.
        ("/etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n".to_owned()),
        // Runtimes mount their own; this one answers `localhost` where none does.
        ("/etc/hosts", "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n".to_owned()),
    ];
    for (path, text) in files {
        std::fs::write(place(path)?, text)?;
    }
    Ok(())
}

/// The files the dynamic loader maps for `binary` (the loader itself too), from `ldd`;
/// none for a static program.
fn shared_libraries(binary: &Path) -> anyhow::Result<Vec<String>> {
    let output = Command::new("ldd").arg(binary).output().context("running ldd")?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() || text.contains("statically linked") {
        ensure!(
            text.contains("statically linked") || String::from_utf8_lossy(&output.stderr).contains("not a dynamic"),
            "ldd {} failed: {}",
            binary.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        return Ok(Vec::new());
    }
    let mut libraries = Vec::new();
    for line in text.lines().map(str::trim) {
        // `libc.so.6 => /lib/…/libc.so.6 (0x…)`, `/lib64/ld-linux-x86-64.so.2 (0x…)`, or
        // `linux-vdso.so.1 (0x…)`, which the kernel provides.
        let path = line.split_once("=> ").map_or(line, |(_, to)| to).split(" (").next().unwrap_or_default();
        if path.contains("not found") {
            bail!("ldd {}: {line}", binary.display());
        }
        if path.starts_with('/') {
            libraries.push(path.to_owned());
        }
    }
    ensure!(!libraries.is_empty(), "ldd named no library for a dynamic program: {text}");
    Ok(libraries)
}

fn test_image(buildah: &Buildah, tag: &str, rootfs: &Path) -> anyhow::Result<()> {
    let config: Value = serde_json::from_str(&buildah.output(&["inspect", "--type", "image", tag])?)?;
    let config = &config["OCIv1"]["config"];
    ensure!(config["User"] == format!("{UID}:{UID}"), "the image runs as {}, not as {UID}", config["User"]);
    ensure!(config["Entrypoint"] == json!([ENTRYPOINT]), "the image's entrypoint is {}", config["Entrypoint"]);
    ensure!(config["Cmd"] == json!(CMD), "the image's command is {}", config["Cmd"]);

    let dir = workspace_root().join("target/image/test");
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    let (config_dir, secret_dir, tls_dir) = (dir.join("config"), dir.join("secret"), dir.join("tls"));
    for d in [&config_dir, &secret_dir, &tls_dir] {
        std::fs::create_dir_all(d)?;
    }
    let redis = crate::start_redis()?;
    let python = match std::env::var_os("HITL_PYTHON") {
        Some(python) => PathBuf::from(python),
        None => crate::python_sdk().map_err(anyhow::Error::msg)?,
    };
    let upstream = Upstream::start(&python, &tls_dir)?;

    // The bundle of the image with the test CA added, mounted over the image's own.
    let mut bundle = std::fs::read(rootfs.join("etc/ssl/certs/ca-certificates.crt"))?;
    bundle.extend(std::fs::read(tls_dir.join("ca.pem"))?);
    let trusted = dir.join("ca-certificates.crt");
    std::fs::write(&trusted, bundle)?;
    // The Kubernetes ConfigMap's hitl.toml, with the https upstream (and a policy that
    // names its tool, so `check --connect` fails when it cannot list it).
    let manifest = std::fs::read_to_string(workspace_root().join("deploy/kubernetes/configmap.yaml"))?;
    let mut config = configmap_toml(&manifest)?;
    config.push_str(&format!(
        "\n[[upstream]]\nname = \"tls\"\nurl = \"{}\"\n\n[[policy]]\ntools = [\"tls.echo\"]\naction = \"allow\"\n",
        upstream.url
    ));
    std::fs::write(config_dir.join("hitl.toml"), config)?;
    // As the kubelet mounts a Secret for a pod with `fsGroup`: root's, its group may read.
    write_secret(&secret_dir.join("secret"))?;

    let volumes = [
        format!("{}:/etc/hitl:ro", config_dir.display()),
        format!("{}:/var/run/secrets/hitl:ro", secret_dir.display()),
    ];
    let store = format!("redis://localhost:{}/0", redis.port);
    let hitl = Container::start(
        buildah,
        tag,
        &volumes,
        &[("HITL_CONFIG", "/etc/hitl/hitl.toml"), ("HITL_STORE", &store)],
        Some(&trusted),
    )?;
    let result = exercise(&hitl, redis.port);
    drop(hitl);
    result?;

    // Without the test CA, the same upstream is refused: the bundle is what is trusted.
    let check = Container::command(
        buildah,
        tag,
        &volumes,
        &[("HITL_CONFIG", "/etc/hitl/hitl.toml")],
        None,
        &["check", "--connect"],
    )?
    .output();
    remove_container(buildah);
    let check = check?;
    let said = String::from_utf8_lossy(&check.stdout).into_owned() + &String::from_utf8_lossy(&check.stderr);
    ensure!(!check.status.success(), "hitl check --connect trusted the test CA without it in the bundle: {said}");
    let refused = said.lines().find(|l| l.starts_with("upstream tls: not listed"));
    let refused = refused.with_context(|| format!("hitl check --connect listed the upstream: {said}"))?;
    eprintln!("without the test CA in its bundle, the image refuses the upstream, as it should:\n{refused}");
    drop(upstream);
    Ok(())
}

/// The running image, checked over HTTP.
fn exercise(hitl: &Container, redis_port: u16) -> anyhow::Result<()> {
    let uid = hitl.uid()?;
    ensure!(uid == UID, "hitl runs as uid {uid} in the container, not {UID}");
    eprintln!("hitl runs as uid {uid}, listening on port {}", hitl.port);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match http(hitl.port, "127.0.0.1", "GET", "/healthz", &[], "") {
            Ok((200, _)) => break,
            other if Instant::now() > deadline => bail!("/healthz did not answer 200 within 30 s: {other:?}"),
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    eprintln!("/healthz answers 200 (the store, Redis at localhost:{redis_port}, answers)");
    let (status, _) = http(hitl.port, "127.0.0.1", "POST", "/mcp", &[("content-type", "application/json")], "{}")?;
    ensure!(status == 403, "a Host allowed_hosts does not list got {status}, not 403");

    let asked = mcp(hitl.port, "tools/call", json!({"name": "greeter", "arguments": {}}))?;
    let state = asked["result"]["requestState"].as_str().with_context(|| format!("greeter did not pause: {asked}"))?;
    let keys = redis_dbsize(redis_port)?;
    ensure!(keys > 0, "the paused call is not in Redis (DBSIZE {keys})");
    let answers = json!({"user_name": {"action": "accept", "content": {"name": "Ada"}}});
    let params = json!({"name": "greeter", "arguments": {}, "requestState": state, "inputResponses": answers});
    let done = mcp(hitl.port, "tools/call", params)?;
    ensure!(done["result"]["structuredContent"]["greeting"] == "Hello, Ada!", "greeter did not resume: {done}");
    eprintln!("greeter paused (its thread in Redis: {keys} keys) and resumed: Hello, Ada!");

    let listed = mcp(hitl.port, "tools/list", json!({}))?;
    let tools = listed["result"]["tools"].as_array().with_context(|| format!("no tools: {listed}"))?;
    ensure!(tools.iter().any(|t| t["name"] == "tls.echo"), "the https upstream's tools are not listed: {listed}");
    let echoed = mcp(hitl.port, "tools/call", json!({"name": "tls.echo", "arguments": {"text": "over https"}}))?;
    ensure!(echoed["result"]["content"][0]["text"] == "over https", "tls.echo over https: {echoed}");
    eprintln!("tls.echo went through the https upstream: {}", echoed["result"]["content"]);
    Ok(())
}

/// Writes the secret as a Kubernetes Secret volume with `fsGroup` holds it: owned by
/// root, its group the image's user's, mode 440.
fn write_secret(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let secret: String = (0..48).map(|i| char::from(b'a' + (i * 7 % 26) as u8)).collect();
    std::fs::write(path, secret)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o440))?;
    std::os::unix::fs::chown(path, Some(0), Some(UID)).context("chown the test secret (run as root)")?;
    Ok(())
}

/// `hitl serve` in the image (`buildah run`, chroot isolation, the host's network) on
/// a free port; stopped on drop.
struct Container<'a> {
    buildah: &'a Buildah,
    child: Child,
    port: u16,
}

impl<'a> Container<'a> {
    /// `buildah run` of the image's program with `args`, in a working container made
    /// afresh from the image (`buildah run` takes one, not an image).
    fn command(
        buildah: &Buildah,
        tag: &str,
        volumes: &[String],
        env: &[(&str, &str)],
        bundle: Option<&Path>,
        args: &[&str],
    ) -> anyhow::Result<Command> {
        remove_container(buildah);
        buildah.output(&["from", "--name", CONTAINER, tag])?;
        let mut command = buildah.command(&["run", "--isolation", "chroot", "--network", "host"]);
        for volume in volumes {
            command.arg("--volume").arg(volume);
        }
        if let Some(bundle) = bundle {
            command.arg("--volume").arg(format!("{}:/etc/ssl/certs/ca-certificates.crt:ro", bundle.display()));
        }
        for (name, value) in env {
            command.arg("--env").arg(format!("{name}={value}"));
        }
        command.arg(CONTAINER).arg("--").arg(ENTRYPOINT).args(args);
        Ok(command)
    }

    fn start(
        buildah: &'a Buildah,
        tag: &str,
        volumes: &[String],
        env: &[(&str, &str)],
        bundle: Option<&Path>,
    ) -> anyhow::Result<Self> {
        // The image's command, on a port the system picks (`serve --listen 0.0.0.0:0`).
        let mut command = Self::command(buildah, tag, volumes, env, bundle, &[CMD[0], CMD[1], "0.0.0.0:0"])?;
        eprintln!("$ {command:?}");
        let mut child = command.stdout(Stdio::piped()).spawn().context("buildah run")?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
        let port = line.trim().rsplit(':').next().and_then(|p| p.trim_end_matches("/mcp").parse().ok());
        let Some(port) = port else {
            let _ = child.kill();
            let _ = child.wait();
            bail!("hitl in the image printed {line:?} instead of its address");
        };
        Ok(Self { buildah, child, port })
    }

    /// The pid of `hitl serve` among this machine's processes: the one listening on
    /// this port (its `/proc/<pid>/net/tcp` is the host's, but its command line is
    /// `hitl serve --listen 0.0.0.0:0`, so it is found as a descendant of buildah).
    fn hitl_pid(&self) -> anyhow::Result<u32> {
        let mut family = vec![self.child.id()];
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            for entry in std::fs::read_dir("/proc")?.flatten() {
                let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else { continue };
                let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
                // `pid (comm) state ppid …`: comm may hold spaces, so read after its `)`.
                let ppid = stat.rsplit_once(") ").and_then(|(_, rest)| rest.split(' ').nth(1)?.parse::<u32>().ok());
                if ppid.is_some_and(|p| family.contains(&p)) && !family.contains(&pid) {
                    family.push(pid);
                }
            }
            for &pid in &family {
                let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
                if exe.ends_with("usr/local/bin/hitl") {
                    return Ok(pid);
                }
            }
            if Instant::now() > deadline {
                bail!("no hitl process under buildah run (pid {})", self.child.id());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn uid(&self) -> anyhow::Result<u32> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.hitl_pid()?))?;
        let uid = status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|l| l.split_whitespace().next());
        uid.and_then(|u| u.parse().ok()).context("no Uid in /proc/<pid>/status")
    }
}

impl Drop for Container<'_> {
    fn drop(&mut self) {
        // hitl ends on SIGTERM; buildah run then returns.
        if let Ok(pid) = self.hitl_pid() {
            let _ = Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        remove_container(self.buildah);
    }
}

fn remove_container(buildah: &Buildah) {
    let _ = buildah.command(&["rm", CONTAINER]).stdout(Stdio::null()).stderr(Stdio::null()).status();
}

/// The gateway tests' upstream (the Python SDK, `tests/python/upstream_server.py`)
/// serving https with a certificate for 127.0.0.1 from a test CA it writes to
/// `dir/ca.pem`; stopped on drop.
struct Upstream {
    child: Child,
    url: String,
}

impl Upstream {
    fn start(python: &Path, dir: &Path) -> anyhow::Result<Self> {
        let mut child = Command::new(python)
            .arg(workspace_root().join("tests/python/upstream_server.py"))
            .arg("--tls")
            .arg(dir)
            .stdout(Stdio::piped())
            .spawn()
            .context("starting the https upstream (tests/python/upstream_server.py)")?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
        let url = line.trim().to_owned();
        if !url.starts_with("https://") {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the upstream printed {line:?} instead of its https URL");
        }
        Ok(Self { child, url })
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Service's name, which the ConfigMap's `allowed_hosts` lists: clients in the
/// cluster name it in `Host`.
const SERVICE: &str = "hitl.hitl.svc.cluster.local";

/// The `hitl.toml` of the ConfigMap in `manifest` (its block scalar, unindented).
fn configmap_toml(manifest: &str) -> anyhow::Result<String> {
    let mut lines = manifest.lines().skip_while(|l| l.trim() != "hitl.toml: |");
    ensure!(lines.next().is_some(), "no `hitl.toml: |` in deploy/kubernetes/configmap.yaml");
    let mut toml = String::new();
    for line in lines.take_while(|l| l.is_empty() || l.starts_with("    ")) {
        toml.push_str(line.get(4..).unwrap_or_default());
        toml.push('\n');
    }
    ensure!(toml.contains("[server]"), "the ConfigMap's hitl.toml has no [server]: {toml}");
    Ok(toml)
}

/// A 2026-07-28 request to `/mcp` on 127.0.0.1:`port`: its JSON answer.
fn mcp(port: u16, method: &str, params: Value) -> anyhow::Result<Value> {
    let mut full = json!({"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "cargo-xtask-image", "version": "0"},
    }});
    full.as_object_mut().expect("an object").extend(params.as_object().cloned().unwrap_or_default());
    let name = full["name"].as_str().map(str::to_owned);
    let mut headers = vec![
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", method),
    ];
    if let Some(name) = name.as_deref() {
        headers.push(("mcp-name", name));
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": full}).to_string();
    let (status, text) = http(port, SERVICE, "POST", "/mcp", &headers, &body)?;
    ensure!(status == 200, "{method} answered {status}: {text}");
    serde_json::from_str(&text).with_context(|| format!("{method} answered {text:?}"))
}

/// One HTTP/1.1 request to 127.0.0.1:`port` on its own connection, naming `host`: the
/// status and the body as text.
fn http(
    port: u16,
    host: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> anyhow::Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut request = format!("{method} {path} HTTP/1.1\r\nhost: {host}:{port}\r\nconnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(request.as_bytes())?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let text = String::from_utf8(response)?;
    let (head, body) = text.split_once("\r\n\r\n").context("no end of the response head")?;
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).context("no status")?;
    let chunked = head.lines().any(|l| l.to_ascii_lowercase().starts_with("transfer-encoding: chunked"));
    Ok((status, if chunked { unchunk(body)? } else { body.to_owned() }))
}

fn unchunk(mut body: &str) -> anyhow::Result<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").context("a chunk without its size line")?;
        let size = usize::from_str_radix(size.split(';').next().unwrap_or_default().trim(), 16)?;
        if size == 0 {
            return Ok(out);
        }
        out.push_str(rest.get(..size).context("a chunk shorter than its size")?);
        body = rest.get(size + 2..).context("a chunk without its end")?;
    }
}

/// The number of keys in Redis database 0 on 127.0.0.1:`port`.
fn redis_dbsize(port: u16) -> anyhow::Result<u64> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(b"DBSIZE\r\n")?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line)?;
    line.trim().strip_prefix(':').and_then(|n| n.parse().ok()).with_context(|| format!("DBSIZE answered {line:?}"))
}
