// console-metrics.test.mjs: the web console's /metrics arithmetic
// (services/gateway/ui/metrics.js) on fixed Prometheus text: parsing
// (labels, escapes, +Inf), the console's own polling left out of
// requests/s, rates between scrapes, and the gaps a restarted gateway or
// an interval without generations leaves. Pure functions: no browser.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

// The file is a browser module with no imports; loaded from its text, as
// the repository has no package.json that marks it a module.
const here = dirname(fileURLToPath(import.meta.url));
const src = readFileSync(join(here, '..', '..', '..', 'services', 'gateway', 'ui', 'metrics.js'), 'utf8');
const { parseMetrics, total, snapshot, rates } = await import(`data:text/javascript,${encodeURIComponent(src)}`);

const scrape = (tokens, chat, polls, ttftSum, ttftCount) => [
  '# HELP corral_completion_tokens_total generated tokens',
  '# TYPE corral_completion_tokens_total counter',
  `corral_completion_tokens_total ${tokens}`,
  `corral_http_requests_total{route="/api/chat",code="200"} ${chat}`,
  `corral_http_requests_total{route="/metrics",code="200"} ${polls}`,
  `corral_http_requests_total{route="/ui/:param",code="200"} ${polls}`,
  `corral_http_requests_total{route="/api/ps",code="200"} ${polls}`,
  `corral_http_requests_total{route="/api/console/status",code="200"} ${polls}`,
  `corral_time_to_first_token_seconds_bucket{le="+Inf"} ${ttftCount}`,
  `corral_time_to_first_token_seconds_sum ${ttftSum}`,
  `corral_time_to_first_token_seconds_count ${ttftCount}`,
  'corral_scheduler_up 1',
  '',
].join('\n');

test('parses samples, labels, escapes and +Inf', () => {
  const s = parseMetrics('a_total{route="/x",msg="say \\"hi\\"\\n"} 3\n# c\n\nb +Inf\nbad line here\n');
  assert.deepEqual(s, [
    { name: 'a_total', labels: { route: '/x', msg: 'say "hi"\n' }, value: 3 },
    { name: 'b', labels: {}, value: Infinity },
  ]);
  assert.equal(total(s, 'missing'), null);
  assert.equal(total(parseMetrics(scrape(5, 2, 9, 0, 0)), 'corral_http_requests_total'), 38);
});

test('rates leave the console\'s own polling out and gap on resets', () => {
  const a = snapshot(parseMetrics(scrape(100, 10, 50, 1.0, 4)), 0);
  const b = snapshot(parseMetrics(scrape(140, 14, 80, 1.9, 7)), 2000);
  assert.equal(a.requests, 10);
  assert.deepEqual(rates(a, b), { tokens: 20, requests: 2, ttft: 0.3 });
  // No generation began answering in between: no TTFT point.
  const c = snapshot(parseMetrics(scrape(140, 15, 90, 1.9, 7)), 4000);
  assert.equal(rates(b, c).ttft, null);
  assert.equal(rates(b, c).tokens, 0);
  // A restarted gateway starts its counters again: a gap, not a negative rate.
  const d = snapshot(parseMetrics(scrape(3, 1, 2, 0.1, 1)), 6000);
  assert.deepEqual(rates(c, d), { tokens: null, requests: null, ttft: null });
  assert.equal(d.schedulerUp, 1);
});
