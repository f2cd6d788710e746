// A default DBOS TypeScript application (js_superjson everywhere), launched by stead's
// interoperability tests (tests/integration/dbos_interop/ts_defaults.rs).
//
// Usage: NODE_PATH=<node_modules> node app.js <system database URL> <application name> <queue>
//
// Serves <queue> with two workflows: produce(), which records a step, sets event "ev", writes
// stream "st" (then closes it), waits up to 60 s for a message on topic "in" and returns what it
// got beside values of every SuperJSON type; and fail(reason), which throws an Error with a
// code. Prints "ready" once launched, then runs until its stdin closes.
'use strict';
const { DBOS } = require('@dbos-inc/dbos-sdk');

const [url, app, queue] = process.argv.slice(2);
const when = new Date('2025-06-15T10:30:00.123Z');

async function produce() {
  const stepped = await DBOS.runStep(async () => ({ at: when, big: 7n }), { name: 'stepped' });
  await DBOS.setEvent('ev', {
    at: when,
    big: 12345678901234567890n,
    m: new Map([['k', 1]]),
    tags: new Set(['x']),
    u: undefined,
    re: /ab+c/gi,
  });
  await DBOS.writeStream('st', { n: 1, at: when });
  await DBOS.writeStream('st', [2n, undefined]);
  await DBOS.closeStream('st');
  const got = await DBOS.recv('in', 60);
  return { stepped, got, big: 1n, m: new Map([[1, 'one']]), s: new Set([1, 2]), u: undefined, nested: [{ d: when }] };
}

async function fail(reason) {
  const e = new Error(reason);
  e.code = 'E_BOOM';
  throw e;
}

DBOS.registerWorkflow(produce, { name: 'produce' });
DBOS.registerWorkflow(fail, { name: 'fail' });

async function main() {
  DBOS.setConfig({ name: app, systemDatabaseUrl: url });
  await DBOS.launch();
  await DBOS.registerQueue(queue, { minPollingIntervalMs: 100 });
  console.log('ready');
  process.stdin.resume();
  process.stdin.on('end', async () => {
    await DBOS.shutdown();
    process.exit(0);
  });
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
