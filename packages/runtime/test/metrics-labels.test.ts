import { describe, expect, it } from 'vitest';
import { boundedLabel, observeHttpRequest, registry } from '../src/metrics.js';

describe('bounded labels', () => {
  it('keeps the first values it sees, then counts every new one as other', () => {
    const label = boundedLabel(2);
    expect([label('codex'), label('claude'), label('gemini'), label('codex'), label('gemini')]).toEqual(['codex', 'claude', 'other', 'codex', 'other']);
    expect([label(null), label(undefined), label('')]).toEqual(['none', 'none', 'none']);
    expect(boundedLabel(1)('x'.repeat(500))).toHaveLength(100);
  });

  it("names a method outside HTTP's standard ones _OTHER, as the conventions say", async () => {
    observeHttpRequest('/tasks', 'BREW', 405, 0.001);
    observeHttpRequest('/tasks', 'post', 201, 0.001);
    const page = await registry.getSingleMetricAsString('http_server_request_duration_seconds');
    expect(page).toContain('http_server_request_duration_seconds_count{http_route="/tasks",http_request_method="_OTHER",http_response_status_code="405"} 1');
    expect(page).toContain('http_server_request_duration_seconds_count{http_route="/tasks",http_request_method="POST",http_response_status_code="201"} 1');
    expect(page).not.toContain('BREW');
  });
});
