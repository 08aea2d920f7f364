import { describe, expect, it } from 'vitest';
import { agentEnvironment } from '../src/config.js';

describe("the agent's environment (R-9.1)", () => {
  const source = {
    PATH: '/usr/bin',
    HOME: '/work/.homes/w/t',
    TMPDIR: '/work/.homes/w/t/tmp',
    LANG: 'C.UTF-8',
    LC_ALL: 'C',
    HTTPS_PROXY: 'http://proxy:3128',
    AGENTCTL_MCP_TOKEN: 'token',
    AGENTCTL_SECRET: 'secret',
    AGENTCTL_CWD: '/work/w/t',
    KANDEV_JWT_SECRET: 'jwt',
    KANDEV_AGENT_CATALOGUE: '/etc/catalogue.json',
    OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector',
    NATS_URL: 'nats://x',
    SCRIPTED_AGENT_EVENTS: '/tmp/events',
  };

  it('keeps only the basics', () => {
    expect(agentEnvironment(source, [])).toEqual({
      PATH: '/usr/bin',
      HOME: '/work/.homes/w/t',
      TMPDIR: '/work/.homes/w/t/tmp',
      LANG: 'C.UTF-8',
      LC_ALL: 'C',
      HTTPS_PROXY: 'http://proxy:3128',
    });
  });

  it("adds the names it is told to pass on, never agentctl's secrets", () => {
    const env = agentEnvironment(source, ['SCRIPTED_AGENT_EVENTS', 'AGENTCTL_SECRET', 'AGENTCTL_MCP_TOKEN']);
    expect(env.SCRIPTED_AGENT_EVENTS).toBe('/tmp/events');
    expect(env.AGENTCTL_SECRET).toBeUndefined();
    expect(env.AGENTCTL_MCP_TOKEN).toBeUndefined();
    expect(env.KANDEV_JWT_SECRET).toBeUndefined();
  });
});
