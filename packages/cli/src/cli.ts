import { parseArgs } from 'node:util';
import { ApiClient, ApiRefused } from './client.js';
import { run, UsageError, type Parsed } from './commands.js';

export const USAGE = `usage: kandev <command> [--json]

  workspaces                                   list the workspaces the token may see
  tasks ls --workspace ID [--parent ID]        root tasks (or a task's children); --status S, --q TEXT
  task show|stop ID [--reason R]               a task with its sessions / stop its live agents
  session cancel ID [--reason R]               cancel the session's running turn
  session prompt ID TEXT…                      start a turn on an idle session
  tree preview|pause|resume|cancel|restore ID [--reason R]
  tree budget ID [--set CENTS | --clear]       the tree's spending cap (show, set, or remove)
  inbox --workspace ID                         questions and permission requests waiting on a person
  agents                                       the agent names a session can start with

  --json   print the server's JSON answer instead of a table

environment: KANDEV_URL (default http://127.0.0.1:8080), KANDEV_TOKEN (an operator token: npm run token -- operator)
exit codes: 0 done, 1 usage error, 2 refused by the server (its error code is printed), 3 server unreachable`;

/** Exit codes scripts can rely on (README, docs/operations.md). */
export const EXIT = { ok: 0, usage: 1, refused: 2, unreachable: 3 } as const;

export async function main(argv: string[], env: NodeJS.ProcessEnv, out: (s: string) => void, err: (s: string) => void): Promise<number> {
  let parsed: Parsed & { values: { json?: boolean; help?: boolean } };
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: {
        json: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
        workspace: { type: 'string' },
        parent: { type: 'string' },
        reason: { type: 'string' },
        set: { type: 'string' },
        clear: { type: 'boolean' },
        status: { type: 'string' },
        q: { type: 'string' },
        limit: { type: 'string' },
      },
    });
  } catch (e) {
    err(`kandev: ${(e as Error).message}\n\n${USAGE}`);
    return EXIT.usage;
  }
  if (parsed.values.help || parsed.positionals[0] === 'help') {
    out(USAGE);
    return EXIT.ok;
  }
  const api = new ApiClient((env.KANDEV_URL ?? 'http://127.0.0.1:8080').replace(/\/+$/, ''), env.KANDEV_TOKEN || null);
  try {
    const r = await run(api, parsed);
    out(parsed.values.json ? JSON.stringify(r.json, null, 2) : r.text);
    return EXIT.ok;
  } catch (e) {
    if (e instanceof UsageError) {
      err(`kandev: ${e.message}\n\n${USAGE}`);
      return EXIT.usage;
    }
    if (e instanceof ApiRefused) {
      if (parsed.values.json) out(JSON.stringify({ error: { code: e.code, message: e.serverMessage, details: e.details, status: e.status } }, null, 2));
      err(`kandev: refused: ${e.code} (${e.status}): ${e.serverMessage}`);
      return EXIT.refused;
    }
    // fetch failed: nothing answered at KANDEV_URL (or it did not speak HTTP/JSON).
    err(`kandev: cannot reach ${api.baseUrl}: ${(e as Error).cause instanceof Error ? ((e as Error).cause as Error).message : (e as Error).message}`);
    return EXIT.unreachable;
  }
}
