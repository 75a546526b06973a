// The benchmark's trivial agent on @a2a-js/sdk (agents/bench.py on the Python side): each message creates a task and
// completes it with one short text artifact, no pacing. The SDK's DefaultRequestHandler, InMemoryTaskStore and
// JSON-RPC express route at /a2a/jsonrpc, its card at /.well-known/agent-card.json, on 127.0.0.1.
//
// Usage: node bench-server.mjs PORT   Prints one line, `listening on URL`, once it answers.

import express from 'express';
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express';
import { TaskState } from '@a2a-js/sdk';

const HOST = '127.0.0.1';
const port = Number(process.argv[2] ?? 0);
const base = `http://${HOST}:${port}`;

const card = {
  name: 'bench',
  description: 'The trivial agent of the benchmark: completes each task with one short text artifact.',
  supportedInterfaces: [{ url: `${base}/a2a/jsonrpc`, protocolBinding: 'JSONRPC', protocolVersion: '1.0' }],
  version: '1.0.0',
  capabilities: { streaming: true, pushNotifications: false },
  defaultInputModes: ['text/plain'],
  defaultOutputModes: ['text/plain'],
  skills: [{ id: 'bench', name: 'Benchmark', description: 'Completes at once.', tags: ['bench'], examples: [] }],
};

const bench = {
  async execute(context, bus) {
    const { taskId, contextId } = context;
    if (!context.task) {
      bus.publish(
        AgentEvent.task({
          id: taskId,
          contextId,
          status: { state: TaskState.TASK_STATE_SUBMITTED, message: undefined, timestamp: undefined },
          artifacts: [],
          history: [context.userMessage],
          metadata: undefined,
        }),
      );
    }
    bus.publish(
      AgentEvent.artifactUpdate({
        taskId,
        contextId,
        artifact: {
          artifactId: 'result',
          name: '',
          description: '',
          parts: [{ content: { $case: 'text', value: 'done' }, metadata: undefined, filename: '', mediaType: '' }],
          metadata: undefined,
          extensions: [],
        },
        append: false,
        lastChunk: true,
        metadata: undefined,
      }),
    );
    bus.publish(
      AgentEvent.statusUpdate({
        taskId,
        contextId,
        status: { state: TaskState.TASK_STATE_COMPLETED, message: undefined, timestamp: new Date().toISOString() },
        metadata: undefined,
      }),
    );
    bus.finished();
  },
  async cancelTask() {},
};

const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), bench);
const app = express();
app.use('/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: handler }));
app.use('/a2a/jsonrpc', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
const server = app.listen(port, HOST, () => console.log(`listening on ${base}`));

for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    server.closeAllConnections();
    server.close(() => process.exit(0));
  });
}
