//! `cargo fuzz run envelope`: no byte string may panic the JSON-RPC envelope parser or
//! the typed request parser.
#![no_main]

use hitl_protocol::{ClientRequest, Message, jsonrpc};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Message::Request(request)) = jsonrpc::parse(data) {
        if let Ok(typed) = ClientRequest::parse(&request.method, request.params) {
            let _ = typed.meta().require_modern();
        }
    }
});
