#!/usr/bin/env node
// `npm start`: the whole control plane on this machine (see docs/operations.md).
//
// This launcher only relays signals. The stack itself (scripts/lib/stack.mjs) runs in a process
// group of its own, so a terminal Ctrl-C reaches it once, through here, instead of hitting every
// service, nats-server and PostgreSQL at the same instant: the stack can then stop the services
// first (in reverse start order) and the infrastructure they drain into last.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const stack = spawn(process.execPath, [fileURLToPath(new URL('./lib/stack.mjs', import.meta.url)), ...process.argv.slice(2)], {
  stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  detached: true,
  env: process.env,
});

// npm forwards a Ctrl-C on top of the terminal's own, so one key press may arrive twice here;
// the stack treats a repeat within 2 s as the same request.
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => {
    if (stack.exitCode === null && stack.signalCode === null) stack.kill(sig === 'SIGHUP' ? 'SIGTERM' : sig);
  });
}

stack.once('error', (e) => {
  console.error(`[kandev] could not start the stack: ${e.message}`);
  process.exit(1);
});
stack.once('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
