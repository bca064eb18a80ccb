// console-status.test.mjs: the server page's reading of
// /api/console/status (services/gateway/ui/status.js) on fixed documents:
// how a memory figure divides into models / others / free (clamped when
// the figures disagree), where a model runs (host, GPUs by name, CPU
// part), wait times. Pure functions: no browser.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const src = readFileSync(join(here, '..', '..', '..', 'services', 'gateway', 'ui', 'status.js'), 'utf8');
const { hostLabel, memoryParts, placement, waited } = await import(`data:text/javascript,${encodeURIComponent(src)}`);

const gb = (n) => `${n / 1e9} GB`;
const hosts = [
  { local: true, ram: { total: 32e9, used: 3e9, free: 20e9 },
    gpus: [{ index: 0, name: 'GPU A', total: 8e9, used: 2e9, free: 5e9 }, { index: 1, name: 'GPU B', total: 4e9, used: 0, free: 4e9 }] },
  { local: false, name: 'box', ram: { total: 64e9, used: 0, free: 60e9 }, gpus: [{ index: 0, name: 'GPU C', total: 24e9, used: 0, free: 24e9 }] },
];

test('memory divides into models, others and free', () => {
  assert.deepEqual(memoryParts({ total: 8e9, used: 2e9, free: 5e9 }),
    { total: 8e9, used: 2e9, other: 1e9, free: 5e9, usedPct: 25, otherPct: 12.5, freePct: 62.5 });
  // Figures that overrun the total are clamped, never negative.
  const p = memoryParts({ total: 4e9, used: 3e9, free: 3e9 });
  assert.deepEqual([p.used, p.other, p.free], [3e9, 0, 1e9]);
  assert.deepEqual(memoryParts({}), { total: 0, used: 0, other: 0, free: 0, usedPct: 0, otherPct: 0, freePct: 0 });
});

test('where a model runs: host, GPUs by name, the CPU part', () => {
  const split = { name: 'a', size: 3e9, size_cpu: 1e9, gpus: [{ index: 0, layers: 20, bytes: 2e9 }] };
  assert.equal(placement(split, hosts, gb), 'this host · GPU 0 GPU A (20 layers, 2 GB) + CPU 1 GB');
  const whole = { name: 'c', host: 'box', size: 5e9, size_cpu: 0, gpus: [{ index: 0, layers: 33, bytes: 5e9 }] };
  assert.equal(placement(whole, hosts, gb), 'box · GPU 0 GPU C (33 layers, 5 GB)');
  assert.equal(placement({ name: 'b', size: 2e9, size_cpu: 2e9, gpus: [] }, hosts, gb), 'this host · CPU 2 GB');
  // A GPU the host list does not name (an older gateway): the index alone.
  assert.equal(placement({ name: 'd', size: 1e9, size_cpu: 0, gpus: [{ index: 3, layers: 2, bytes: 1e9 }] }, [], gb),
    'this host · GPU 3 (2 layers, 1 GB)');
  assert.equal(hostLabel(hosts[0]), 'this host');
  assert.equal(hostLabel(hosts[1]), 'box');
});

test('waits read in seconds and minutes', () => {
  assert.equal(waited(0.4), '0 s');
  assert.equal(waited(12.6), '13 s');
  assert.equal(waited(184), '3 min 4 s');
  assert.equal(waited(undefined), '0 s');
});
