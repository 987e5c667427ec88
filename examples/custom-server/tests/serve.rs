//! Runs the example program and calls its agent over HTTP: a pause, the answer, the
//! result, with the program's own header on every response.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

struct Program(Child);

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// POSTs `body` to `/mcp` as a 2026-07-28 `tools/call`; the headers and the JSON body.
fn call(addr: &str, body: &Value) -> (String, Value) {
    let text = body.to_string();
    let mut stream = TcpStream::connect(addr).unwrap();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: tools/call\r\nMcp-Name: order_coffee\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{text}",
        text.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    (head.to_ascii_lowercase(), serde_json::from_str(body).unwrap())
}

fn tools_call(arguments: Value, extra: Value) -> Value {
    let mut params = json!({"name": "order_coffee", "arguments": arguments, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});
    params.as_object_mut().unwrap().extend(extra.as_object().cloned().unwrap_or_default());
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
}

#[test]
fn the_example_program_serves_its_agent_through_its_layer() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_custom-server"))
        .arg("127.0.0.1:0")
        .stdout(Stdio::piped())
        .spawn()
        .expect("the example program starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let _program = Program(child);
    let addr = line.trim().strip_prefix("custom-server listening on http://").unwrap().strip_suffix("/mcp").unwrap();

    let (head, paused) = call(addr, &tools_call(json!({"drink": "flat white"}), json!({})));
    assert!(head.contains("x-served-by: custom-server"), "{head}");
    let result = &paused["result"];
    assert_eq!(result["resultType"], "input_required", "{paused}");
    let (key, request) = result["inputRequests"].as_object().unwrap().iter().next().unwrap();
    assert_eq!(request["params"]["message"], "Which size of flat white: small, medium or large?");

    let answer = json!({"inputResponses": { key.clone(): {"action": "accept", "content": {"response": "large"}}},
                        "requestState": result["requestState"]});
    let (head, done) = call(addr, &tools_call(json!({"drink": "flat white"}), answer));
    assert!(head.contains("x-served-by: custom-server"), "{head}");
    assert_eq!(done["result"]["structuredContent"], json!({"order": "one large flat white"}), "{done}");
}
