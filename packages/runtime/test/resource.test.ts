import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { ATTR_SERVICE_INSTANCE_ID, ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION, ATTR_TELEMETRY_SDK_LANGUAGE } from '@opentelemetry/semantic-conventions';
import { buildResource } from '../src/recording.js';
import { packageVersion, parseResourceAttributes } from '../src/resource.js';

const attrs = (...a: Parameters<typeof buildResource>) => buildResource(...a).attributes;

describe('the resource of exported spans', () => {
  it('names the service, its package version and its INSTANCE_ID, beside the SDK defaults', () => {
    const a = attrs({ serviceName: 'kandev-orchestrator', serviceVersion: '1.2.3', instanceId: 'orchestrator-7' });
    expect(a[ATTR_SERVICE_NAME]).toBe('kandev-orchestrator');
    expect(a[ATTR_SERVICE_VERSION]).toBe('1.2.3');
    expect(a[ATTR_SERVICE_INSTANCE_ID]).toBe('orchestrator-7');
    expect(a[ATTR_TELEMETRY_SDK_LANGUAGE]).toBe('nodejs');
  });

  it('adds OTEL_RESOURCE_ATTRIBUTES, percent-decoded, and lets OTEL_SERVICE_NAME win over both', () => {
    const a = attrs({
      serviceName: 'kandev-mcp',
      serviceVersion: '0.1.0',
      instanceId: 'mcp-1',
      env: {
        OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment.name=staging, service.namespace=kandev,team=agent%20ops,service.name=from-attributes',
        OTEL_SERVICE_NAME: 'edge-mcp',
      },
    });
    expect(a['deployment.environment.name']).toBe('staging');
    expect(a['service.namespace']).toBe('kandev');
    expect(a.team).toBe('agent ops');
    expect(a[ATTR_SERVICE_NAME]).toBe('edge-mcp');
    expect(a[ATTR_SERVICE_INSTANCE_ID]).toBe('mcp-1');
    // Without OTEL_SERVICE_NAME the attribute list's service.name wins over the default.
    expect(attrs({ serviceName: 'kandev-mcp', env: { OTEL_RESOURCE_ATTRIBUTES: 'service.name=from-attributes' } })[ATTR_SERVICE_NAME]).toBe('from-attributes');
    // An operator may set the version or instance through the variable too (it is the more specific setting).
    expect(attrs({ serviceName: 's', serviceVersion: '0.1.0', env: { OTEL_RESOURCE_ATTRIBUTES: 'service.version=0.1.0-rc1' } })[ATTR_SERVICE_VERSION]).toBe(
      '0.1.0-rc1',
    );
  });

  it('keeps its own service identity when told to (agentctl runs in its lifecycle’s environment)', () => {
    const a = attrs({
      serviceName: 'kandev-agentctl',
      serviceVersion: '0.1.0',
      instanceId: 'exec-1',
      ownIdentity: true,
      env: {
        OTEL_RESOURCE_ATTRIBUTES: 'service.name=kandev-lifecycle,service.instance.id=lifecycle-1,deployment.environment.name=prod',
        OTEL_SERVICE_NAME: 'kandev-lifecycle',
      },
    });
    expect(a[ATTR_SERVICE_NAME]).toBe('kandev-agentctl');
    expect(a[ATTR_SERVICE_INSTANCE_ID]).toBe('exec-1');
    expect(a['deployment.environment.name']).toBe('prod');
  });

  it('skips malformed pairs of OTEL_RESOURCE_ATTRIBUTES and keeps the rest', () => {
    expect(parseResourceAttributes('a=1,novalue,=x,b=%E0%A4%A,c=x=y, d = 2 ,')).toEqual({ a: '1', c: 'x=y', d: '2' });
    expect(parseResourceAttributes(undefined)).toEqual({});
    expect(parseResourceAttributes('')).toEqual({});
  });

  it('reads service.version from the nearest package.json', () => {
    const own = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };
    expect(packageVersion(import.meta.url)).toBe(own.version);
    expect(packageVersion('file:///')).toBeUndefined();
  });
});
