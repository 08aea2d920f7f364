import type { Client } from '@modelcontextprotocol/sdk/client/index.js';

/** Where the agent's MCP server lives and the bearer token it must present. */
export interface McpTarget {
  url: string;
  token: string | undefined;
}

export interface McpToolResult {
  text: string;
  isError: boolean;
}

/** The target handed over by the protocol wins; the env pair is the fallback for running an agent by hand. */
export function mcpTargetFrom(fromProtocol: McpTarget | undefined, env: NodeJS.ProcessEnv = process.env): McpTarget | undefined {
  if (fromProtocol) return fromProtocol;
  const url = env.KANDEV_MCP_URL;
  return url ? { url, token: env.KANDEV_MCP_TOKEN || undefined } : undefined;
}

/** Clarification calls wait for a human, so the SDK's 60 s default would cut them off. */
const TOOL_CALL_TIMEOUT_MS = 60 * 60 * 1000;

/** One MCP client per agent process, connected on first use and reused for every tool call. */
export class McpToolCaller {
  private client: Promise<Client> | undefined;
  private connectedTo: string | undefined;

  async call(target: McpTarget, tool: string, args: Record<string, unknown>, signal: AbortSignal): Promise<McpToolResult> {
    const client = await this.connect(target);
    const result = await client.callTool({ name: tool, arguments: args }, undefined, { signal, timeout: TOOL_CALL_TIMEOUT_MS });
    const content: unknown = result.content;
    const text = Array.isArray(content)
      ? content
          .map((block: unknown) =>
            typeof block === 'object' && block !== null && 'type' in block && block.type === 'text' && 'text' in block && typeof block.text === 'string'
              ? block.text
              : '',
          )
          .join('')
      : JSON.stringify(result.structuredContent ?? result.toolResult ?? null);
    return { text, isError: result.isError === true };
  }

  async close(): Promise<void> {
    const pending = this.client;
    this.client = undefined;
    if (pending) await pending.then((c) => c.close()).catch(() => {});
  }

  private connect(target: McpTarget): Promise<Client> {
    const key = `${target.url}\n${target.token ?? ''}`;
    if (this.client && this.connectedTo === key) return this.client;
    void this.close();
    this.connectedTo = key;
    const headers: Record<string, string> = target.token ? { Authorization: `Bearer ${target.token}` } : {};
    const connecting = loadMcpClient().then(async ({ Client, StreamableHTTPClientTransport }) => {
      const transport = new StreamableHTTPClientTransport(new URL(target.url), { requestInit: { headers } });
      const client = new Client({ name: 'kandev-scripted-agent', version: '0.1.0' });
      await client.connect(transport);
      return client;
    });
    // A failed connect must not poison later steps: forget it so the next call retries.
    connecting.catch(() => {
      if (this.client === connecting) this.client = undefined;
    });
    this.client = connecting;
    return connecting;
  }
}

/**
 * The SDK's client is loaded on the first tool call, not at start: most scripted agents never call
 * a tool, and importing it was about half of their start-up CPU (0.25 of 0.5 s on a 2-core runner),
 * paid on every launch of every test stack and bench run.
 */
async function loadMcpClient() {
  const [{ Client }, { StreamableHTTPClientTransport }] = await Promise.all([
    import('@modelcontextprotocol/sdk/client/index.js'),
    import('@modelcontextprotocol/sdk/client/streamableHttp.js'),
  ]);
  return { Client, StreamableHTTPClientTransport };
}
