/*
 * The Pod Security Standards (https://kubernetes.io/docs/concepts/security/pod-security-standards/)
 * as the deploy tests check a pod template against them, offline: the controls that a manifest can
 * break (what depends on the node, AppArmor profiles and sysctls, is left to admission itself).
 * Returns the broken controls in words; empty when the pod meets the level.
 */

export type PodSecurityLevel = 'privileged' | 'baseline' | 'restricted';
export const POD_SECURITY_LEVELS: readonly PodSecurityLevel[] = ['privileged', 'baseline', 'restricted'];

/** Capabilities `baseline` lets a container add; `restricted` allows NET_BIND_SERVICE alone. */
const BASELINE_CAPABILITIES = new Set([
  'AUDIT_WRITE',
  'CHOWN',
  'DAC_OVERRIDE',
  'FOWNER',
  'FSETID',
  'KILL',
  'MKNOD',
  'NET_BIND_SERVICE',
  'SETFCAP',
  'SETGID',
  'SETPCAP',
  'SETUID',
  'SYS_CHROOT',
]);
/** Volume types `restricted` allows. */
const RESTRICTED_VOLUMES = ['configMap', 'csi', 'downwardAPI', 'emptyDir', 'ephemeral', 'persistentVolumeClaim', 'projected', 'secret'];

export function podSecurityViolations(pod: any, level: PodSecurityLevel): string[] {
  if (level === 'privileged') return [];
  const out: string[] = [];
  const containers: any[] = [...(pod.initContainers ?? []), ...(pod.containers ?? []), ...(pod.ephemeralContainers ?? [])];
  const psc = pod.securityContext ?? {};
  // baseline
  for (const host of ['hostNetwork', 'hostPID', 'hostIPC']) if (pod[host] === true) out.push(`${host}`);
  for (const v of pod.volumes ?? []) if (v.hostPath) out.push(`volume ${v.name}: hostPath`);
  if (psc.seccompProfile?.type === 'Unconfined') out.push('pod seccompProfile Unconfined');
  for (const c of containers) {
    const sc = c.securityContext ?? {};
    if (sc.privileged === true) out.push(`${c.name}: privileged`);
    for (const cap of sc.capabilities?.add ?? []) if (!BASELINE_CAPABILITIES.has(cap)) out.push(`${c.name}: adds capability ${cap}`);
    for (const p of c.ports ?? []) if (p.hostPort) out.push(`${c.name}: hostPort ${p.hostPort}`);
    if (sc.procMount && sc.procMount !== 'Default') out.push(`${c.name}: procMount ${sc.procMount}`);
    if (sc.seccompProfile?.type === 'Unconfined') out.push(`${c.name}: seccompProfile Unconfined`);
  }
  if (level === 'baseline') return out;
  // restricted
  for (const v of pod.volumes ?? []) {
    const type = Object.keys(v).find((k) => k !== 'name');
    if (type && !RESTRICTED_VOLUMES.includes(type)) out.push(`volume ${v.name}: type ${type}`);
  }
  if (psc.runAsUser === 0) out.push('pod runAsUser 0');
  for (const c of containers) {
    const sc = c.securityContext ?? {};
    if (sc.allowPrivilegeEscalation !== false) out.push(`${c.name}: allowPrivilegeEscalation must be false`);
    const nonRoot = sc.runAsNonRoot ?? psc.runAsNonRoot;
    if (nonRoot !== true) out.push(`${c.name}: runAsNonRoot must be true`);
    if ((sc.runAsUser ?? psc.runAsUser) === 0) out.push(`${c.name}: runAsUser 0`);
    const seccomp = (sc.seccompProfile ?? psc.seccompProfile)?.type;
    if (seccomp !== 'RuntimeDefault' && seccomp !== 'Localhost') out.push(`${c.name}: seccompProfile RuntimeDefault or Localhost`);
    if (!(sc.capabilities?.drop ?? []).includes('ALL')) out.push(`${c.name}: capabilities must drop ALL`);
    for (const cap of sc.capabilities?.add ?? [])
      if (cap !== 'NET_BIND_SERVICE' && BASELINE_CAPABILITIES.has(cap)) out.push(`${c.name}: adds capability ${cap} (restricted: NET_BIND_SERVICE only)`);
  }
  return out;
}
