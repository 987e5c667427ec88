// The `choose_region` tool on the official TypeScript SDK v2 (`@modelcontextprotocol/server`
// 2.4.0), written the way its documentation shows a multi-round-trip tool: the handler
// reads the answer with `acceptedContent` and, without one, returns
// `inputRequired({ inputRequests: { … inputRequired.elicit(…) } })`. Served by
// `createMcpHandler` (a fresh server per request) on `node:http` through
// `toNodeHandler`, on 127.0.0.1 (a free port); prints its URL on the first line of
// stdout. A peer of hitl in `cargo xtask bench --peers`.
import { createServer } from 'node:http';
import { toNodeHandler } from '@modelcontextprotocol/node';
import { McpServer, acceptedContent, createMcpHandler, inputRequired } from '@modelcontextprotocol/server';
import * as z from 'zod';

const answer = z.object({ response: z.string() });

function factory() {
    const server = new McpServer({ name: 'choose-region-peer', version: '1.0.0' });
    server.registerTool(
        'choose_region',
        { description: 'Asks where to deploy, then says so.', inputSchema: z.object({}) },
        async (_args, ctx) => {
            const given = acceptedContent(ctx.mcpReq.inputResponses, 'region', answer);
            if (given === undefined) {
                return inputRequired({
                    inputRequests: {
                        region: inputRequired.elicit({
                            message: 'Which region should the service deploy to?',
                            requestedSchema: answer
                        })
                    }
                });
            }
            const region = { region: given.response };
            return { content: [{ type: 'text', text: JSON.stringify(region) }], structuredContent: region };
        }
    );
    return server;
}

const handler = toNodeHandler(createMcpHandler(factory));
const http = createServer((req, res) => void handler(req, res));
http.keepAliveTimeout = 60_000;
http.listen(0, '127.0.0.1', () => {
    console.log(`http://127.0.0.1:${http.address().port}/mcp`);
});
