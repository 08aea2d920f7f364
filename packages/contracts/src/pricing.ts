/*
 * The one price table. A real agent reports tokens (Codex `thread/tokenUsage/updated`, Gemini CLI
 * `_meta.quota` on its prompt answers), never money;
 * a cost is derived here, from the model the agent says it uses, or it is 0 and marked unpriced.
 * Nothing else in the system turns tokens into cents.
 *
 * Prices are list prices in US dollars per million tokens, as the vendors publish them
 * (openai.com/api/pricing, anthropic.com/pricing); "cached" is the price of a cache read. Update a
 * row when a vendor changes its price; add a row to price a new model. A model that is not here is
 * reported with cost 0 and `priced: false`, never with a guess.
 */

export interface ModelPrice {
  /** USD per million uncached input tokens. */
  input: number;
  /** USD per million input tokens served from the prompt cache. */
  cachedInput: number;
  /** USD per million output tokens (reasoning included). */
  output: number;
}

export const MODEL_PRICES: Readonly<Record<string, ModelPrice>> = {
  'gpt-5': { input: 1.25, cachedInput: 0.125, output: 10 },
  'gpt-5-codex': { input: 1.25, cachedInput: 0.125, output: 10 },
  'gpt-5-mini': { input: 0.25, cachedInput: 0.025, output: 2 },
  'claude-sonnet-4-5': { input: 3, cachedInput: 0.3, output: 15 },
  'claude-opus-4-6': { input: 5, cachedInput: 0.5, output: 25 },
  'claude-haiku-4-5': { input: 1, cachedInput: 0.1, output: 5 },
};

export interface TokenCounts {
  /** All input tokens, cached ones included (OpenAI's and Codex's `input_tokens`). */
  tokens_in: number;
  /** The part of tokens_in read from the prompt cache. */
  tokens_cached_in: number;
  tokens_out: number;
}

/** The table's row for a model id; a dated snapshot id (`claude-sonnet-4-5-20250929`) uses its family's row. */
export function priceOf(model: string | null | undefined): ModelPrice | undefined {
  if (!model) return undefined;
  const exact = MODEL_PRICES[model];
  if (exact) return exact;
  const family = Object.keys(MODEL_PRICES)
    .filter((m) => model.startsWith(`${m}-`) && /^\d{8}$/.test(model.slice(m.length + 1)))
    .sort((a, b) => b.length - a.length)[0];
  return family ? MODEL_PRICES[family] : undefined;
}

/** Cost in cents of one usage report; `priced: false` (and cost 0) when the model has no row. */
export function costOf(model: string | null | undefined, usage: TokenCounts): { cost_cents: number; priced: boolean } {
  const price = priceOf(model);
  if (!price) return { cost_cents: 0, priced: false };
  const cached = Math.min(usage.tokens_cached_in, usage.tokens_in);
  const usd = ((usage.tokens_in - cached) * price.input + cached * price.cachedInput + usage.tokens_out * price.output) / 1_000_000;
  // Whole micro-cents: no float noise in sums, and small reports still count.
  return { cost_cents: Math.round(usd * 100 * 1e6) / 1e6, priced: true };
}
