import fastifyStatic from '@fastify/static';
import { notFound } from '@kandev/contracts';
import type { FastifyInstance } from 'fastify';

/** `/` → `/ui/`; `/ui/*` = the console's static files (no token: the console asks for one). */
export async function registerConsoleRoutes(app: FastifyInstance, consoleDir: string | null): Promise<void> {
  app.get('/', (_req, reply) => reply.redirect('/ui/', 302));
  if (consoleDir) {
    await app.register(fastifyStatic, { root: consoleDir, prefix: '/ui/', redirect: true, index: ['index.html'] });
    return;
  }
  const missing = async () => {
    throw notFound('the operator console is not built (run npm run build) or CONSOLE_DIR names no directory');
  };
  app.get('/ui', missing);
  app.get('/ui/*', missing);
}
