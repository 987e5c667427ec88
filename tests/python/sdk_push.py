"""The official MCP Python SDK as a 2025-11-25 client (`mode="legacy"`: initialize, a
session, server-to-client requests on the call's SSE stream) against
`hitl serve --legacy-elicitation`: every example agent the 2026-07-28 suite drives
(`sdk_e2e.py`'s `Modern` tests) completes by push elicitation, answered by the same
elicitation callback. Usage: python3 sdk_push.py http://127.0.0.1:PORT/mcp
"""

import unittest

import sdk_e2e


class Push(sdk_e2e.Modern):
    mode = "legacy"


if __name__ == "__main__":
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(Push)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    raise SystemExit(0 if result.wasSuccessful() else 1)
