"""Runs a stdio MCP server (hitl) between a client and its pipes, recording what it
writes on standard output, for the stdio tests.

Usage: python stdio_recorder.py DIR -- COMMAND [ARGS...]
The server reads this process's standard input itself; each chunk it writes on
standard output is passed on and appended to DIR/stdout. DIR/pid holds its process id
and DIR/exit its exit status once it ended (negative: the signal that ended it). Exits
with the server's status.
"""

import os
import subprocess
import sys

folder = sys.argv[1]
command = sys.argv[sys.argv.index("--") + 1 :]
server = subprocess.Popen(command, stdout=subprocess.PIPE)
with open(os.path.join(folder, "pid"), "w") as out:
    out.write(str(server.pid))
with open(os.path.join(folder, "stdout"), "wb") as record:
    while chunk := os.read(server.stdout.fileno(), 65536):
        record.write(chunk)
        record.flush()
        os.write(sys.stdout.fileno(), chunk)
status = server.wait()
with open(os.path.join(folder, "exit"), "w") as out:
    out.write(str(status))
sys.exit(0 if status == 0 else 1)
