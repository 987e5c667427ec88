"""A wrapper between hitl and a stdio MCP server that kills the server (SIGKILL) as soon
as it has passed it a `tools/call`: the request was sent, and its outcome is unknown.

Usage: python kill_on_call.py LOG -- COMMAND...

Every `tools/call` line it passes on is appended to LOG (so a test can count how many
times a call reached the server); it exits when the server does.
"""

import os
import signal
import subprocess
import sys
import threading

log, command = sys.argv[1], sys.argv[sys.argv.index("--") + 1 :]
server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=sys.stdout.buffer, bufsize=0)


def forward():
    for line in sys.stdin.buffer:
        server.stdin.write(line)
        server.stdin.flush()
        if b'"tools/call"' in line:
            with open(log, "ab") as f:
                f.write(line)
            os.kill(server.pid, signal.SIGKILL)
            return


threading.Thread(target=forward, daemon=True).start()
sys.exit(server.wait() and 1)
