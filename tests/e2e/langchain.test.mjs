// LangChain (@langchain/openai 1.x) against megaserve: ChatOpenAI on chat
// completions and with useResponsesApi (issue 12 item 1), invoke and stream,
// and bound tools with a tool round trip.
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { ChatOpenAI } from '@langchain/openai';
import { HumanMessage, ToolMessage } from '@langchain/core/messages';
import { startServer, MODEL, chatTools, calculate, MARKUP } from './helpers.mjs';

let srv;
before(async () => { srv = await startServer(); });
after(async () => { await srv.stop(); });

const make = (useResponsesApi) => new ChatOpenAI({
  model: MODEL, apiKey: 'none', temperature: 0, maxTokens: 48, useResponsesApi, maxRetries: 0,
  configuration: { baseURL: srv.base },
});

describe('LangChain ChatOpenAI', () => {
  for (const useResponsesApi of [false, true]) {
    const api = useResponsesApi ? 'Responses API' : 'chat completions';
    test(`${api}: invoke and stream agree`, async () => {
      const m = make(useResponsesApi);
      const r = await m.invoke('Hello, who are you?');
      assert.ok(typeof r.content === 'string' ? r.content.length > 0 : r.content.length > 0);
      const text = typeof r.content === 'string' ? r.content : r.content.map((p) => p.text ?? '').join('');
      assert.doesNotMatch(text, MARKUP);
      let streamed = '';
      for await (const chunk of await m.stream('Hello, who are you?')) {
        streamed += typeof chunk.content === 'string' ? chunk.content : chunk.content.map((p) => p.text ?? '').join('');
      }
      assert.equal(streamed, text);
      assert.ok(r.usage_metadata.input_tokens > 0 && r.usage_metadata.output_tokens > 0);
    });

    test(`${api}: bound tools, a call and its result`, async () => {
      const m = make(useResponsesApi).bindTools(chatTools);
      const q = new HumanMessage('What is 12 * 7?');
      const ai = await m.invoke([q]);
      assert.equal(ai.tool_calls.length, 1, JSON.stringify(ai));
      const call = ai.tool_calls[0];
      assert.equal(call.name, 'calculator');
      const answer = await m.invoke([q, ai, new ToolMessage({ tool_call_id: call.id, content: calculate(call.args.expression) })]);
      const text = typeof answer.content === 'string' ? answer.content : answer.content.map((p) => p.text ?? '').join('');
      assert.ok(text.length > 0);
      assert.doesNotMatch(text, MARKUP);
    });
  }
});
