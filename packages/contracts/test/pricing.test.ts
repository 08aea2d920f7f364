import { describe, expect, it } from 'vitest';
import { costOf, MODEL_PRICES, priceOf } from '../src/pricing.js';

describe('costOf', () => {
  it('prices uncached input, cached input and output at their own rates', () => {
    // gpt-5: 1000 uncached × $1.25/M + 200 cached × $0.125/M + 40 out × $10/M = $0.001675 = 0.1675 cents
    expect(costOf('gpt-5', { tokens_in: 1200, tokens_cached_in: 200, tokens_out: 40 })).toEqual({ cost_cents: 0.1675, priced: true });
  });

  it('reports an unknown model as unpriced with cost 0, never a guess', () => {
    expect(costOf('stub-model', { tokens_in: 1_000_000, tokens_cached_in: 0, tokens_out: 1_000_000 })).toEqual({ cost_cents: 0, priced: false });
    expect(costOf(null, { tokens_in: 5, tokens_cached_in: 0, tokens_out: 5 })).toEqual({ cost_cents: 0, priced: false });
  });

  it('uses the family row for a dated snapshot id, and only for one', () => {
    expect(priceOf('claude-sonnet-4-5-20250929')).toBe(MODEL_PRICES['claude-sonnet-4-5']);
    expect(priceOf('gpt-5-turbo-preview')).toBeUndefined();
  });

  it('never counts more cached tokens than input tokens', () => {
    expect(costOf('gpt-5', { tokens_in: 100, tokens_cached_in: 500, tokens_out: 0 }).cost_cents).toBeCloseTo((100 * 0.125) / 1e4, 9);
  });
});
