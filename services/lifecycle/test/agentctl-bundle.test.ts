import { describe, expect, it } from 'vitest';
import { defaultAgentctlBin } from '../src/agentctl/process.js';

describe("agentctl's bundle (ADR 0051)", () => {
  it("is this checkout's bundle by default, checked against what it was made from (@kandev/runtime/bundle)", () => {
    expect(defaultAgentctlBin()).toMatch(/packages\/agentctl\/dist\/agentctl\.bundle\.js$/);
  });
});
