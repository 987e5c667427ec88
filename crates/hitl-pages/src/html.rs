//! The pages, server-rendered with maud: no script, one stylesheet, every control with
//! a label, readable on a phone.

use hitl_protocol::display;
use maud::{DOCTYPE, Markup, html};
use serde_json::Value;

use crate::session::Session;

/// The stylesheet, served at `/pages/style.css` (the CSP allows no inline style).
pub(crate) const STYLE: &str = r#"
:root { color-scheme: light; --ink: #1b1f24; --muted: #4a5560; --line: #c9d1d9; --accent: #0b57d0; --ok: #116329; --bad: #a40e26; }
* { box-sizing: border-box; }
body { margin: 0; font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink); background: #f6f8fa; }
header { background: #fff; border-bottom: 1px solid var(--line); padding: .75rem 1rem; display: flex; flex-wrap: wrap; gap: .5rem; justify-content: space-between; align-items: center; }
header .brand { font-weight: 700; letter-spacing: .02em; }
header form { margin: 0; }
main { max-width: 44rem; margin: 1.5rem auto; padding: 0 1rem; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 1.25rem; margin-bottom: 1rem; }
h1 { font-size: 1.4rem; margin: 0 0 .75rem; }
h2 { font-size: 1.1rem; margin: 1.25rem 0 .5rem; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .25rem 1rem; margin: 0; }
dt { color: var(--muted); }
dd { margin: 0; min-width: 0; overflow-wrap: anywhere; }
pre { background: #f6f8fa; border: 1px solid var(--line); border-radius: 6px; padding: .75rem; overflow-x: auto; white-space: pre-wrap; overflow-wrap: anywhere; }
.text { white-space: pre-wrap; overflow-wrap: anywhere; }
.warning { border-left: 4px solid #bf8700; padding: .5rem .75rem; background: #fff8c5; }
label { display: block; font-weight: 600; margin: .75rem 0 .25rem; }
input[type=password], input[type=text], textarea { width: 100%; font: inherit; padding: .5rem; border: 1px solid #8c959f; border-radius: 6px; }
textarea { min-height: 8rem; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; }
button { font: inherit; font-weight: 600; padding: .55rem 1rem; border-radius: 6px; border: 1px solid transparent; cursor: pointer; margin-top: .75rem; }
button.primary { background: var(--accent); color: #fff; }
button.approve { background: var(--ok); color: #fff; }
button.reject { background: var(--bad); color: #fff; }
button.plain { background: #fff; color: var(--ink); border-color: #8c959f; }
button:focus-visible, input:focus-visible, textarea:focus-visible, a:focus-visible { outline: 3px solid #fb8c00; outline-offset: 2px; }
.note { color: var(--muted); }
.status { display: inline-block; padding: .1rem .6rem; border-radius: 999px; font-weight: 600; background: #eaeef2; }
.status.pending { background: #fff8c5; }
.status.approved, .status.edited, .status.responded { background: #dafbe1; }
.status.rejected, .status.expired, .status.withdrawn { background: #ffebe9; }
.error { border-left: 4px solid var(--bad); padding: .5rem .75rem; background: #ffebe9; }
table { width: 100%; border-collapse: collapse; }
th, td { text-align: left; padding: .5rem; border-bottom: 1px solid var(--line); vertical-align: top; }
@media (max-width: 32rem) { dl { grid-template-columns: 1fr; } dt { margin-top: .5rem; } }
"#;

/// A page: the head, the header with who is signed in, and `body`.
/// What every page carries besides its body: the form token of the visit, and where
/// the pages are mounted (`/hitl`, or empty), which their links are relative to.
pub(crate) struct Chrome<'a> {
    pub(crate) csrf: &'a str,
    pub(crate) mount: &'a str,
}

pub(crate) fn layout(title: &str, session: Option<&Session>, chrome: &Chrome<'_>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="referrer" content="no-referrer";
                title { (title) " · hitl" }
                link rel="stylesheet" href={(chrome.mount) "/pages/style.css"};
            }
            body {
                header {
                    span.brand { "hitl" }
                    @if let Some(session) = session {
                        form method="post" action={(chrome.mount) "/logout"} {
                            input type="hidden" name="csrf" value=(chrome.csrf);
                            span.note { "Signed in as " (session.principal) " " }
                            button.plain type="submit" { "Sign out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// The sign-in form.
pub(crate) fn login(next: &str, chrome: &Chrome<'_>, error: Option<&str>) -> Markup {
    let body = html! {
        div.card {
            h1 { "Sign in" }
            p.note { "Sign in with the token you use for hitl's API (a bearer token or a JWT)." }
            @if let Some(error) = error { p.error role="alert" { (error) } }
            form method="post" action={(chrome.mount) "/login"} {
                input type="hidden" name="csrf" value=(chrome.csrf);
                input type="hidden" name="next" value=(next);
                label for="token" { "Token" }
                input id="token" type="password" name="token" autocomplete="current-password" required;
                button.primary type="submit" { "Sign in" }
            }
        }
    };
    layout("Sign in", None, chrome, body)
}

/// A page that only says something.
pub(crate) fn message(title: &str, text: &str, session: Option<&Session>, chrome: &Chrome<'_>) -> Markup {
    layout(title, session, chrome, html! { div.card { h1 { (title) } p { (text) } } })
}

/// What the approver may do on an approval's page.
pub(crate) enum Can {
    /// Decide, with these decisions.
    Decide(Vec<String>),
    /// Nothing: why not.
    Not(String),
}

/// An approval: the call as it will run (every argument whole, hidden characters
/// escaped: the entry's `display`), what runs it, the policy and its text, and the
/// forms of the decisions offered.
pub(crate) fn approval(
    entry: &Value,
    can: &Can,
    error: Option<&str>,
    session: Option<&Session>,
    chrome: &Chrome<'_>,
) -> Markup {
    let status = crate::ApprovalStatus::of_entry(entry).map_or("pending", crate::ApprovalStatus::as_str);
    let shown = &entry["display"];
    let tool = shown["tool"].as_str().or(entry["tool"].as_str()).unwrap_or_default();
    let args = entry.get("arguments").cloned().unwrap_or(Value::Null);
    let raw = args.to_string();
    let hidden = display::escape(&raw) != raw.as_str();
    let annotations: Vec<(&String, &str)> = shown["annotations"]
        .as_object()
        .map(|a| a.iter().map(|(k, v)| (k, v.as_str().unwrap_or_default())).collect())
        .unwrap_or_default();
    let line = |text: &str| display::escape(text).into_owned();
    let body = html! {
        div.card {
            h1 { "Run " code { (tool) } "?" }
            p { span class={"status " (status)} { (status) } }
            @if let Some(error) = error { p.error role="alert" { (error) } }
            dl {
                dt { "Asked by" } dd { (line(entry["caller"].as_str().unwrap_or("an anonymous caller"))) }
                dt { "Approvers" } dd { (entry["approvers"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")).unwrap_or_default()) }
                dt { "Policy" } dd { code { (line(entry["policy"].as_str().unwrap_or_default())) } }
                @if let Some(upstream) = shown["upstream"].as_str() {
                    dt { "Runs on" } dd #upstream { "the upstream server " code { (upstream) } }
                }
                @if let Some(about) = shown["tool_description"].as_str() {
                    dt { "The tool says" } dd #tool-description .text { (about) }
                }
                @if !annotations.is_empty() {
                    dt { "Annotations" }
                    dd #annotations {
                        @for (i, (name, value)) in annotations.iter().enumerate() {
                            @if i > 0 { ", " }
                            code { (name) ": " (value) }
                        }
                    }
                }
                @if let Some(covers) = shown["covers"].as_str() {
                    dt { "An approval covers" } dd #covers { (covers) }
                }
                @if let Some(expires) = shown["expires_at"].as_str() {
                    dt { "Expires" } dd #expires { time datetime=(expires) { (expires) } }
                }
                @if let Some(by) = entry["decided_by"].as_str() { dt { "Decided by" } dd { (line(by)) } }
            }
            @if let Some(description) = shown["description"].as_str() {
                h2 { "Review text" }
                pre #description { (description) }
            }
            h2 { "Arguments" }
            @if hidden {
                p.warning role="alert" {
                    "Some values hold characters that do not show (bidi controls, zero-width or control characters, unusual spaces): each is written as a \\u escape, as it will run."
                }
            }
            // Still JSON of the same value, escapes and all.
            pre #arguments { (display::json_pretty(&args)) }
            @if let Some(decision) = entry.get("decision").filter(|d| !d.is_null()) {
                h2 { "Decision" }
                pre { (display::json_pretty(decision)) }
            }
        }
        @match can {
            Can::Not(why) => { div.card { p { (why) } } }
            Can::Decide(offered) => {
                @let offers = |d: &str| offered.iter().any(|o| o == d);
                @if offers("approve") {
                    (decision(chrome.csrf, "approve", html! {
                        p { "Run the call as it is." }
                        @if let Some(covers) = shown["covers"].as_str() {
                            // Unchecked, the approval is for this call only.
                            input type="hidden" name="cover_offered" value="true";
                            label for="cover" {
                                input id="cover" type="checkbox" name="cover" value="true" checked;
                                " Also let through " (covers.strip_prefix("this call, and ").unwrap_or(covers))
                            }
                        }
                    }, html! {
                        button.approve type="submit" id="approve" { "Approve" }
                    }))
                }
                @if offers("edit") {
                    (decision(chrome.csrf, "edit", html! {
                        label for="args" { "Run with these arguments (JSON)" }
                        // Starting from the escaped JSON, an edit changes nothing else.
                        textarea id="args" name="args" spellcheck="false" { (display::json_pretty(&args)) }
                    }, html! { button.primary type="submit" id="edit" { "Approve with edits" } }))
                }
                @if offers("reject") {
                    (decision(chrome.csrf, "reject", html! {
                        label for="reject-message" { "Why not (sent to the caller)" }
                        input id="reject-message" type="text" name="message";
                    }, html! { button.reject type="submit" id="reject" { "Reject" } }))
                }
                @if offers("respond") {
                    (decision(chrome.csrf, "respond", html! {
                        label for="respond-message" { "Answer instead of running the tool" }
                        input id="respond-message" type="text" name="message" required;
                    }, html! { button.plain type="submit" id="respond" { "Respond" } }))
                }
            }
        }
    };
    layout(&format!("Approve {tool}"), session, chrome, body)
}

/// One decision's card: its form, with `fields` and the `button` that sends it.
fn decision(csrf: &str, decision: &str, fields: Markup, button: Markup) -> Markup {
    html! {
        div.card {
            form method="post" {
                input type="hidden" name="csrf" value=(csrf);
                input type="hidden" name="decision" value=(decision);
                (fields)
                (button)
            }
        }
    }
}

/// The secret entry form.
pub(crate) fn secret(
    label: &str,
    message: &str,
    error: Option<&str>,
    session: Option<&Session>,
    chrome: &Chrome<'_>,
) -> Markup {
    let body = html! {
        div.card {
            h1 { (label) }
            p { (message) }
            p.note { "What you type here goes to the agent only: it never passes through your MCP client or its model, and it is stored encrypted." }
            @if let Some(error) = error { p.error role="alert" { (error) } }
            form method="post" {
                input type="hidden" name="csrf" value=(chrome.csrf);
                label for="value" { (label) }
                input id="value" type="password" name="value" autocomplete="off" required;
                button.primary type="submit" id="save" { "Save" }
            }
        }
    };
    layout(label, session, chrome, body)
}

/// The approvals an approver may decide.
pub(crate) fn list(entries: &[Value], session: Option<&Session>, chrome: &Chrome<'_>) -> Markup {
    let body = html! {
        div.card {
            h1 { "Approvals" }
            @if entries.is_empty() { p.note { "Nothing is waiting for you." } }
            @else {
                table {
                    thead { tr { th scope="col" { "Tool" } th scope="col" { "Asked by" } th scope="col" { "Status" } } }
                    tbody {
                        @for entry in entries {
                            tr {
                                td { a href={(chrome.mount) "/approvals/" (entry["id"].as_str().unwrap_or_default())} { (display::escape(entry["tool"].as_str().unwrap_or_default())) } }
                                td { (entry["caller"].as_str().unwrap_or("")) }
                                td { span class={"status " (entry["status"].as_str().unwrap_or_default())} { (entry["status"].as_str().unwrap_or_default()) } }
                            }
                        }
                    }
                }
            }
        }
    };
    layout("Approvals", session, chrome, body)
}
