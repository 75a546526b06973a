// A remote agent on @a2a-js/sdk for the bridge to front (`a2a-bridge serve --remote NAME=URL`, tests/remote/test_remote.py).
// Its card at /.well-known/agent-card.json and JSON-RPC at /a2a/jsonrpc, on 127.0.0.1. By the first text of a task:
//
//   "count N"  works: streams an artifact `count` of N chunks, one per pace, then completes ("Counted to N").
//   "ask"      asks for input ("What is your name?"); the answer streams an artifact `greeting` and completes.
//   "link URL" completes with an artifact `link` whose one part is that URL, as written (the console's tests plant
//              a `javascript:` URL there).
//   other      answers with a direct message and no task.
//
// Every task can be canceled while it works or waits. Each execution (one turn: a first message or an answer) is
// appended to RECORD_FILE as one JSON line {taskId, contextId, messageId, text}, so tests can count executions.
//
// Usage: node remote-agent.mjs RECORD_FILE [--port N] [--pace MS] [--no-streaming]
// Prints one line, `listening on URL`, when ready.

import { appendFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import express from 'express';
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express';
import { Role, TaskState } from '@a2a-js/sdk';

const HOST = '127.0.0.1';
const MAX_COUNT = 1000;

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    port: { type: 'string', default: '0' },
    pace: { type: 'string', default: '100' },
    'no-streaming': { type: 'boolean', default: false },
  },
});
const record = positionals[0];
if (!record) {
  console.error('usage: node remote-agent.mjs RECORD_FILE [--port N] [--pace MS] [--no-streaming]');
  process.exit(2);
}
const pace = Number(values.pace);
const streaming = !values['no-streaming'];

function card(base) {
  return {
    name: 'js-remote',
    description: 'Counts in a streamed artifact, or asks for a name and greets it.',
    supportedInterfaces: [{ url: `${base}/a2a/jsonrpc`, protocolBinding: 'JSONRPC', protocolVersion: '1.0' }],
    provider: { url: 'https://example.com/js-remote', organization: 'a2a-bridge interop' },
    version: '1.0.0',
    capabilities: { streaming, pushNotifications: false },
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: [
      { id: 'count', name: 'Count', description: 'Count to N in a streamed artifact.', tags: ['count'], examples: ['count 5'] },
      { id: 'greet', name: 'Greet', description: 'Ask for a name and greet it.', tags: ['greet'], examples: ['ask'] },
    ],
  };
}

function text(value) {
  return { content: { $case: 'text', value }, metadata: undefined, filename: '', mediaType: 'text/plain' };
}

function urlPart(value) {
  return { content: { $case: 'url', value }, metadata: undefined, filename: '', mediaType: 'text/plain' };
}

function textOf(message) {
  return (message?.parts ?? []).map((part) => (part.content?.$case === 'text' ? part.content.value : '')).join(' ').trim();
}

function agentMessage(taskId, contextId, value) {
  return {
    messageId: randomUUID(), contextId, taskId, role: Role.ROLE_AGENT, parts: [text(value)],
    metadata: undefined, extensions: [], referenceTaskIds: [],
  };
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

class Agent {
  canceled = new Set();
  contexts = new Map();

  async execute(context, bus) {
    const { taskId, contextId } = context;
    const message = context.userMessage;
    this.contexts.set(taskId, contextId);
    appendFileSync(record, JSON.stringify({ taskId, contextId, messageId: message.messageId, text: textOf(message) }) + '\n');
    const first = context.task ? textOf(context.task.history.find((m) => m.role === Role.ROLE_USER)) : textOf(message);
    const count = /^count (\d+)$/.exec(first);
    const link = /^link (\S+)$/.exec(first);
    if (!count && !link && first !== 'ask') {
      bus.publish(AgentEvent.message(agentMessage('', contextId, 'I count ("count 5") or greet ("ask").')));
      bus.finished();
      return;
    }
    const task = context.task ?? {
      id: taskId,
      contextId,
      status: { state: TaskState.TASK_STATE_SUBMITTED, message: undefined, timestamp: new Date().toISOString() },
      artifacts: [],
      history: [message],
      metadata: undefined,
    };
    bus.publish(AgentEvent.task(task));
    const status = (state, value) => bus.publish(AgentEvent.statusUpdate({
      taskId, contextId, metadata: undefined,
      status: { state, message: value ? agentMessage(taskId, contextId, value) : undefined, timestamp: new Date().toISOString() },
    }));
    const chunk = (artifactId, value, append, lastChunk) => bus.publish(AgentEvent.artifactUpdate({
      taskId, contextId, append, lastChunk, metadata: undefined,
      artifact: { artifactId, name: `${artifactId}.txt`, description: '', parts: [text(value)], metadata: undefined, extensions: [] },
    }));
    if (link) {
      bus.publish(AgentEvent.artifactUpdate({
        taskId, contextId, append: false, lastChunk: true, metadata: undefined,
        artifact: { artifactId: 'link', name: 'link', description: '', parts: [urlPart(link[1])], metadata: undefined, extensions: [] },
      }));
      status(TaskState.TASK_STATE_COMPLETED, 'Here is the link');
    } else if (count) {
      const n = Math.min(Number(count[1]), MAX_COUNT);
      status(TaskState.TASK_STATE_WORKING, `Counting to ${n}`);
      for (let i = 1; i <= n; i += 1) {
        await sleep(pace);
        if (this.canceled.has(taskId)) return;
        chunk('count', `${i}\n`, i > 1, i === n);
      }
      status(TaskState.TASK_STATE_COMPLETED, `Counted to ${n}`);
    } else if (!context.task) {
      status(TaskState.TASK_STATE_INPUT_REQUIRED, 'What is your name?');
    } else {
      status(TaskState.TASK_STATE_WORKING, undefined);
      await sleep(pace);
      if (this.canceled.has(taskId)) return;
      chunk('greeting', `Hello, ${textOf(message)}`, false, true);
      status(TaskState.TASK_STATE_COMPLETED, `Hello, ${textOf(message)}`);
    }
    bus.finished();
  }

  async cancelTask(taskId, bus) {
    const contextId = this.contexts.get(taskId) ?? '';
    this.canceled.add(taskId);
    bus.publish(AgentEvent.statusUpdate({
      taskId, contextId, metadata: undefined,
      status: {
        state: TaskState.TASK_STATE_CANCELED,
        message: agentMessage(taskId, contextId, "Canceled at the client's request."),
        timestamp: new Date().toISOString(),
      },
    }));
  }
}

const app = express();
const server = app.listen(Number(values.port), HOST, () => {
  const base = `http://${HOST}:${server.address().port}`;
  const handler = new DefaultRequestHandler(card(base), new InMemoryTaskStore(), new Agent());
  app.use('/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: handler }));
  app.use('/a2a/jsonrpc', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
  console.log(`listening on ${base}`);
});

for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    server.closeAllConnections();
    server.close(() => process.exit(0));
  });
}
