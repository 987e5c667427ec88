// An upstream MCP server for the gateway tests, built with the official TypeScript SDK
// (v1): Streamable HTTP with sessions (2025-era). Usage:
//   node upstream_server.mjs <node_modules folder of the SDK>
// Prints its URL on the first line. Its destructive tool counts its executions, which
// the tests read back with the `executions` tool.
import http from "node:http";
import { randomUUID } from "node:crypto";
import path from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.argv[2];
const load = (file) => import(pathToFileURL(path.join(modules, file)).href);
const { McpServer } = await load("@modelcontextprotocol/sdk/dist/esm/server/mcp.js");
const { StreamableHTTPServerTransport } = await load("@modelcontextprotocol/sdk/dist/esm/server/streamableHttp.js");
const { z } = await load("zod/index.js");

const executions = {};
const text = (value) => ({ content: [{ type: "text", text: String(value) }] });

function newServer() {
  const server = new McpServer({ name: "hitl-test-ts-upstream", version: "1.0.0" });
  server.registerTool("echo", { description: "Returns the text it is given.", inputSchema: { text: z.string() } },
    async ({ text: t }) => text(t));
  server.registerTool("drop_partition",
    { description: "Drops a partition (counts its executions).", inputSchema: { partition: z.string(), database: z.string() } },
    async ({ partition, database }) => {
      executions.drop_partition = (executions.drop_partition ?? 0) + 1;
      return text(`dropped ${partition} on ${database}`);
    });
  // Asks the client mid-call (2025-era push elicitation) before it truncates.
  server.registerTool("truncate",
    { description: "Truncates a table once the user confirms.", inputSchema: { table: z.string() } },
    async ({ table }, extra) => {
      const answer = await server.server.elicitInput({
        message: `Really truncate ${table}?`,
        requestedSchema: { type: "object", properties: { confirm: { type: "boolean" } }, required: ["confirm"] },
      }, { relatedRequestId: extra.requestId });
      if (answer.action !== "accept" || !answer.content?.confirm) return text(`kept ${table}`);
      executions.truncate = (executions.truncate ?? 0) + 1;
      return text(`truncated ${table}`);
    });
  // Adds a tool at run time, in every session (each its own McpServer): the SDK tells
  // each session's GET stream the list changed.
  server.registerTool("grow", { description: "Adds a tool called name.", inputSchema: { name: z.string() } },
    async ({ name }) => {
      for (const each of servers) {
        each.registerTool(name, { description: "Added at run time." }, async () => text(`I am ${name}`));
      }
      return text(`added ${name}`);
    });
  server.registerTool("executions", { description: "How many times a tool ran.", inputSchema: { tool: z.string() } },
    async ({ tool }) => text(executions[tool] ?? 0));
  servers.push(server);
  return server;
}

// Every session's server, so a tool added at run time is added to all.
const servers = [];

const sessions = {};
const listener = http.createServer(async (request, response) => {
  const chunks = [];
  for await (const chunk of request) chunks.push(chunk);
  let body;
  try {
    body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString()) : undefined;
  } catch {
    response.writeHead(400).end();
    return;
  }
  let transport = sessions[request.headers["mcp-session-id"]];
  if (!transport) {
    if (body?.method !== "initialize") {
      const error = { jsonrpc: "2.0", id: null, error: { code: -32000, message: "Bad Request: no valid session" } };
      response.writeHead(400, { "content-type": "application/json" }).end(JSON.stringify(error));
      return;
    }
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => { sessions[id] = transport; },
    });
    await newServer().connect(transport);
  }
  await transport.handleRequest(request, response, body);
});
listener.listen(0, "127.0.0.1", () => {
  console.log(`http://127.0.0.1:${listener.address().port}/mcp`);
});
