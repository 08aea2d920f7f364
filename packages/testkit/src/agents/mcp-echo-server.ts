import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';

/*
 * A tiny stateless Streamable HTTP MCP server for tests of the scripted agents' MCP steps. It serves
 * `echo` {text} and a canned `ask_user_questions`, and records every tool call with the
 * Authorization header it came with.
 */

export interface RecordedToolCall {
  tool: string;
  args: Record<string, unknown>;
  authorization: string | undefined;
}

export interface EchoMcpServer {
  url: string;
  calls: RecordedToolCall[];
  /** Authorization header of every HTTP request, in order. */
  authorizations: Array<string | undefined>;
  close(): Promise<void>;
}

export interface EchoMcpServerOptions {
  /** When set, requests without `Authorization: Bearer <token>` get 401. */
  requiredToken?: string;
}

export async function startEchoMcpServer(options: EchoMcpServerOptions = {}): Promise<EchoMcpServer> {
  const calls: RecordedToolCall[] = [];
  const authorizations: Array<string | undefined> = [];

  const buildServer = (authorization: string | undefined): McpServer => {
    const server = new McpServer({ name: 'echo-mcp', version: '0.1.0' });
    server.registerTool('echo', { description: 'Echoes its text', inputSchema: { text: z.string() } }, async (args) => {
      calls.push({ tool: 'echo', args, authorization });
      return { content: [{ type: 'text', text: `echo: ${args.text}` }] };
    });
    server.registerTool(
      'ask_user_questions',
      {
        description: 'Answers every question with "yes"',
        inputSchema: { questions: z.array(z.object({ id: z.string().optional(), text: z.string(), options: z.array(z.string()).optional() })) },
      },
      async (args) => {
        calls.push({ tool: 'ask_user_questions', args, authorization });
        const answers = args.questions.map((q, i) => ({ question_id: q.id ?? `q${i + 1}`, answer: 'yes' }));
        return { content: [{ type: 'text', text: JSON.stringify({ answers }) }] };
      },
    );
    return server;
  };

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const authorization = req.headers.authorization;
    authorizations.push(authorization);
    if (options.requiredToken && authorization !== `Bearer ${options.requiredToken}`) {
      res.writeHead(401, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'unauthorized' }));
      return;
    }
    if (req.method !== 'POST') {
      // Stateless: no standalone SSE stream and no sessions to delete.
      res.writeHead(405, { allow: 'POST' }).end();
      return;
    }
    const server = buildServer(authorization);
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res);
  };

  const http = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (!res.headersSent) res.writeHead(500).end(String(err));
    });
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', () => resolve()));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    calls,
    authorizations,
    close: () =>
      new Promise<void>((resolve) => {
        http.closeAllConnections();
        http.close(() => resolve());
      }),
  };
}
