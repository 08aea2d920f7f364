import { describe, expect, it } from 'vitest';
import { parseDockerfile } from './dockerfile.js';

/** The Dockerfile reader the image tests rely on, on Dockerfiles of its own: what it accepts and what it refuses. */
describe('parseDockerfile', () => {
  const text = [
    '# syntax=docker/dockerfile:1',
    'ARG BASE=node:24-slim',
    'ARG REGISTRY',
    '',
    'FROM ${BASE} AS build',
    'ARG BASE',
    'RUN echo one \\',
    '  # a comment inside the instruction',
    '  two',
    'FROM $BASE AS runtime',
    'COPY --from=build /out /app',
    'FROM runtime AS last',
  ].join('\n');

  it('reads global ARGs (with and without a default) and substitutes them in FROM, braced or not', () => {
    const { args, stages } = parseDockerfile(text);
    expect(args).toEqual({ BASE: 'node:24-slim', REGISTRY: undefined });
    expect(stages.map((s) => [s.name, s.from, s.fromAsWritten])).toEqual([
      ['build', 'node:24-slim', '${BASE}'],
      ['runtime', 'node:24-slim', '$BASE'],
      ['last', 'runtime', 'runtime'],
    ]);
    // An ARG inside a stage is that stage's instruction, not a global one.
    expect(stages[0]!.body).toEqual([
      { op: 'ARG', args: 'BASE' },
      { op: 'RUN', args: 'echo one two' },
    ]);
  });

  it('takes a --build-arg over the default', () => {
    expect(parseDockerfile(text, { BASE: 'localhost/base:1' }).stages.map((s) => s.from)).toEqual(['localhost/base:1', 'localhost/base:1', 'runtime']);
  });

  it('refuses a FROM whose argument is undeclared or has no value, and instructions before the first FROM other than ARG', () => {
    expect(() => parseDockerfile('FROM ${NOPE}')).toThrow('NOPE is not a global ARG');
    expect(() => parseDockerfile('FROM node:24-slim AS a\nARG LATE=x\nFROM ${LATE}')).toThrow('LATE is not a global ARG');
    expect(() => parseDockerfile('ARG REGISTRY\nFROM ${REGISTRY}/node:24')).toThrow('ARG REGISTRY has no default and no --build-arg');
    expect(parseDockerfile('ARG REGISTRY\nFROM ${REGISTRY}/node:24', { REGISTRY: 'r.example' }).stages[0]!.from).toBe('r.example/node:24');
    expect(() => parseDockerfile('ENV A=1\nFROM node:24-slim')).toThrow('ENV before any FROM (only ARG may come first)');
    expect(() => parseDockerfile('FROM node:24-slim\nRUN a \\')).toThrow('ends inside a continued instruction');
    expect(() => parseDockerfile('FROM node:24-slim\nSHELLX a')).toThrow('not an instruction');
  });
});
