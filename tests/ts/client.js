// The default DBOS TypeScript client (@dbos-inc/dbos-sdk, js_superjson), driven by stead's
// interoperability tests (tests/integration/dbos_interop/ts_defaults.rs).
//
// Usage: NODE_PATH=<node_modules> node client.js <system database URL> <application name>
//          <command> <JSON argument>
//
// Prints one JSON line on stdout: {"ok": <value>} or {"error": {"type", "name", "message", "code"}}.
// Arguments and messages go through typed.js first (JSON tags for Date, BigInt, Map, ...).
// Commands:
//   enqueue    {"workflow", "queue", "id", "args", "wait"}: DBOSClient.enqueue; with "wait", the
//              handle's getResult(), else the workflow id
//   result     {"id"}: retrieveWorkflow(id).getResult()
//   send       {"to", "message", "topic"}: DBOSClient.send
//   get_event  {"id", "key", "timeout"}: DBOSClient.getEvent
'use strict';
const { DBOSClient } = require('@dbos-inc/dbos-sdk');
const { typed, show } = require('./typed');

const COMMANDS = {
  async enqueue(client, a) {
    const options = { queueName: a.queue, workflowName: a.workflow, workflowID: a.id };
    const handle = await client.enqueue(options, ...typed(a.args || []));
    return a.wait ? handle.getResult() : handle.workflowID;
  },
  async result(client, a) {
    return client.retrieveWorkflow(a.id).getResult();
  },
  async send(client, a) {
    await client.send(a.to, typed(a.message), a.topic);
    return null;
  },
  async get_event(client, a) {
    return client.getEvent(a.id, a.key, a.timeout || 10);
  },
};

async function main() {
  const [url, app, command, arg] = process.argv.slice(2);
  const client = await DBOSClient.create({ systemDatabaseUrl: url, applicationName: app });
  let out;
  try {
    out = { ok: await COMMANDS[command](client, JSON.parse(arg)) };
  } catch (e) {
    out = { error: { type: e.constructor.name, name: e.name, message: e.message, code: e.code } };
  } finally {
    await client.destroy();
  }
  process.stdout.write(`\n${show(out)}\n`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
