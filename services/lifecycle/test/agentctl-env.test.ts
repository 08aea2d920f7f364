import { describe, expect, it } from 'vitest';
import { agentctlEnvironment, agentctlSettings } from '../src/agentctl/process.js';

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

  it('gets every setting of its execution as AGENTCTL_* (never argv), each one set so none is inherited', () => {
    const base = {
      agent: 'scripted-acp',
      executionId: 'e-1',
      sessionId: 's-1',
      taskId: 't-1',
      mcpUrl: 'http://127.0.0.1:8090/mcp',
      cancelTimeoutMs: 0,
      handshakeTimeoutMs: 9_000_000,
      agentNice: 25,
      ownerSilenceMs: 30_000,
      logFile: '/s/agentctl-logs/l/e-1.log',
    };
    expect(agentctlSettings({ ...base, exitWithParent: true })).toEqual({
      AGENTCTL_AGENT: 'scripted-acp',
      AGENTCTL_PORT: '0',
      AGENTCTL_HOST: '',
      AGENTCTL_EXECUTION_ID: 'e-1',
      AGENTCTL_SESSION_ID: 's-1',
      AGENTCTL_TASK_ID: 't-1',
      AGENTCTL_MCP_URL: 'http://127.0.0.1:8090/mcp',
      AGENTCTL_CANCEL_TIMEOUT_MS: '1',
      AGENTCTL_HANDSHAKE_TIMEOUT_MS: '600000',
      AGENTCTL_AGENT_NICE: '19',
      AGENTCTL_SECRET_FD: '3',
      AGENTCTL_EXIT_WITH_PARENT: '1',
      AGENTCTL_OWNER_SILENCE_MS: '30000',
      AGENTCTL_LOG_FILE: '/s/agentctl-logs/l/e-1.log',
    });
    expect(agentctlSettings({ ...base, exitWithParent: false })).toMatchObject({
      AGENTCTL_EXIT_WITH_PARENT: '',
      AGENTCTL_OWNER_SILENCE_MS: '',
      AGENTCTL_LOG_FILE: '',
    });
  });
});
