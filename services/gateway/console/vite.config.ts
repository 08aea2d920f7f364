import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

// The operator console: a static bundle the gateway serves at /ui/ (ADR 0028). Preact through the
// compiler's automatic JSX runtime; no plugin, no network at build time.
export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: '/ui/',
  logLevel: 'warn',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: fileURLToPath(new URL('../dist/console', import.meta.url)),
    emptyOutDir: true,
    target: 'es2022',
    reportCompressedSize: false,
  },
});
