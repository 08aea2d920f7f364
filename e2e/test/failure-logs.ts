import { beforeEach } from 'vitest';
import { serviceLogMark, serviceLogSince } from './support.js';

// A failing e2e test prints what the services logged while it ran (warn and above: the stacks'
// level), from its own worlds and from the shared stack. A flake on a loaded CI runner is otherwise
// a timeout with nothing to go on: the stacks' logs go with them.
beforeEach(({ onTestFailed }) => {
  const mark = serviceLogMark();
  onTestFailed(() => {
    const lines = serviceLogSince(mark);
    console.error(
      lines.length
        ? `--- the services logged while this test ran:\n${lines.join('\n')}`
        : '--- the services logged nothing at warn or above while this test ran',
    );
  });
});
