"""An upstream's resources and prompts through hitl, read by the official MCP Python SDK.

Usage: python sdk_passthrough.py http://127.0.0.1:PORT/mcp

hitl fronts server-everything as `ev`: in 2026-07-28 and in legacy mode the SDK lists
the resources, reads a static document, and gets the prefixed prompt `ev.args-prompt`.
Exits non-zero on failure.
"""

import asyncio
import sys
import unittest

from mcp import Client

URL = sys.argv.pop(1) if len(sys.argv) > 1 else "http://127.0.0.1:8123/mcp"


async def read_and_get(mode):
    async with Client(URL, mode=mode) as client:
        listed = await client.list_resources()
        documents = [str(r.uri) for r in listed.resources if "/static/document/" in str(r.uri)]
        read = await client.read_resource(documents[0])
        prompts = await client.list_prompts()
        names = [p.name for p in prompts.prompts]
        got = await client.get_prompt("ev.args-prompt", {"city": "Porto"})
        return documents[0], read, names, got


class Passthrough(unittest.TestCase):
    def check(self, mode):
        document, read, names, got = asyncio.run(read_and_get(mode))
        self.assertEqual(str(read.contents[0].uri), document)
        self.assertTrue(read.contents[0].text)
        self.assertIn("ev.simple-prompt", names)
        self.assertIn("Porto", got.messages[0].content.text)

    def test_modern(self):
        self.check("2026-07-28")

    def test_legacy(self):
        self.check("legacy")


if __name__ == "__main__":
    unittest.main(verbosity=2)
