// `tensorpc serve`'s Messages API through the official Anthropic client for
// Node (the `@anthropic-ai/sdk` npm package):
//
//   node tests/serve/anthropic_client_test.mjs BASE_URL [KEYED_URL KEY [TOOLS_URL]]
//
// BASE_URL is a serve without a key; KEYED_URL one started with --api-key KEY
// (the SDK sends it as x-api-key). Each case prints one line; the first
// failure exits 1 with the reason. Checks:
//   - messages.create at temperature 0 answers a message with text, a
//     stop_reason and usage, the text the same as /v1/chat/completions gives;
//   - the same streamed (messages.stream) comes as text deltas that add up to
//     it, with message_start first and message_stop last;
//   - stop_sequences end the text before the sequence, said as stop_reason
//     "stop_sequence" with the sequence;
//   - with TOOLS_URL (a serve whose template has tool syntax): tool_choice
//     "any" answers a tool_use block (stop_reason "tool_use", its input valid
//     for the tool's schema); streamed, input_json_delta events that the SDK
//     reassembles into the same input; the call's tool_result sent back is
//     answered in text;
//   - with KEYED_URL: the right key is served, a wrong key throws
//     AuthenticationError (401); a request without max_tokens throws
//     BadRequestError (400).
//
// The package is found in TENSORPC_NPM_DIR (an `npm install --prefix` folder).
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';

function exitFailed(message) {
  console.error(`anthropic client test FAILED: ${message}`);
  process.exit(1);
}

function loadAnthropic() {
  const dir = process.env.TENSORPC_NPM_DIR;
  const require = createRequire(dir ? path.join(path.resolve(dir), 'index.js') : import.meta.url);
  try {
    const mod = require('@anthropic-ai/sdk');
    return mod.Anthropic ?? mod.default ?? mod;
  } catch (e) {
    exitFailed(`the @anthropic-ai/sdk package is not found (${dir ? `TENSORPC_NPM_DIR=${dir}` : 'set TENSORPC_NPM_DIR'}): ${e.message}`);
  }
}

const [baseUrl, keyedUrl, key, toolsUrl] = process.argv.slice(2);
if (!baseUrl || (keyedUrl && !key)) exitFailed('usage: node anthropic_client_test.mjs BASE_URL [KEYED_URL KEY [TOOLS_URL]]');
const Anthropic = loadAnthropic();
const client = new Anthropic({ baseURL: baseUrl, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });

const MAX_TOKENS = 16;
// The served model's name (both serves serve the same file).
const model = (await (await fetch(`${baseUrl}/v1/models`)).json()).data[0].id;
const MESSAGES = [{ role: 'user', content: 'Who made the heaven and the earth?' }];

async function check(name, body) {
  try {
    await body();
  } catch (e) {
    exitFailed(`${name}: ${e.stack ?? e}`);
  }
  console.log(`ok   ${name}`);
}

let message = null;
await check('messages.create answers text, a stop_reason and usage, as the chat completion does', async () => {
  message = await client.messages.create({ model, max_tokens: MAX_TOKENS, temperature: 0, messages: MESSAGES });
  assert.equal(message.type, 'message');
  assert.equal(message.role, 'assistant');
  assert.equal(message.content.length, 1);
  assert.equal(message.content[0].type, 'text');
  assert.ok(message.content[0].text.trim().length > 0, 'the answer is empty');
  assert.ok(['end_turn', 'max_tokens'].includes(message.stop_reason), `stop_reason ${message.stop_reason}`);
  assert.ok(message.usage.input_tokens > 0 && message.usage.output_tokens > 0, JSON.stringify(message.usage));
  const res = await fetch(`${baseUrl}/v1/chat/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: MESSAGES, temperature: 0, max_tokens: MAX_TOKENS }),
  });
  assert.equal((await res.json()).choices[0].message.content, message.content[0].text);
});

await check('messages.stream: text deltas add up to the message, message_start first, message_stop last', async () => {
  const stream = client.messages.stream({ model, max_tokens: MAX_TOKENS, temperature: 0, messages: MESSAGES });
  const events = [];
  let text = '';
  for await (const event of stream) {
    events.push(event.type);
    if (event.type === 'content_block_delta') text += event.delta.text;
  }
  assert.equal(events[0], 'message_start');
  assert.equal(events.at(-1), 'message_stop');
  assert.ok(events.filter((e) => e === 'content_block_delta').length >= 2, JSON.stringify(events));
  assert.equal(text, message.content[0].text);
  const final = await stream.finalMessage();
  assert.equal(final.stop_reason, message.stop_reason);
  assert.equal(final.usage.output_tokens, message.usage.output_tokens);
});

await check('stop_sequences end the text before the sequence, said so', async () => {
  const words = message.content[0].text.trim().split(/\s+/);
  const stop = words[Math.min(2, words.length - 1)];
  const m = await client.messages.create({
    model, max_tokens: MAX_TOKENS, temperature: 0, messages: MESSAGES, stop_sequences: [stop],
  });
  assert.equal(m.stop_reason, 'stop_sequence');
  assert.equal(m.stop_sequence, stop);
  assert.ok(!m.content[0].text.includes(stop), `${JSON.stringify(m.content[0].text)} holds ${stop}`);
});

if (toolsUrl) {
  const tools = new Anthropic({ baseURL: toolsUrl, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
  const TOOLS = [{
    name: 'get_weather',
    description: 'The weather in a city',
    input_schema: { type: 'object', properties: { unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } }, required: ['unit'] },
  }];
  const ASK = [{ role: 'user', content: 'What is the weather like?' }];
  const CALL = { model, max_tokens: 200, temperature: 0, tools: TOOLS, tool_choice: { type: 'any' }, messages: ASK };
  let use = null;
  await check('tools: tool_choice any answers a tool_use block, stop_reason tool_use', async () => {
    const m = await tools.messages.create(CALL);
    assert.equal(m.stop_reason, 'tool_use', JSON.stringify(m));
    use = m.content.find((b) => b.type === 'tool_use');
    assert.ok(use, JSON.stringify(m.content));
    assert.equal(use.name, 'get_weather');
    assert.match(use.id, /^toolu_[A-Za-z0-9]+$/);
    assert.ok(['celsius', 'fahrenheit'].includes(use.input.unit), JSON.stringify(use.input));
  });
  await check('tools: streamed, input_json_delta events reassemble into the same input', async () => {
    const stream = tools.messages.stream(CALL);
    let deltas = 0;
    for await (const event of stream) {
      if (event.type === 'content_block_delta' && event.delta.type === 'input_json_delta') ++deltas;
    }
    assert.ok(deltas >= 2, `${deltas} input_json_delta events`);
    const final = await stream.finalMessage();
    assert.equal(final.stop_reason, 'tool_use');
    const streamed = final.content.find((b) => b.type === 'tool_use');
    assert.deepEqual(streamed.input, use.input);
    assert.equal(streamed.name, use.name);
  });
  await check('tools: the tool_result sent back is answered in text', async () => {
    const m = await tools.messages.create({
      model, max_tokens: MAX_TOKENS, temperature: 0, tools: TOOLS,
      messages: [...ASK, { role: 'assistant', content: [use] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '21 degrees' }] }],
    });
    assert.ok(['end_turn', 'max_tokens'].includes(m.stop_reason), m.stop_reason);
    assert.equal(m.content[0].type, 'text');
    assert.ok(m.content[0].text.length > 0);
  });
}

if (keyedUrl) {
  await check('with --api-key, the right x-api-key is served', async () => {
    const keyed = new Anthropic({ baseURL: keyedUrl, apiKey: key, maxRetries: 0 });
    const m = await keyed.messages.create({ model, max_tokens: 4, temperature: 0, messages: MESSAGES });
    assert.ok(m.content[0].text.length > 0);
  });
  await check('a wrong key throws AuthenticationError (401)', async () => {
    const wrong = new Anthropic({ baseURL: keyedUrl, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(wrong.messages.create({ model, max_tokens: 4, messages: MESSAGES }),
      (e) => e instanceof Anthropic.AuthenticationError && e.status === 401);
  });
}

await check('a request without max_tokens throws BadRequestError (400)', async () => {
  await assert.rejects(client.messages.create({ model, messages: MESSAGES }),
    (e) => e instanceof Anthropic.BadRequestError && e.status === 400 && /max_tokens/.test(e.message));
});
