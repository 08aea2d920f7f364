import type { ApiClient, TreeAction } from './client.js';
import { cents, fields, table } from './table.js';

/** A command line the CLI cannot run as given: exit 1 with the usage. */
export class UsageError extends Error {}

export interface Parsed {
  positionals: string[];
  values: { workspace?: string; parent?: string; reason?: string; set?: string; clear?: boolean; status?: string; q?: string; limit?: string };
}
/** What a command answers: the server's JSON (for `--json`) and its human rendering. */
export interface Output {
  json: unknown;
  text: string;
}

const need = (v: string | undefined, what: string): string => {
  if (!v) throw new UsageError(`missing ${what}`);
  return v;
};
const noMore = (rest: string[]) => {
  if (rest.length) throw new UsageError(`unexpected argument ${JSON.stringify(rest[0])}`);
};
const int = (v: string | undefined, what: string): number | undefined => {
  if (v === undefined) return undefined;
  if (!/^\d+$/.test(v)) throw new UsageError(`${what} must be a whole number, not ${JSON.stringify(v)}`);
  return Number(v);
};
const TREE_ACTIONS: readonly TreeAction[] = ['pause', 'resume', 'cancel', 'restore'];

/** Runs one parsed command against the API. Throws UsageError (exit 1) or ApiRefused (exit 2). */
export async function run(api: ApiClient, { positionals, values }: Parsed): Promise<Output> {
  const [group, verb, ...rest] = positionals;
  switch (group) {
    case 'workspaces': {
      noMore([verb, ...rest].filter((x): x is string => x !== undefined));
      const page = await api.workspaces({ limit: int(values.limit, '--limit') ?? 100 });
      return {
        json: page,
        text:
          table(
            ['ID', 'NAME', 'CREATED'],
            page.items.map((w) => [w.id, w.name, w.created_at]),
          ) + more(page.next_cursor),
      };
    }
    case 'tasks': {
      if (verb !== 'ls') throw new UsageError('tasks: the command is `tasks ls --workspace ID [--parent ID]`');
      noMore(rest);
      const page = await api.tasks({
        workspace_id: need(values.workspace, '--workspace ID'),
        ...(values.parent ? { parent_id: values.parent } : { roots: true }),
        ...(values.status ? { status: values.status } : {}),
        ...(values.q ? { q: values.q } : {}),
        limit: int(values.limit, '--limit') ?? 100,
      });
      const rows = page.items.map((t) => [
        t.id,
        t.status,
        t.hold ? (t.hold.mode === 'pause' ? 'paused' : 'cancelled') : '',
        t.child_count,
        t.active_session_count,
        t.title,
      ]);
      return { json: page, text: table(['ID', 'STATUS', 'HOLD', 'CHILDREN', 'LIVE', 'TITLE'], rows) + more(page.next_cursor) };
    }
    case 'task': {
      const [id, ...extra] = rest;
      noMore(extra);
      if (verb === 'show') {
        const t = await api.task(need(id, 'task ID'));
        const head = fields([
          ['id', t.id],
          ['title', t.title],
          ['status', t.status],
          ['workspace', t.workspace_id],
          ['parent', t.parent_id],
          ['agent', t.agent],
          ['updated', t.updated_at],
        ]);
        const sessions = t.sessions.length
          ? `\n\n${table(
              ['SESSION', 'STATE', 'AGENT', 'STARTED'],
              t.sessions.map((s) => [s.id, s.state, s.agent, s.started_at]),
            )}`
          : '\n\nno sessions';
        return { json: t, text: head + sessions };
      }
      if (verb === 'stop') {
        const r = await api.stopTask(need(id, 'task ID'), values.reason);
        return { json: r, text: `stopped ${r.task_id}: ${r.executions.length} execution${r.executions.length === 1 ? '' : 's'}` };
      }
      throw new UsageError('task: the commands are `task show ID` and `task stop ID [--reason R]`');
    }
    case 'session': {
      const [id, ...words] = rest;
      if (verb === 'cancel') {
        noMore(words);
        const r = await api.cancelTurn(need(id, 'session ID'), values.reason);
        return { json: r, text: `cancelled the turn of session ${r.session_id}` };
      }
      if (verb === 'prompt') {
        const prompt = words.join(' ').trim();
        if (!prompt) throw new UsageError('session prompt: the prompt text follows the session ID');
        const r = await api.prompt(need(id, 'session ID'), prompt);
        return { json: r, text: `turn ${r.turn_id} started` };
      }
      throw new UsageError('session: the commands are `session cancel ID` and `session prompt ID TEXT…`');
    }
    case 'tree': {
      const [id, ...extra] = rest;
      noMore(extra);
      const taskId = need(id, 'task ID');
      if (verb === 'preview') {
        const p = await api.treePreview(taskId);
        const hold = p.active_hold ? `${p.active_hold.mode} hold ${p.active_hold.id} (root ${p.active_hold.root_task_id})` : 'none';
        return {
          json: p,
          text: `${fields([
            ['tasks', p.task_count],
            ['active wakeups', p.active_wakeup_count],
            ['active hold', hold],
          ])}\n\n${table(
            ['ID', 'DEPTH', 'STATUS', 'TITLE'],
            p.tasks.map((t) => [t.id, t.depth, t.status, t.title]),
          )}`,
        };
      }
      if (verb === 'budget') {
        const set = int(values.set, '--set CENTS');
        if (values.clear) {
          if (set !== undefined) throw new UsageError('tree budget: --set and --clear exclude each other');
          await api.clearBudget(taskId);
          return { json: { task_id: taskId, cleared: true }, text: `budget of ${taskId} cleared` };
        }
        const b = set === undefined ? await api.budget(taskId) : await api.setBudget(taskId, set);
        return {
          json: b,
          text: fields([
            ['task', b.task_id],
            ['limit', cents(b.limit_cents)],
            ['spent', cents(b.spent_cents)],
            ['warn at', `${b.warn_percent}%`],
            ['state', b.state],
            ['hold', b.hold_id],
          ]),
        };
      }
      if ((TREE_ACTIONS as readonly string[]).includes(verb ?? '')) {
        const r = await api.tree(verb as TreeAction, taskId, values.reason);
        const h = r.hold;
        return { json: r, text: `${verb}: hold ${h.id} (${h.mode}) on ${h.root_task_id}, ${h.members.length} member${h.members.length === 1 ? '' : 's'}` };
      }
      throw new UsageError('tree: the commands are `tree preview|pause|resume|cancel|restore ID [--reason R]` and `tree budget ID [--set CENTS | --clear]`');
    }
    case 'inbox': {
      noMore([verb, ...rest].filter((x): x is string => x !== undefined));
      const r = await api.inbox(need(values.workspace, '--workspace ID'));
      return {
        json: r,
        text: table(
          ['KIND', 'ID', 'TASK', 'SINCE', 'EXPIRES', 'TEXT'],
          r.items.map((i) => [i.kind, i.id, i.task_title, i.created_at, i.expires_at ?? '-', i.text]),
        ),
      };
    }
    case 'agents': {
      const r = await api.agents();
      return { json: r, text: r.agents.join('\n') };
    }
    default:
      throw new UsageError(group ? `unknown command ${JSON.stringify(group)}` : 'no command given');
  }
}

const more = (cursor: string | null) => (cursor ? `\n(more: pass --limit, or use --json and next_cursor)` : '');
