// A small echo agent on @a2a-js/sdk: its card at /.well-known/agent-card.json and JSON-RPC at /a2a/jsonrpc, the
// paths the capture kit's agents use, on 127.0.0.1. It answers every message with a message that repeats its text.
//
// Usage: node echo-server.mjs [PORT]   (0 or nothing: any free port). Prints one line, `listening on URL`, when ready.

import { randomUUID } from 'node:crypto';
import express from 'express';
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express';
import { Role } from '@a2a-js/sdk';

const HOST = '127.0.0.1';

function card(base) {
  return {
    name: 'echo',
    description: 'Repeats the text of each message it receives.',
    supportedInterfaces: [{ url: `${base}/a2a/jsonrpc`, protocolBinding: 'JSONRPC', protocolVersion: '1.0' }],
    provider: { url: 'https://example.com/echo', organization: 'a2a-bridge interop' },
    version: '1.0.0',
    capabilities: { streaming: false, pushNotifications: false },
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: [{ id: 'echo', name: 'Echo', description: 'Repeat the text of a message.', tags: ['echo'], examples: ['hello'] }],
  };
}

const echo = {
  async execute(context, bus) {
    const text = context.userMessage.parts
      .map((part) => (part.content?.$case === 'text' ? part.content.value : ''))
      .join(' ');
    bus.publish(
      AgentEvent.message({
        messageId: randomUUID(),
        contextId: context.contextId,
        taskId: '',
        role: Role.ROLE_AGENT,
        parts: [{ content: { $case: 'text', value: text }, metadata: undefined, filename: '', mediaType: '' }],
        metadata: undefined,
        extensions: [],
        referenceTaskIds: [],
      }),
    );
    bus.finished();
  },
  async cancelTask() {},
};

const app = express();
const server = app.listen(Number(process.argv[2] ?? 0), HOST, () => {
  const base = `http://${HOST}:${server.address().port}`;
  const handler = new DefaultRequestHandler(card(base), new InMemoryTaskStore(), echo);
  app.use('/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: handler }));
  app.use('/a2a/jsonrpc', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
  console.log(`listening on ${base}`);
});

for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
