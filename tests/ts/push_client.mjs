// The official TypeScript SDK (v1) as a 2025-era client against
// `hitl serve --legacy-elicitation`: it declares elicitation (form and URL) and
// answers each `elicitation/create` the server pushes on the call's stream.
// Usage: node push_client.mjs <node_modules folder of the SDK> <hitl MCP URL>
// Prints one JSON line per tool: {"tool", "output", "asked": [messages]}; exits 1 on error.
import path from "node:path";
import { pathToFileURL } from "node:url";

const [modules, url] = process.argv.slice(2);
const load = (file) => import(pathToFileURL(path.join(modules, file)).href);
const { Client } = await load("@modelcontextprotocol/sdk/dist/esm/client/index.js");
const { StreamableHTTPClientTransport } = await load("@modelcontextprotocol/sdk/dist/esm/client/streamableHttp.js");
const { ElicitRequestSchema } = await load("@modelcontextprotocol/sdk/dist/esm/types.js");

const answers = {
  "What is your name?": { name: "Ada" },
  "Where should the service deploy?": { region: "eu-west-1", replicas: 3 },
  "What is your favorite color?": { response: "blue" },
  "What is your quest?": { response: "grail" },
};

for (const tool of ["greeter", "plan_deployment", "survey", "connect_calendar"]) {
  const client = new Client({ name: "hitl-push-test", version: "1.0.0" },
    { capabilities: { elicitation: { form: {}, url: {} } } });
  const asked = [];
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    asked.push(request.params.message);
    if (request.params.mode === "url") return { action: "accept" };
    const content = answers[request.params.message];
    return content ? { action: "accept", content } : { action: "decline" };
  });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  const result = await client.callTool({ name: tool, arguments: {} });
  await client.close();
  if (result.isError) {
    console.error(JSON.stringify({ tool, result }));
    process.exit(1);
  }
  console.log(JSON.stringify({ tool, output: JSON.parse(result.content[0].text), asked }));
}
