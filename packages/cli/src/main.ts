#!/usr/bin/env node
// The `kandev` bin (root package.json `bin`, `npm run kandev -- <command>`); the program is cli.ts.
import { main } from './cli.js';

process.exitCode = await main(
  process.argv.slice(2),
  process.env,
  (s) => process.stdout.write(`${s}\n`),
  (s) => process.stderr.write(`${s}\n`),
);
