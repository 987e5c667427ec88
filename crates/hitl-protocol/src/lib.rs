//! MCP and JSON-RPC wire types for hitl.
//!
//! This crate knows every message a hitl server reads or writes, for the modern
//! revision (2026-07-28: stateless requests with per-request `_meta`, results with
//! `resultType`, `input_required` rounds) and the legacy ones (2025-11-25 and earlier,
//! with `initialize`). It is serde only: no runtime, no HTTP, no storage, so it can be
//! reused by any client or server.
//!
//! The JSON-RPC envelope is read by explicit rules ([`jsonrpc::parse`]), never through
//! an untagged enum, so that every malformed message gets an error that says what is
//! wrong with it.
//!
//! ```
//! use hitl_protocol::{jsonrpc, ClientRequest, Message};
//!
//! let bytes = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
//!     "name":"choose_region","arguments":{},
//!     "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",
//!              "io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}"#;
//! let Message::Request(request) = jsonrpc::parse(bytes).unwrap() else { unreachable!() };
//! let ClientRequest::CallTool(call) = ClientRequest::parse(&request.method, request.params).unwrap() else {
//!     unreachable!()
//! };
//! let meta = call.meta.require_modern().unwrap();
//! assert!(meta.client_capabilities.elicits_form());
//! assert!(!meta.client_capabilities.elicits_url());
//!
//! // A bad message gets a precise error, with the id echoed.
//! let rejected = jsonrpc::parse(br#"{"jsonrpc":"1.0","id":"a","method":"ping"}"#).unwrap_err();
//! assert_eq!(rejected.error.code, hitl_protocol::ErrorCode::INVALID_REQUEST);
//! ```

pub mod canonical;
mod capabilities;
pub mod display;
pub mod headers;
pub mod jsonrpc;
mod meta;
mod mrtr;
mod request;
mod result;
mod task;
mod text;
mod types;
pub mod version;

pub use capabilities::{ClientCapabilities, ElicitationCapability, JsonObject, Needs, ServerCapabilities};
pub use jsonrpc::{ErrorCode, ErrorObject, Message, RequestId, Response};
pub use meta::{Implementation, Meta, ModernMeta, RequestMeta};
pub use mrtr::{
    CreateMessageParams, CreateMessageResult, ElicitAction, ElicitRequestParams, ElicitResult, FormElicitation,
    InputRequest, InputRequests, InputRequiredResult, InputResponses, ListRootsResult, RequestedSchema, Root,
    SamplingMessage, UrlElicitation, UrlElicitationRequiredData,
};
pub use request::{
    ClientNotification, ClientRequest, CompleteParams, ListenParams, ReadResourceParams, SetLevelParams,
    SubscriptionFilter, TaskParams, server_request,
};
pub use result::{EmptyResult, ServerResult};
pub use task::{CreateTaskResult, GetTaskResult, Task, TaskStatus};
pub use types::{
    CacheScope, CallToolParams, CallToolResponse, CallToolResult, ContentBlock, DiscoverResult, EmptyParams,
    GetPromptParams, GetPromptResult, InitializeParams, InitializeResult, ListParams, ListPromptsResult,
    ListToolsResult, Prompt, PromptArgument, PromptMessage, ResultType, Role, Tool,
};

/// The `_meta` keys reserved by MCP.
pub mod meta_keys {
    pub use crate::meta::{CLIENT_CAPABILITIES, CLIENT_INFO, LOG_LEVEL, PROGRESS_TOKEN, PROTOCOL_VERSION, SERVER_INFO};
}

/// `ms` since the epoch as an RFC 3339 UTC time (`2026-12-01T10:39:13.123Z`).
pub fn rfc3339(ms: u64) -> String {
    let (secs, millis) = (ms / 1000, ms % 1000);
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    // Written digit by digit: the audit trail stamps every entry, and `format!` costs
    // ten times as much. Years past 9999 (or before 0) are not times hitl writes.
    if !(0..=9999).contains(&year) {
        return format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
            rest / 3600,
            rest % 3600 / 60,
            rest % 60
        );
    }
    let mut out = *b"0000-00-00T00:00:00.000Z";
    let mut put = |at: usize, width: usize, mut n: u64| {
        for i in (at..at + width).rev() {
            out[i] = b'0' + (n % 10) as u8;
            n /= 10;
        }
    };
    put(0, 4, year as u64);
    put(5, 2, month as u64);
    put(8, 2, day as u64);
    put(11, 2, rest / 3600);
    put(14, 2, rest % 3600 / 60);
    put(17, 2, rest % 60);
    put(20, 3, millis);
    // ASCII digits and punctuation: the check takes its short path.
    String::from_utf8(out.to_vec()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_are_written_as_rfc3339_with_milliseconds() {
        let cases = [
            (0, "1970-01-01T00:00:00.000Z"),
            (951_782_400_007, "2000-02-29T00:00:00.007Z"),
            (1_796_249_132_931, "2026-12-02T22:05:32.931Z"),
            (4_107_542_399_999, "2100-02-28T23:59:59.999Z"),
            (253_402_300_799_000, "9999-12-31T23:59:59.000Z"),
            (253_402_300_800_000, "10000-01-01T00:00:00.000Z"),
        ];
        for (ms, written) in cases {
            assert_eq!(super::rfc3339(ms), written, "{ms}");
        }
    }
}
