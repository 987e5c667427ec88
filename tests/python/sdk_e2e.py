"""hitl driven by the official MCP Python SDK (a client no one here wrote).

Usage: python sdk_e2e.py http://127.0.0.1:PORT/mcp

In 2026-07-28 mode (and in "auto" mode, which must pick it), `Client.call_tool` with an
elicitation callback completes `greeter`, `plan_deployment`, `survey`,
`connect_calendar`, the two rounds of `onboarding`, and the release gate
`deploy_production_release`; in legacy mode a pause gives the error result for clients
that can't answer. Exits non-zero on failure.
"""

import asyncio
import json
import sys
import unittest

import mcp_types as types
from mcp import Client

URL = sys.argv.pop(1) if len(sys.argv) > 1 else "http://127.0.0.1:8123/mcp"

ANSWERS = {
    "What is your name?": {"name": "Ada"},
    "Deploying api to PRODUCTION (1.2.3). Confirm release?": {"confirm": True},
    "How old are you?": {"response": 36},
    "Where should the service deploy?": {"region": "eu-west-1", "replicas": 3},
    "What is your favorite color?": {"response": "blue"},
    "What is your quest?": {"response": "grail"},
}


class Asker:
    """An elicitation callback that answers known questions and records what it saw."""

    def __init__(self, action="accept"):
        self.seen = []
        self.action = action

    async def __call__(self, context, params):
        self.seen.append(params)
        if self.action != "accept":
            return types.ElicitResult(action=self.action)
        if getattr(params, "mode", None) == "url":
            return types.ElicitResult(action="accept")
        schema = params.requested_schema
        fields = schema["properties"] if isinstance(schema, dict) else schema.properties
        answer = ANSWERS[params.message]
        if "response" in fields and "response" not in answer:
            # A text question (onboarding's first) asks in one `response` field.
            answer = {"response": next(iter(answer.values()))}
        return types.ElicitResult(action="accept", content=answer)


def run(coro):
    return asyncio.run(coro)


async def call(mode, tool, arguments=None, asker=None):
    async with Client(URL, mode=mode, elicitation_callback=asker or Asker()) as client:
        return await client.call_tool(tool, arguments or {})


class Modern(unittest.TestCase):
    mode = "2026-07-28"

    def output(self, tool, asker=None, arguments=None):
        result = run(call(self.mode, tool, arguments, asker=asker))
        self.assertFalse(result.is_error, result)
        return json.loads(result.content[0].text)

    def test_greeter(self):
        asker = Asker()
        self.assertEqual(self.output("greeter", asker), {"greeting": "Hello, Ada!"})
        self.assertEqual(asker.seen[0].message, "What is your name?")

    def test_plan_deployment(self):
        asker = Asker()
        self.assertEqual(self.output("plan_deployment", asker), {"region": "eu-west-1", "replicas": 3})
        schema = asker.seen[0].requested_schema
        schema = schema if isinstance(schema, dict) else schema.model_dump(exclude_none=True)
        self.assertEqual(schema["properties"]["replicas"], {"maximum": 10, "minimum": 1, "title": "Replicas", "type": "integer"})

    def test_survey_asks_both_in_one_round(self):
        asker = Asker()
        self.assertEqual(self.output("survey", asker), {"color": "blue", "quest": "grail"})
        self.assertEqual(len(asker.seen), 2)

    def test_deploy_production_release_is_gated_by_the_user(self):
        args = {"service": "api", "version": "1.2.3"}
        self.assertEqual(
            self.output("deploy_production_release", arguments=args),
            {"result": "Successfully released api v1.2.3 to prod."},
        )
        self.assertEqual(
            self.output("deploy_production_release", Asker("decline"), arguments=args),
            {"result": "Deployment aborted by user."},
        )

    def test_onboarding_takes_two_rounds(self):
        asker = Asker()
        self.assertEqual(self.output("onboarding", asker), {"name": "Ada", "age": 36})
        self.assertEqual([p.message for p in asker.seen], ["What is your name?", "How old are you?"])

    def test_connect_calendar(self):
        asker = Asker()
        self.assertEqual(self.output("connect_calendar", asker), {"status": "connected"})
        self.assertEqual(asker.seen[0].url, "https://example.com/oauth/calendar/start")


class Auto(Modern):
    """`mode="auto"` probes server/discover and must pick the modern wire."""

    mode = "auto"


class Legacy(unittest.TestCase):
    def test_a_pause_is_an_error_result(self):
        for tool in ["greeter", "plan_deployment", "survey", "connect_calendar"]:
            result = run(call("legacy", tool))
            self.assertTrue(result.is_error, tool)
            self.assertEqual(
                result.content[0].text, "This tool paused to ask for human input, and this client can't answer it."
            )
            pending = json.loads(result.content[1].text)
            self.assertGreaterEqual(len(pending), 1)

    def test_tools_are_listed(self):
        async def names():
            async with Client(URL, mode="legacy") as client:
                return [t.name for t in (await client.list_tools()).tools]

        self.assertIn("greeter", run(names()))


if __name__ == "__main__":
    unittest.main(verbosity=2)
