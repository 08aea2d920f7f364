#!/usr/bin/env node
// Takes an Error allocation off every NATS request that succeeds, in @nats-io/nats-core 3.4.0 (run
// by `npm ci` as the root postinstall; docs/decisions/0016-nats-request-patch.md says why).
//
// Upstream (3.4.0, the latest release): RequestOne.resolver settles the request's promise and then
// calls cancel(), which rejects the same, already settled, promise with a new RequestError
// ("cancelled"). The rejection is a no-op; the Error and its stack trace are built anyway, on every
// request and every JetStream publish (its acknowledgement is a request). Here the resolver only
// stops the timer and forgets the request, which is all cancel() does besides that rejection.
import { join } from 'node:path';
import { MARK, packageToPatch, patchFile } from './lib/patch.mjs';

const TOOL = 'patch-nats';
const DOC = 'docs/decisions/0016-nats-request-patch.md';

const request = [
  {
    why: 'a settled request is forgotten without rejecting its promise again with a new RequestError',
    find: `            this.deferred.resolve(msg);
        }
        this.cancel();
`,
    replace: `            this.deferred.resolve(msg);
        }
        // ${MARK}: settled above; cancel() would reject it again with a new RequestError (a stack trace per request)
        this.mux.cancel(this);
`,
  },
];

const root = packageToPatch(TOOL, '@nats-io/nats-core', '3.4.0', DOC);
if (root) console.log(`[${TOOL}] lib/request.js: ${patchFile(TOOL, DOC, join(root, 'lib', 'request.js'), request)}`);
