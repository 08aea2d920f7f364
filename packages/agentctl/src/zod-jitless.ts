import { z } from 'zod';

/*
 * Zod compiles every object schema into a function of its own (`new Function`) the first time it
 * parses with it. A service parses the same schemas for days and gains from that; agentctl lives
 * for one execution and parses most of its schemas once or twice, so it paid the compile each time,
 * most of it in a stop (the request, the reply, the events it reports). Imported first by main.ts:
 * the setting is read when a schema is built, so it must run before any module that builds one.
 */
z.config({ jitless: true });
