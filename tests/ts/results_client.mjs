// Results SDK clients accept (#29): the official TypeScript SDK (v1, a 2025-era
// client, against `hitl serve --legacy-elicitation`) calls reviewed tools of the real
// filesystem server, whose tools declare an `outputSchema`, and answers each pushed
// review question with a decision. It lists the tools first, as clients do, so it checks
// each result against the tool's output schema.
// Usage: node results_client.mjs <node_modules folder of the SDK> <hitl MCP URL> <allowed folder>
// Prints one JSON line per call: {"client", "case", "is_error", "structured", "text"}, or
// {"client", "case", "exception"} when the client threw.
import path from "node:path";
import { pathToFileURL } from "node:url";

const [modules, url, folder] = process.argv.slice(2);
const load = (file) => import(pathToFileURL(path.join(modules, file)).href);
const { Client } = await load("@modelcontextprotocol/sdk/dist/esm/client/index.js");
const { StreamableHTTPClientTransport } = await load("@modelcontextprotocol/sdk/dist/esm/client/streamableHttp.js");
const { ElicitRequestSchema } = await load("@modelcontextprotocol/sdk/dist/esm/types.js");

const cases = {
  respond_json: { decision: "respond", message: JSON.stringify({ content: "from the reviewer" }) },
  respond_text: { decision: "respond", message: "the file is not there" },
  reject: { decision: "reject", message: "not this file" },
  approve: { decision: "approve" },
};
const file = path.join(folder, "note-ts.txt");
const read = ["fs.read_text_file", { path: file }];
const calls = [
  ["approve", "fs.write_file", { path: file, content: "written through hitl" }],
  ["respond_json", ...read],
  ["respond_text", ...read],
  ["reject", ...read],
  ["approve", ...read],
];

for (const [name, tool, args] of calls) {
  const client = new Client({ name: "hitl-results-test", version: "1.0.0" },
    { capabilities: { elicitation: { form: {} } } });
  client.setRequestHandler(ElicitRequestSchema, async () => ({ action: "accept", content: cases[name] }));
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  try {
    await client.listTools();
    const result = await client.callTool({ name: tool, arguments: args });
    console.log(JSON.stringify({ client: "ts", case: name, is_error: result.isError === true,
      structured: result.structuredContent ?? null, text: result.content?.[0]?.text ?? null }));
  } catch (error) {
    console.log(JSON.stringify({ client: "ts", case: name, exception: String(error) }));
  }
  await client.close();
}
