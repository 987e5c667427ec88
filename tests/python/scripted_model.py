"""A scripted model API for trying declared agents without a model: an
OpenAI-compatible Chat Completions endpoint (`POST /v1/chat/completions`) that answers
each request with the next answer of a JSON script (a list of assistant messages:
`{"content": "..."}` or `{"tool_calls": [{"id", "name", "arguments"}]}`) and logs what
it received to stderr. Prints its base URL (`http://127.0.0.1:<port>/v1`).

    python3 tests/python/scripted_model.py script.json
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

SCRIPT = json.load(open(sys.argv[1]))


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        print(json.dumps(body["messages"][-1]), file=sys.stderr, flush=True)
        if self.path != "/v1/chat/completions" or not SCRIPT:
            self.send_response(404)
            self.end_headers()
            return
        turn = SCRIPT.pop(0)
        message = {"role": "assistant", "content": turn.get("content")}
        if "tool_calls" in turn:
            message["tool_calls"] = [
                {"id": c["id"], "type": "function",
                 "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
                for c in turn["tool_calls"]
            ]
        answer = {"choices": [{"index": 0, "message": message,
                               "finish_reason": "tool_calls" if "tool_calls" in turn else "stop"}],
                  "usage": {"prompt_tokens": 120, "completion_tokens": 20}}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", 0), Handler)
print(f"http://127.0.0.1:{server.server_port}/v1", flush=True)
server.serve_forever()
