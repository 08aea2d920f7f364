import { describe, expect, it } from 'vitest';
import { agentctlEnvironment } from '../src/agentctl/process.js';

describe("agentctl's environment (R-9.1)", () => {
  const source = {
    PATH: '/usr/bin',
    HOME: '/root',
    LANG: 'C.UTF-8',
    KANDEV_JWT_SECRET: 'jwt',
    KANDEV_AGENT_CATALOGUE: '/etc/catalogue.json',
    DATABASE_URL: 'postgres://x',
    NATS_URL: 'nats://x',
    NATS_PASS: 'p',
    PGPASSWORD: 'p',
    INSTANCE_ID: 'life-1',
    OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector',
    AGENTCTL_LOG_LEVEL: 'debug',
    SCRIPTED_AGENT_EVENTS: '/tmp/events',
    SOMETHING_ELSE: 'x',
  };
  const opts = { mcpToken: 'tok', cwd: '/w/ws/t', home: '/w/.homes/ws/t', tmp: '/w/.homes/ws/t/tmp', identity: { uid: 20001, gid: 20001 } };

  it("gets the basics, its own settings and the passed-through names; never the control plane's credentials", () => {
    const env = agentctlEnvironment(source, { ...opts, passEnv: ['SCRIPTED_AGENT_EVENTS', 'KANDEV_JWT_SECRET', 'NATS_PASS', 'MISSING'] });
    expect(env).toEqual({
      PATH: '/usr/bin',
      LANG: 'C.UTF-8',
      KANDEV_AGENT_CATALOGUE: '/etc/catalogue.json',
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector',
      AGENTCTL_LOG_LEVEL: 'debug',
      SCRIPTED_AGENT_EVENTS: '/tmp/events',
      AGENTCTL_MCP_TOKEN: 'tok',
      AGENTCTL_CWD: '/w/ws/t',
      AGENTCTL_AGENT_ENV: 'SCRIPTED_AGENT_EVENTS',
      HOME: '/w/.homes/ws/t',
      TMPDIR: '/w/.homes/ws/t/tmp',
      USER: 'agent-20001',
      LOGNAME: 'agent-20001',
    });
  });
});
