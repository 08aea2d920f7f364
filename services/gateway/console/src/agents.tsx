import { useEffect, useState } from 'preact/hooks';
import { get } from './api';

let cached: Promise<string[]> | null = null;

/**
 * The agent names a session can start with (GET /agents, the lifecycle catalogue), read once per page
 * load: the catalogue changes with a deployment, not while an operator fills a form. null while
 * loading or when the gateway cannot say (the form then takes a typed name).
 */
export function useAgents(): string[] | null {
  const [agents, setAgents] = useState<string[] | null>(null);
  useEffect(() => {
    cached ??= get<{ agents: string[] }>('/agents').then((r) => r.agents);
    let live = true;
    cached.then(
      (a) => live && setAgents(a),
      () => {
        cached = null; // ask again next time
        if (live) setAgents([]);
      },
    );
    return () => void (live = false);
  }, []);
  return agents;
}

/** An agent picker: a select of the catalogue's names, or a text field when the gateway cannot list them. */
export function AgentField({ id, value, onChange, agents }: { id: string; value: string; onChange: (v: string) => void; agents: string[] | null }) {
  if (agents === null)
    return (
      <select id={id} disabled aria-busy="true">
        <option>Loading agents…</option>
      </select>
    );
  if (agents && agents.length > 0)
    return (
      <select id={id} value={value} onChange={(e) => onChange((e.target as HTMLSelectElement).value)}>
        <option value="">Default agent</option>
        {agents.map((a) => (
          <option value={a}>{a}</option>
        ))}
      </select>
    );
  return <input id={id} value={value} placeholder="default agent" onInput={(e) => onChange((e.target as HTMLInputElement).value)} />;
}
