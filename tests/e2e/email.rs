//! `[[notify]] kind = "email"`: a mail per pending approval, through a real SMTP server
//! (Python's aiosmtpd, `tests/python/smtp_sink.py`), with the tool and who asked in the
//! subject, the arguments escaped, and a link to the page that works.

use serde_json::{Value, json};

use crate::approvals::{Folder, ask, eventually, people, signed_in};
use crate::upstream::{PythonScript, PythonUpstream};

/// The SMTP sink, stopped when dropped; it writes each mail to `dir`.
struct Sink {
    _script: PythonScript,
    port: u16,
    dir: std::path::PathBuf,
}

impl Sink {
    fn start(dir: std::path::PathBuf) -> Sink {
        let python = std::env::var("HITL_PYTHON").expect("HITL_PYTHON");
        std::fs::create_dir_all(&dir).unwrap();
        let script = PythonScript::start(&python, "smtp_sink.py", [&dir]);
        let line = &script.first_line;
        let port = line.trim().parse().unwrap_or_else(|_| panic!("the sink printed {line:?}"));
        Sink { _script: script, port, dir }
    }

    fn mails(&self) -> Vec<Value> {
        let mut names: Vec<_> = std::fs::read_dir(&self.dir)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        names.sort();
        names.iter().map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()).collect()
    }
}

#[tokio::test]
async fn a_pending_approval_is_mailed_with_its_call_escaped_and_a_link_that_works() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let folder = Folder::new("");
    let sink = Sink::start(folder.0.join("mail"));
    std::fs::write(
        folder.0.join("hitl.toml"),
        signed_in(
            &upstream.url,
            &format!(
                r#"[[policy]]
tools = ["db.drop_*"]
action = "review"
approvers = ["group:sre"]

[[notify]]
kind = "email"
to = ["sre-oncall@example.com"]
smtp_url = "smtp://127.0.0.1:{}"
from = "hitl@example.com"
"#,
                sink.port
            ),
        ),
    )
    .unwrap();
    let server = folder.serve(&[]).await;
    let p = people();
    // A value that would read otherwise: a right-to-left override, and HTML.
    let args = json!({"partition": "p1\u{202e}<b>x</b>", "database": "orders"});
    let (_paused, url) = ask(&server, &p.alice, &args).await;

    let mail = eventually(|| "no mail".to_owned(), || async { sink.mails().into_iter().next() }).await;
    assert_eq!(mail["from"], "hitl@example.com");
    assert_eq!(mail["to"], json!(["sre-oncall@example.com"]));
    let data = mail["data"].as_str().unwrap();
    assert!(data.contains("Subject: Approval needed: db.drop_partition for user:alice"), "{data}");
    assert!(data.contains("multipart/alternative") && data.contains("text/html"), "{data}");
    let unfolded = data.replace("=\r\n", "").replace("=3D", "=");
    assert!(unfolded.contains(&url), "the link to the page: {data}");
    assert!(unfolded.contains("\\\\u202e") || unfolded.contains("\\u202e"), "the override shown escaped: {data}");
    // In the HTML part the caller's markup is text, never markup.
    let html = unfolded.split("Content-Type: text/html").nth(1).expect("an HTML part");
    assert!(!html.contains("<b>x</b>") && html.contains("&lt;b&gt;x&lt;/b&gt;"), "{html}");
    assert!(!data.contains('\u{202e}'), "no raw override: {data}");

    // The link works: it leads to the page, after a sign-in.
    let path = url.strip_prefix(&format!("http://{}", server.addr)).unwrap();
    let (status, headers, _) = server.raw(http::Method::GET, path, &[], Default::default()).await;
    assert_eq!(status, 303, "to the sign-in");
    assert!(headers["location"].to_str().unwrap().starts_with("/login?next=%2Fapprovals%2F"));
    assert_eq!(sink.mails().len(), 1, "one mail per pending approval");
}
