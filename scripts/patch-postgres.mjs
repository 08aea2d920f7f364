#!/usr/bin/env node
// Mends postgres.js 3.4.9 where a connection closes under its holder (run by `npm ci` as the root
// postinstall; docs/decisions/0013-postgres-driver-patch.md says why a patch and what it changes).
//
// Upstream (open as porsager/postgres#1154 and #1208, unfixed in 3.4.9, the latest release):
// - a query on a reserved or in-transaction connection whose socket has closed schedules a write on
//   a null socket, and the TypeError is thrown from a setImmediate: the process dies;
// - the close path cancels a scheduled write without forgetting it, so the reconnected connection
//   never flushes a small query again: its queries hang;
// - the close keeps the query and error in flight, and the reconnected connection's first query
//   fails with that stale error;
// - after a socket error, queries sent before its close (a loop phase later) are never settled;
// - a reserved connection released after its socket closed goes back to the pool as open, and a
//   holder whose connection the pool already reconnected for a waiting query writes into that
//   query's new socket.
// Here: a failed socket is closed at once; the close settles and forgets everything in flight and
// the scheduled write; a query on a closed connection is rejected with CONNECTION_CLOSED; a
// connection that closed while held is left to the pool.
//
// Every hunk must match exactly once, in the ESM and the CommonJS copy, or this fails the install
// (scripts/lib/patch.mjs).
import { join } from 'node:path';
import { MARK, packageToPatch, patchFile } from './lib/patch.mjs';

const VERSION = '3.4.9';

const connection = [
  {
    why: 'a query on a connection whose socket closed or failed under its holder is rejected, never written',
    find: `    if (terminated)
      return queryError(q, Errors.connection('CONNECTION_DESTROYED', options))
`,
    add: `
    if (!socket || socket.destroyed) // ${MARK}: closed (or erroring, its close to follow) under its holder
      return queryError(q, Errors.connection('CONNECTION_CLOSED', options))
`,
  },
  {
    why: 'a write that finds no socket settles what was sent instead of throwing from a timer',
    find: `  function nextWrite(fn) {
`,
    add: `    if (!socket) { // ${MARK}: never throw from the timer; settle, do not drop
      nextWriteTimer !== null && clearImmediate(nextWriteTimer)
      chunk = nextWriteTimer = null
      error(Errors.connection('CONNECTION_CLOSED', options))
      return false
    }
`,
  },
  {
    why: 'terminate forgets the scheduled write it cancels',
    find: `    clearImmediate(nextWriteTimer)
    if (socket) {
`,
    replace: `    clearImmediate(nextWriteTimer)
    chunk = nextWriteTimer = null // ${MARK}: else write() never schedules a flush again
    if (socket) {
`,
  },
  {
    why: 'the close path forgets the scheduled write it cancels (its queries are settled by the close)',
    find: `    clearImmediate(nextWriteTimer)
    socket.removeListener('data', data)
`,
    replace: `    clearImmediate(nextWriteTimer)
    chunk = nextWriteTimer = null // ${MARK}: else the reconnected connection never flushes a small query
    socket.removeListener('data', data)
`,
  },
  {
    why: 'a close settles the queries sent, after a socket error too (only a clean close did), and forgets them (a stale error failed the first query after the reconnect)',
    find: `    !hadError && (query || sent.length) && error(Errors.connection('CONNECTION_CLOSED', options, socket))
`,
    // The leading semicolon: the driver omits them, and a line opening with "(" would call the line before.
    replace: `    ;(query || sent.length) && error(Errors.connection('CONNECTION_CLOSED', options, socket)) // ${MARK}: after an error too
    query = results = errorResponse = null // ${MARK}: settled; left set, the reconnected connection fails its first query with them
    result = new Result()
`,
  },
  {
    why: 'a socket that failed is closed at once (its close event comes a loop phase later, and holders and the pool would use it in between)',
    find: `  /* c8 ignore next 3 */
  function drain() {
`,
    replace: `  function socketError(err) { // ${MARK}: a failed socket is destroyed; treat it as closed now
    error(err)
    socket && socket.destroyed && closed(true)
  }

  /* c8 ignore next 3 */
  function drain() {
`,
  },
  {
    why: 'the new socket listens through socketError',
    find: `    x.on('error', error)
`,
    replace: `    x.on('error', socketError) // ${MARK}
`,
  },
  {
    why: 'the TLS socket listens through socketError',
    find: `    socket.on('error', error)
`,
    replace: `    socket.on('error', socketError) // ${MARK}
`,
  },
];

const index = [
  {
    why: 'a reserved connection that closed is the pool’s again: its holder’s queries are rejected and release leaves it alone',
    find: `    c.reserved.release = true

    const sql = Sql(handler)
    sql.release = () => {
      c.reserved = null
      onopen(c)
    }

    return sql

    function handler(q) {
      c.queue === full
`,
    replace: `    c.reserved.release = true
    // ${MARK}: a connection that closes while reserved is the pool's again (onclose); its holder must not use it
    let lost = null
    const lose = (e) => {
      lost = e || Errors.connection('CONNECTION_CLOSED', options)
      while (queue.length) queue.shift().reject(lost)
    }
    c.onclose = lose

    const sql = Sql(handler)
    sql.release = () => {
      if (lost)
        return
      c.onclose === lose && (c.onclose = null)
      c.reserved = null
      onopen(c)
    }

    return sql

    function handler(q) {
      if (lost)
        return q.reject(lost)
      c.queue === full
`,
  },
  {
    why: 'a transaction whose connection closed rejects its queued and later queries',
    find: `    let savepoints = 0
`,
    add: `      , lost = null // ${MARK}: set when the connection closes under the transaction
`,
  },
  {
    why: 'the close of a transaction’s connection rejects what it queued',
    find: `        new Promise((_, reject) => connection.onclose = reject)
`,
    replace: `        new Promise((_, reject) => connection.onclose = (e) => { // ${MARK}
          lost = e || Errors.connection('CONNECTION_CLOSED', options)
          while (queries.length) queries.shift().reject(lost)
          reject(lost)
        })
`,
  },
  {
    why: 'a transaction whose connection closed never writes to it (the pool may have reconnected it for another query)',
    find: `        q.catch(e => uncaughtError || (uncaughtError = e))
`,
    add: `        if (lost) // ${MARK}
          return q.reject(lost)
`,
  },
];

const TOOL = 'patch-postgres';
const DOC = 'docs/decisions/0013-postgres-driver-patch.md';
const root = packageToPatch(TOOL, 'postgres', VERSION, DOC);
if (root) {
  for (const dir of ['src', 'cjs/src']) {
    console.log(`[${TOOL}] ${dir}/connection.js: ${patchFile(TOOL, DOC, join(root, dir, 'connection.js'), connection)}`);
    console.log(`[${TOOL}] ${dir}/index.js: ${patchFile(TOOL, DOC, join(root, dir, 'index.js'), index)}`);
  }
}
