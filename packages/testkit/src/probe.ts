import { spawnSync } from 'node:child_process';

export interface UidProbe {
  op: 'read' | 'readdir' | 'signal';
  target: string | number;
}

/**
 * What a process running as `uid` can do (the isolation tests, R-9.1): each probe answers `ok` or
 * its errno code (`EACCES`, `EPERM`, ...). Needs root to spawn under another uid.
 */
export function probeAs(uid: number, probes: UidProbe[]): string[] {
  const code = `
    const fs = require('node:fs');
    const out = ${JSON.stringify(probes)}.map((p) => {
      try {
        if (p.op === 'read') fs.readFileSync(p.target);
        else if (p.op === 'readdir') fs.readdirSync(p.target);
        else process.kill(p.target, 0);
        return 'ok';
      } catch (e) { return e.code; }
    });
    process.stdout.write(JSON.stringify(out));`;
  const r = spawnSync(process.execPath, ['-e', code], { uid, gid: uid, encoding: 'utf8', cwd: '/' });
  if (r.status !== 0) throw new Error(`probe failed: ${r.stderr}`);
  return JSON.parse(r.stdout) as string[];
}
