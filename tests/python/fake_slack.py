"""A stand-in for Slack's Web API and its interaction callbacks, for the Slack tests.

Listens on 127.0.0.1 (a free port, printed on the first line of stdout):

- `POST /api/chat.postMessage`, `/api/chat.update`, `/api/chat.postEphemeral`: answered as
  Slack does (`{"ok": true, "channel", "ts"}`, or `{"ok": false, "error"}` for a message
  past Slack's limits), each taken call recorded with its bearer token.
- `GET /_calls`: the calls recorded so far, `[{"method", "authorization", "body", "ts"}]`
  (`ts`: what a post was answered with).
- `POST /_click` with `{"url", "user", "action_id", "value", "channel", "ts"}`: sends
  hitl a `block_actions` interaction as Slack does (form-encoded `payload`, signed with
  `X-Slack-Signature` v0 over `v0:<timestamp>:<body>`), and answers
  `{"status", "body"}` with hitl's reply. `"secret"` signs with another secret,
  `"age"` dates the request that many seconds back, `"signature"` sends that one.

Usage: python fake_slack.py SIGNING_SECRET
"""

import hashlib
import hmac
import json
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET = sys.argv[1]
CALLS = []
LOCK = threading.Lock()
NEXT_TS = [1796000000000100]


def interaction(click):
    """The form body Slack posts when `click["user"]` presses a button."""
    payload = {
        "type": "block_actions",
        "user": {"id": click["user"], "username": click["user"].lower(), "team_id": "T0TEAM"},
        "team": {"id": "T0TEAM", "domain": "example"},
        "channel": {"id": click.get("channel", "C0123456789"), "name": "approvals"},
        "container": {"type": "message", "message_ts": click.get("ts", ""), "channel_id": click.get("channel", "")},
        "trigger_id": "1.2.3",
        "response_url": "https://hooks.slack.com/actions/T0TEAM/1/abc",
        "actions": [
            {
                "type": "button",
                "block_id": "hitl_decide",
                "action_id": click["action_id"],
                "value": click.get("value", ""),
                "action_ts": str(time.time()),
            }
        ],
    }
    return urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()


def limits(sent):
    """What Slack would refuse in a message: a block text past 3,000 characters, a
    button value past 2,000, a message text past 40,000, more than 50 blocks."""
    if len(sent.get("text") or "") > 40000:
        return "msg_too_long"
    blocks = sent.get("blocks") or []
    if len(blocks) > 50:
        return "invalid_blocks"
    for block in blocks:
        texts = [block.get("text")] + list(block.get("elements") or [])
        for item in texts:
            if isinstance(item, dict) and isinstance(item.get("text"), str) and len(item["text"]) > 3000:
                return "invalid_blocks"
            if isinstance(item, dict) and len(str(item.get("value", ""))) > 2000:
                return "invalid_blocks"
    return None


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/_calls":
            with LOCK:
                return self.reply(200, list(CALLS))
        self.reply(404, {"ok": False, "error": "unknown_method"})

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path == "/_click":
            return self.click(json.loads(body))
        method = self.path.removeprefix("/api/")
        if method not in ("chat.postMessage", "chat.update", "chat.postEphemeral"):
            return self.reply(404, {"ok": False, "error": "unknown_method"})
        if not self.headers.get("content-type", "").startswith("application/json"):
            return self.reply(200, {"ok": False, "error": "invalid_form_data"})
        sent = json.loads(body)
        problem = limits(sent)
        if problem:
            return self.reply(200, {"ok": False, "error": problem})
        with LOCK:
            NEXT_TS[0] += 1
            ts = f"{NEXT_TS[0] // 1000000}.{NEXT_TS[0] % 1000000:06d}"
            call = {"method": method, "authorization": self.headers.get("authorization"), "body": sent, "ts": ts}
            CALLS.append(call)
        if method == "chat.update":
            return self.reply(200, {"ok": True, "channel": sent.get("channel"), "ts": sent.get("ts")})
        if method == "chat.postEphemeral":
            return self.reply(200, {"ok": True, "message_ts": ts})
        self.reply(200, {"ok": True, "channel": sent.get("channel"), "ts": ts})

    def click(self, click):
        body = interaction(click)
        timestamp = str(int(time.time()) - int(click.get("age", 0)))
        secret = click.get("secret", SECRET).encode()
        signed = b"v0:" + timestamp.encode() + b":" + body
        signature = "v0=" + hmac.new(secret, signed, hashlib.sha256).hexdigest()
        request = urllib.request.Request(
            click["url"],
            data=body,
            method="POST",
            headers={
                "content-type": "application/x-www-form-urlencoded",
                "x-slack-request-timestamp": timestamp,
                "x-slack-signature": click.get("signature", signature),
                "user-agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                status, text = answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            status, text = error.code, error.read().decode()
        self.reply(200, {"status": status, "body": text})


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
