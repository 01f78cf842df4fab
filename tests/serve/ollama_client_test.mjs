// `tensorpc serve`'s Ollama API through the official `ollama` npm package:
//
//   node tests/serve/ollama_client_test.mjs BASE_URL [KEYED_URL KEY]
//
// BASE_URL is a serve without a key; KEYED_URL one started with --api-key KEY
// (sent as Authorization: Bearer). Each case prints one line; the first
// failure exits 1 with the reason. Checks:
//   - list() shows the served model, show() describes it;
//   - chat() at temperature 0 answers the text /v1/chat/completions gives,
//     done, with counts; streamed (NDJSON) its pieces add up to it;
//   - generate() streamed and not give the same response;
//   - embed(): a unit vector per input, equal texts equal vectors, different
//     ones different; an empty input throws (400);
//   - an unknown option and a wrong model name throw ResponseError (400, 404);
//   - with KEYED_URL: the right key is served, a wrong key throws (401).
//
// The package is found in TENSORPC_NPM_DIR (an `npm install --prefix` folder).
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';

function exitFailed(message) {
  console.error(`ollama client test FAILED: ${message}`);
  process.exit(1);
}

function loadOllama() {
  const dir = process.env.TENSORPC_NPM_DIR;
  const require = createRequire(dir ? path.join(path.resolve(dir), 'index.js') : import.meta.url);
  try {
    return require('ollama');
  } catch (e) {
    exitFailed(`the ollama package is not found (${dir ? `TENSORPC_NPM_DIR=${dir}` : 'set TENSORPC_NPM_DIR'}): ${e.message}`);
  }
}

const [baseUrl, keyedUrl, key, toolsUrl] = process.argv.slice(2);
if (!baseUrl || (keyedUrl && !key)) exitFailed('usage: node ollama_client_test.mjs BASE_URL [KEYED_URL KEY [TOOLS_URL]]');
const { Ollama } = loadOllama();
const client = new Ollama({ host: baseUrl });
const MESSAGES = [{ role: 'user', content: 'Who made the heaven and the earth?' }];
const OPTIONS = { temperature: 0, num_predict: 16 };

async function check(name, body) {
  try {
    await body();
  } catch (e) {
    exitFailed(`${name}: ${e.stack ?? e}`);
  }
  console.log(`ok   ${name}`);
}

let model = null;
await check('list() shows the served model; show() describes it', async () => {
  const { models } = await client.list();
  assert.equal(models.length, 1);
  model = models[0].name;
  assert.equal(models[0].details.format, 'gguf');
  assert.ok(models[0].size > 0);
  const shown = await client.show({ model });
  assert.equal(shown.details.family, models[0].details.family);
  assert.ok(shown.model_info['general.parameter_count'] > 0);
});

let answer = null;
await check('chat() at temperature 0: the chat completion\'s text, done, with counts; streamed, the same', async () => {
  const r = await client.chat({ model, messages: MESSAGES, options: OPTIONS, stream: false });
  assert.equal(r.done, true);
  assert.equal(r.message.role, 'assistant');
  answer = r.message.content;
  assert.ok(answer.trim().length > 0, 'the answer is empty');
  assert.ok(r.eval_count > 0 && r.prompt_eval_count > 0, JSON.stringify(r));
  const res = await fetch(`${baseUrl}/v1/chat/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: MESSAGES, temperature: 0, max_tokens: 16 }),
  });
  assert.equal((await res.json()).choices[0].message.content, answer);
  let streamed = '';
  let parts = 0;
  let last = null;
  for await (const part of await client.chat({ model, messages: MESSAGES, options: OPTIONS, stream: true })) {
    streamed += part.message.content;
    parts += 1;
    last = part;
  }
  assert.ok(parts >= 3, `${parts} parts`);
  assert.equal(streamed, answer);
  assert.equal(last.done, true);
  assert.ok(['stop', 'length'].includes(last.done_reason), last.done_reason);
});

await check('generate() streamed and not give the same response', async () => {
  const whole = await client.generate({ model, prompt: 'And God said', options: OPTIONS, stream: false });
  assert.ok(whole.response.length > 0);
  let streamed = '';
  for await (const part of await client.generate({ model, prompt: 'And God said', options: OPTIONS, stream: true })) {
    streamed += part.response;
  }
  assert.equal(streamed, whole.response);
});

await check('embed(): a unit vector per input, the same text the same vector; an empty input throws (400)', async () => {
  const input = ['In the beginning God created the heaven and the earth.', 'And God saw the light, that it was good.',
    'In the beginning God created the heaven and the earth.'];
  const r = await client.embed({ model, input });
  assert.equal(r.embeddings.length, 3);
  for (const v of r.embeddings) {
    assert.equal(v.length, r.embeddings[0].length);
    assert.ok(Math.abs(Math.hypot(...v) - 1) < 1e-4, `length ${Math.hypot(...v)}`);
  }
  assert.ok(r.embeddings[0].every((x, i) => Math.abs(x - r.embeddings[2][i]) < 1e-4));
  assert.ok(r.embeddings[0].some((x, i) => Math.abs(x - r.embeddings[1][i]) > 1e-3));
  assert.ok(r.prompt_eval_count > 0);
  await assert.rejects(client.embed({ model, input: '' }), (e) => e.status_code === 400);
});

await check('an unknown option and an unknown model throw ResponseError (400, 404)', async () => {
  await assert.rejects(client.chat({ model, messages: MESSAGES, options: { mirostat: 2 }, stream: false }),
    (e) => e.status_code === 400 && /mirostat/.test(e.error));
  await assert.rejects(client.chat({ model: 'no-such-model', messages: MESSAGES, stream: false }),
    (e) => e.status_code === 404);
});

if (toolsUrl) {
  // Ollama has no tool_choice: the call comes from the OpenAI route, where it can be required.
  const TOOLS = [{
    type: 'function',
    function: {
      name: 'get_weather', description: 'The weather in a city',
      parameters: { type: 'object', properties: { unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } }, required: ['unit'] },
    },
  }];
  const ASK = [{ role: 'user', content: 'What is the weather like?' }];
  await check('chat() with tools: a call and its tool message in the history are answered in text', async () => {
    const res = await fetch(`${toolsUrl}/v1/chat/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ messages: ASK, tools: TOOLS, tool_choice: 'required', temperature: 0, max_tokens: 200 }),
    });
    const call = (await res.json()).choices[0].message.tool_calls[0].function;
    const tools = new Ollama({ host: toolsUrl });
    const r = await tools.chat({
      model, tools: TOOLS, stream: false, options: OPTIONS,
      messages: [...ASK, { role: 'assistant', content: '', tool_calls: [{ function: { name: call.name, arguments: JSON.parse(call.arguments) } }] },
        { role: 'tool', content: '21 degrees' }],
    });
    assert.equal(r.done, true);
    assert.ok(r.message.content.length > 0, JSON.stringify(r.message));
  });
  await check('chat() with tools on a template without tool syntax throws ResponseError (400)', async () => {
    let thrown = null;
    try {
      await client.chat({ model, messages: ASK, tools: TOOLS, stream: false, options: OPTIONS });
    } catch (e) {
      thrown = e;
    }
    assert.ok(thrown && thrown.status_code === 400, `${thrown}`);
    assert.match(thrown.message, /no tool calling/);
  });
}

if (keyedUrl) {
  await check('with --api-key, the right key is served and a wrong one throws (401)', async () => {
    const keyed = new Ollama({ host: keyedUrl, headers: { Authorization: `Bearer ${key}` } });
    const r = await keyed.chat({ model, messages: MESSAGES, options: { temperature: 0, num_predict: 4 }, stream: false });
    assert.ok(r.message.content.length > 0);
    const wrong = new Ollama({ host: keyedUrl, headers: { Authorization: 'Bearer wrong' } });
    await assert.rejects(wrong.chat({ model, messages: MESSAGES, stream: false }), (e) => e.status_code === 401);
  });
}
