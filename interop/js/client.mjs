// Drives a2a-bridge with the client of @a2a-js/sdk: completes a test-runner task, streams one, answers the
// code-reviewer's input request and cancels a full-suite run. Prints one JSON line per step with what it saw.
//
// Usage: node client.mjs BASE_URL   (the bridge, e.g. http://127.0.0.1:8000; each agent's card is under BASE_URL/NAME)
// Exits 1 when a step throws; the line of that step then carries "error".

import { randomUUID } from 'node:crypto';
import { ClientFactory } from '@a2a-js/sdk/client';
import { Role, taskStateToJSON } from '@a2a-js/sdk';

const STEP_TIMEOUT_MS = 30_000;
const UNIT = 'Run the unit tests for payments-api at commit 9f3c2e1';
const FULL = 'Run the full suite for payments-api at commit 9f3c2e1';
const DIFF = [
  '--- a/payments/refunds.py',
  '+++ b/payments/refunds.py',
  '@@ -40,3 +40,4 @@ def partial_refund(charge, amount):',
  '-    net = amount - fee(charge)',
  '+    net = int(amount) - fee(charge)',
  '',
].join('\n');

const base = process.argv[2]?.replace(/\/+$/, '');
if (!base) {
  console.error('usage: node client.mjs BASE_URL');
  process.exit(2);
}

const factory = new ClientFactory();

// The SDK's card resolver takes its path from the host's root, so each agent's card is named as a full URL.
function connect(agent) {
  return factory.createFromUrl(`${base}/${agent}/.well-known/agent-card.json`, '');
}

function options() {
  return { signal: AbortSignal.timeout(STEP_TIMEOUT_MS) };
}

function text(value) {
  return { content: { $case: 'text', value }, metadata: undefined, filename: '', mediaType: '' };
}

function message(parts, task) {
  return {
    messageId: randomUUID(),
    contextId: task?.contextId ?? '',
    taskId: task?.id ?? '',
    role: Role.ROLE_USER,
    parts,
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  };
}

function request(parts, task, configuration) {
  return { tenant: '', message: message(parts, task), configuration, metadata: undefined };
}

function state(task) {
  return taskStateToJSON(task.status.state);
}

function statusText(task) {
  return (task.status.message?.parts ?? []).map((part) => part.content?.value ?? '').join(' ');
}

function isTask(result) {
  return result !== undefined && 'status' in result && 'id' in result;
}

function eventName(event) {
  const payload = event.payload;
  if (payload?.$case === 'statusUpdate') {
    return `statusUpdate:${taskStateToJSON(payload.value.status.state)}`;
  }
  return payload?.$case ?? 'none';
}

const steps = {
  async complete() {
    const client = await connect('test-runner');
    const task = await client.sendMessage(request([text(UNIT)]), options());
    return {
      kind: isTask(task) ? 'task' : 'message',
      taskId: task.id,
      state: state(task),
      status: statusText(task),
      artifacts: task.artifacts.map((artifact) => artifact.artifactId),
      protocolVersion: client.protocolVersion,
    };
  },

  async stream() {
    const client = await connect('test-runner');
    const events = [];
    let taskId = '';
    for await (const event of client.sendMessageStream(request([text(UNIT)]), options())) {
      events.push(eventName(event));
      if (event.payload?.$case === 'task') {
        taskId = event.payload.value.id;
      }
    }
    const task = await client.getTask({ tenant: '', id: taskId }, options());
    return { taskId, events, state: state(task), status: statusText(task) };
  },

  async inputRequired() {
    const client = await connect('code-reviewer');
    const diff = { content: { $case: 'raw', value: Buffer.from(DIFF) }, metadata: undefined, filename: 'refunds.diff', mediaType: 'text/x-diff' };
    const asked = await client.sendMessage(request([text('Review this diff of payments-api.'), diff]), options());
    const answered = await client.sendMessage(request([text('main')], asked), options());
    return {
      taskId: asked.id,
      asked: state(asked),
      question: statusText(asked),
      sameTask: answered.id === asked.id && answered.contextId === asked.contextId,
      state: state(answered),
      status: statusText(answered),
      diffKept: Buffer.from(answered.history[0].parts[1].content.value).toString() === DIFF,
    };
  },

  async cancel() {
    const client = await connect('test-runner');
    const configuration = { acceptedOutputModes: [], taskPushNotificationConfig: undefined, returnImmediately: true };
    const started = await client.sendMessage(request([text(FULL)], undefined, configuration), options());
    const canceled = await client.cancelTask({ tenant: '', id: started.id, metadata: undefined }, options());
    const fetched = await client.getTask({ tenant: '', id: started.id }, options());
    return {
      taskId: started.id,
      started: state(started),
      state: state(canceled),
      status: statusText(canceled),
      fetched: state(fetched),
    };
  },
};

let failed = false;
for (const [step, run] of Object.entries(steps)) {
  try {
    console.log(JSON.stringify({ step, ...(await run()) }));
  } catch (error) {
    failed = true;
    console.log(JSON.stringify({ step, error: String(error?.message ?? error) }));
  }
}
process.exit(failed ? 1 : 0);
