import { describe, expect, it } from 'vitest';
import { podSecurityViolations } from './pod-security.js';

/* The offline Pod Security check the manifest tests rely on: it must see what admission would refuse. */

const restrictedPod = () => ({
  securityContext: { runAsNonRoot: true, runAsUser: 1000, seccompProfile: { type: 'RuntimeDefault' } },
  containers: [{ name: 'app', securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } } }],
  volumes: [{ name: 'tmp', emptyDir: {} }],
});

describe('podSecurityViolations', () => {
  it('passes a pod that meets restricted at every level', () => {
    for (const level of ['privileged', 'baseline', 'restricted'] as const) expect(podSecurityViolations(restrictedPod(), level)).toEqual([]);
  });

  it("names what keeps lifecycle's pod from restricted and from baseline", () => {
    const pod = restrictedPod();
    pod.securityContext = { runAsNonRoot: false, runAsUser: 0, seccompProfile: { type: 'RuntimeDefault' } };
    (pod.containers[0]!.securityContext.capabilities as { add?: string[] }).add = ['SETUID', 'SETGID', 'CHOWN', 'KILL', 'DAC_READ_SEARCH'];
    expect(podSecurityViolations(pod, 'baseline')).toEqual(['app: adds capability DAC_READ_SEARCH']);
    expect(podSecurityViolations(pod, 'restricted')).toEqual(
      expect.arrayContaining(['pod runAsUser 0', 'app: runAsNonRoot must be true', 'app: adds capability SETUID (restricted: NET_BIND_SERVICE only)']),
    );
    expect(podSecurityViolations(pod, 'privileged')).toEqual([]);
  });

  it('refuses host namespaces, hostPath, privileged containers and a missing seccomp profile', () => {
    // A copy as loose as rendered YAML is.
    const pod = JSON.parse(JSON.stringify(restrictedPod()));
    pod.hostNetwork = true;
    pod.volumes = [{ name: 'h', hostPath: { path: '/' } }];
    pod.containers[0].securityContext.privileged = true;
    expect(podSecurityViolations(pod, 'baseline')).toEqual(['hostNetwork', 'volume h: hostPath', 'app: privileged']);
    const noSeccomp = JSON.parse(JSON.stringify(restrictedPod()));
    delete noSeccomp.securityContext.seccompProfile;
    expect(podSecurityViolations(noSeccomp, 'restricted')).toEqual(['app: seccompProfile RuntimeDefault or Localhost']);
  });
});
