// A reader of deploy/docker/Dockerfile for the tests that check it without building it: its stages
// and their instructions, the global build arguments (ARG before the first FROM) and each FROM's
// image with those arguments substituted, and the build context its .dockerignore leaves.

export interface Instruction {
  op: string;
  args: string;
}
export interface Stage {
  name: string | undefined;
  /** The image or earlier stage the stage starts from, with the build arguments substituted. */
  from: string;
  /** The FROM's image as written (`${NODE_IMAGE}`). */
  fromAsWritten: string;
  body: Instruction[];
}
export interface Dockerfile {
  /** The global build arguments and their defaults (undefined: declared without one). */
  args: Record<string, string | undefined>;
  stages: Stage[];
}

const KNOWN = new Set(['FROM', 'RUN', 'COPY', 'ADD', 'ENV', 'WORKDIR', 'USER', 'EXPOSE', 'ENTRYPOINT', 'CMD', 'ARG', 'LABEL']);

/** Instructions, one a line: continuation lines joined, comments and parser directives dropped. */
function instructions(text: string): string[] {
  const lines: string[] = [];
  let current = '';
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (current === '' && (line === '' || line.startsWith('#'))) continue;
    if (line.startsWith('#')) continue; // a comment inside a continued instruction
    if (line.endsWith('\\')) {
      current += `${line.slice(0, -1).trimEnd()} `;
      continue;
    }
    lines.push(current + line);
    current = '';
  }
  if (current) throw new Error('the Dockerfile ends inside a continued instruction');
  return lines;
}

/**
 * `$NAME` and `${NAME}` in a FROM, from the global arguments (the only ones a FROM sees): `buildArgs`
 * (`--build-arg`) over the declared defaults. An undeclared argument, or a declared one with no value,
 * is refused, as the builder refuses the empty image name it would make.
 */
function substitute(image: string, args: Record<string, string | undefined>, buildArgs: Record<string, string>): string {
  return image.replace(/\$(?:\{(\w+)\}|(\w+))/g, (_, braced: string | undefined, plain: string | undefined) => {
    const name = (braced ?? plain)!;
    if (!(name in args)) throw new Error(`FROM ${image}: ${name} is not a global ARG (declare it before the first FROM)`);
    const value = buildArgs[name] ?? args[name];
    if (value === undefined || value === '') throw new Error(`FROM ${image}: ARG ${name} has no default and no --build-arg`);
    return value;
  });
}

/** The Dockerfile as global arguments and stages of instructions, as the builder would read it with `buildArgs`. */
export function parseDockerfile(text: string, buildArgs: Record<string, string> = {}): Dockerfile {
  const args: Record<string, string | undefined> = {};
  const stages: Stage[] = [];
  for (const line of instructions(text)) {
    const m = /^([A-Za-z]+)\s+(.*)$/.exec(line);
    if (!m || !KNOWN.has(m[1]!.toUpperCase())) throw new Error(`not an instruction: ${line}`);
    const op = m[1]!.toUpperCase();
    const rest = m[2]!;
    if (op === 'FROM') {
      const f = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(rest);
      if (!f) throw new Error(`FROM: ${rest}`);
      stages.push({ from: substitute(f[1]!, args, buildArgs), fromAsWritten: f[1]!, name: f[2], body: [] });
    } else if (!stages.length) {
      if (op !== 'ARG') throw new Error(`${op} before any FROM (only ARG may come first)`);
      const a = /^(\w+)(?:=(\S*))?$/.exec(rest);
      if (!a) throw new Error(`ARG: ${rest}`);
      args[a[1]!] = a[2];
    } else {
      stages.at(-1)!.body.push({ op, args: rest });
    }
  }
  return { args, stages };
}

/** Does the build context (the repository root filtered by the .dockerignore) hold `path`? Last matching rule wins. */
export function inContext(ignore: string, path: string): boolean {
  let included = true;
  for (const raw of ignore.split('\n')) {
    const rule = raw.trim();
    if (!rule || rule.startsWith('#')) continue;
    const negate = rule.startsWith('!');
    const pattern = negate ? rule.slice(1) : rule;
    const re = new RegExp(
      `^${pattern
        .replace(/[.+^${}()|[\]\\]/g, '\\$&')
        .replace(/\*\*\//g, '(?:.*/)?')
        .replace(/\*/g, '[^/]*')}(?:/.*)?$`,
    );
    if (re.test(path)) included = negate;
  }
  return included;
}
