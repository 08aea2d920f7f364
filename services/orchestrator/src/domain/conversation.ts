import type { ChildConversationItem, TranscriptItem } from '@kandev/contracts';

const bytes = (s: string) => Buffer.byteLength(s, 'utf8');

/** Cut `text` to at most `max` UTF-8 bytes without splitting a character. */
export function cutUtf8(text: string, max: number): string {
  if (bytes(text) <= max) return text;
  const buf = Buffer.from(text, 'utf8');
  // Back off while the byte at the cut continues a character (10xxxxxx): never split one.
  let end = max;
  while (end > 0 && (buf[end]! & 0xc0) === 0x80) end--;
  return buf.subarray(0, end).toString('utf8');
}

/**
 * A conversation page within `maxBytes` of text (get_task_conversation_kandev): items are taken in
 * order until the next one would pass the bound. The first item always goes in, cut to the bound
 * when it alone is larger (`truncated: true`), so every page makes progress. `more` says whether
 * rows were read past the page (`rows` holds up to limit + 1): then `next_seq` is the last item's
 * seq, else null.
 */
export function fitConversationPage(
  rows: readonly TranscriptItem[],
  limit: number,
  maxBytes: number,
): { items: ChildConversationItem[]; next_seq: number | null } {
  const items: ChildConversationItem[] = [];
  let used = 0;
  for (const r of rows.slice(0, limit)) {
    const size = bytes(r.text);
    if (items.length > 0 && used + size > maxBytes) break;
    const cut = size > maxBytes;
    const text = cut ? cutUtf8(r.text, maxBytes) : r.text;
    used += bytes(text);
    items.push({ seq: r.seq, role: r.role, kind: r.kind, text, created_at: r.created_at, ...(cut ? { truncated: true as const } : {}) });
  }
  const more = rows.length > items.length;
  return { items, next_seq: more && items.length > 0 ? items[items.length - 1]!.seq : null };
}
