// The official TypeScript SDK (v1) as a desktop host would run hitl: StdioClientTransport
// starts `hitl serve --stdio` (through the command after `--`), the client declares form
// elicitation and answers the review questions hitl pushes: approve the first write,
// reject the second.
// Usage: node stdio_client.mjs <node_modules folder of the SDK> <folder> -- <command...>
// Prints one JSON line per step: {"step", ...}; exits 1 on error.
import path from "node:path";
import { pathToFileURL } from "node:url";

const [modules, folder] = process.argv.slice(2);
const command = process.argv.slice(process.argv.indexOf("--") + 1);
const load = (file) => import(pathToFileURL(path.join(modules, file)).href);
const { Client } = await load("@modelcontextprotocol/sdk/dist/esm/client/index.js");
const { StdioClientTransport } = await load("@modelcontextprotocol/sdk/dist/esm/client/stdio.js");
const { ElicitRequestSchema } = await load("@modelcontextprotocol/sdk/dist/esm/types.js");

const client = new Client({ name: "hitl-stdio-test", version: "1.0.0" }, { capabilities: { elicitation: { form: {} } } });
const decisions = ["approve", "reject"];
const asked = [];
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  asked.push(request.params.message);
  return { action: "accept", content: { decision: decisions.shift() } };
});
const transport = new StdioClientTransport({
  command: command[0],
  args: command.slice(1),
  env: { ...process.env },
  stderr: "inherit",
});
await client.connect(transport);
const out = (line) => console.log(JSON.stringify(line));
const { tools } = await client.listTools();
out({ step: "list", tools: tools.map((t) => t.name).sort() });
const listed = await client.callTool({ name: "fs.list_directory", arguments: { path: folder } });
out({ step: "allowed", is_error: Boolean(listed.isError) });
for (const [step, file] of [["approve", "approved.txt"], ["reject", "rejected.txt"]]) {
  const result = await client.callTool({
    name: "fs.write_file",
    arguments: { path: path.join(folder, file), content: "written over stdio" },
  });
  out({ step, is_error: Boolean(result.isError), text: result.content?.[0]?.text });
}
out({ step: "asked", messages: asked });
await client.close();
