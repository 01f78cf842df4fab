// `tensorpc serve` through the official OpenAI client for Node (the `openai`
// npm package, v4 API):
//
//   node tests/serve/openai_client_test.mjs BASE_URL [KEYED_URL KEY [TOOLS_URL]]
//
// BASE_URL is a serve without a key; KEYED_URL one started with --api-key KEY;
// TOOLS_URL one whose chat template has tool syntax (--chat-template chatml).
// Each case prints one line; the first failure exits 1 with the reason.
// Checks, in order:
//   - models.list() lists the served model;
//   - a chat completion at temperature 0 has text, a finish_reason and usage;
//   - the same chat streamed (`for await`) comes in 2 or more content chunks
//     whose concatenation is the non-streamed answer, with the same finish_reason;
//   - with stream_options.include_usage the last chunk carries the usage;
//   - completions.create equals the same completion fetched as plain JSON,
//     and its stream concatenates to it;
//   - logprobs (chat, streamed or not, and completions): at temperature 0 each
//     token is its own top alternative, the text unchanged;
//   - presence/frequency penalties change a temperature-0 reply, and a
//     logit_bias on a token the vocabulary lacks throws BadRequestError;
//   - n: 3 gives three indexed choices with their own draws, streamed or not
//     alike; n above --parallel throws BadRequestError;
//   - response_format json_schema: 50 replies at temperature 1 parse and
//     validate against the schema (ajv); json_object replies parse; a schema
//     keyword tensorpc lacks throws BadRequestError;
//   - with KEYED_URL: the right key is served, a wrong key throws
//     AuthenticationError (401);
//   - embeddings.create (the package's base64 decoded by it, and "float" and
//     "base64" asked for by name): unit vectors of one width, the same text the
//     same vector batched or alone, different texts different ones; an empty
//     input or other dimensions throw BadRequestError;
//   - with TOOLS_URL, tools: a required call (finish_reason tool_calls, the
//     arguments valid JSON of the tool's schema), its result sent back as a
//     `tool` message and answered in text; a named function called; a streamed
//     call reassembled from delta.tool_calls (id and name first, the arguments
//     in two or more pieces) equal to the call not streamed; tools on
//     BASE_URL, whose template has no tool syntax, throw BadRequestError;
//   - a malformed request (temperature "hot", messages missing) throws
//     BadRequestError (400) naming the field.
//
// The package is found in TENSORPC_NPM_DIR (an `npm install --prefix` folder)
// when set, else as usual: ESM imports ignore NODE_PATH, so it is required
// from a path inside that folder.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';

function exitFailed(message) {
  console.error(`openai client test FAILED: ${message}`);
  process.exit(1);
}

// Another package of the same folder.
function loadPackage(name) {
  const dir = process.env.TENSORPC_NPM_DIR;
  const require = createRequire(dir ? path.join(path.resolve(dir), 'index.js') : import.meta.url);
  return require(name);
}

function loadOpenAI() {
  const dir = process.env.TENSORPC_NPM_DIR;
  const require = createRequire(dir ? path.join(path.resolve(dir), 'index.js') : import.meta.url);
  try {
    const mod = require('openai');
    return mod.OpenAI ?? mod.default ?? mod;
  } catch (e) {
    exitFailed(`the openai package is not found (${dir ? `TENSORPC_NPM_DIR=${dir}` : 'set TENSORPC_NPM_DIR'}): ${e.message}`);
  }
}

const [baseUrl, keyedUrl, key, toolsUrl] = process.argv.slice(2);
if (!baseUrl || (keyedUrl && !key)) exitFailed('usage: node openai_client_test.mjs BASE_URL [KEYED_URL KEY [TOOLS_URL]]');
const OpenAI = loadOpenAI();
// No retries: a 5xx must show, not be hidden behind a second try.
const client = new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });

const MAX_TOKENS = 16;
const MESSAGES = [{ role: 'user', content: 'Who made the heaven and the earth?' }];
const PROMPT = 'And God said, Let there be light';

async function check(name, body) {
  try {
    await body();
  } catch (e) {
    exitFailed(`${name}: ${e.stack || e.message}`);
  }
  console.log(`ok   ${name}`);
}

// Runs `body`, which must throw an instance of `errorClass` with `status`; returns the error.
async function expectThrows(errorClass, status, body) {
  let thrown = null;
  try {
    await body();
  } catch (e) {
    thrown = e;
  }
  assert.ok(thrown, `expected ${errorClass.name}, but the call succeeded`);
  assert.ok(thrown instanceof errorClass, `expected ${errorClass.name}, got ${thrown.constructor.name}: ${thrown.message}`);
  assert.equal(thrown.status, status);
  return thrown;
}

function checkUsage(usage, what) {
  assert.ok(usage, `${what}: no usage`);
  assert.ok(usage.prompt_tokens > 0, `${what}: prompt_tokens ${usage.prompt_tokens}`);
  assert.ok(usage.completion_tokens > 0 && usage.completion_tokens <= MAX_TOKENS,
    `${what}: completion_tokens ${usage.completion_tokens} not in 1..${MAX_TOKENS}`);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens, `${what}: total_tokens`);
}

let model = '';
await check('models.list() lists the served model', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.equal(ids.length, 1, `models: ${JSON.stringify(ids)}`);
  model = ids[0];
  assert.ok(model.length > 0);
});

let chat = null;
await check('a chat completion at temperature 0 has text, finish_reason and usage', async () => {
  chat = await client.chat.completions.create({ model, messages: MESSAGES, temperature: 0, max_tokens: MAX_TOKENS });
  assert.equal(chat.object, 'chat.completion');
  assert.equal(chat.model, model);
  assert.equal(chat.choices.length, 1);
  const choice = chat.choices[0];
  assert.equal(choice.message.role, 'assistant');
  assert.equal(typeof choice.message.content, 'string');
  assert.ok(choice.message.content.trim().length > 0, 'the answer is empty');
  assert.ok(['stop', 'length'].includes(choice.finish_reason), `finish_reason ${choice.finish_reason}`);
  checkUsage(chat.usage, 'chat');
});

await check('a streamed chat comes chunk by chunk and adds up to the non-streamed answer', async () => {
  const stream = await client.chat.completions.create({
    model, messages: MESSAGES, temperature: 0, max_tokens: MAX_TOKENS, stream: true,
  });
  const pieces = [];
  let finish = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    const choice = chunk.choices[0];
    if (!choice) continue;
    if (choice.delta?.content) pieces.push(choice.delta.content);
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  assert.ok(pieces.length >= 2, `${pieces.length} content chunk(s): ${JSON.stringify(pieces)}`);
  assert.equal(pieces.join(''), chat.choices[0].message.content);
  assert.equal(finish, chat.choices[0].finish_reason);
});

await check('with stream_options.include_usage the last chunk has the usage', async () => {
  const stream = await client.chat.completions.create({
    model, messages: MESSAGES, temperature: 0, max_tokens: MAX_TOKENS, stream: true,
    stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  assert.ok(chunks.length >= 3, `${chunks.length} chunks`);
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, [], 'the usage chunk has choices');
  checkUsage(last.usage, 'the last chunk');
  assert.deepEqual(last.usage, chat.usage, 'streamed usage differs from the non-streamed one');
  for (const c of chunks.slice(0, -1)) assert.ok(!c.usage, `an earlier chunk has usage: ${JSON.stringify(c)}`);
});

await check('completions.create equals the plain-JSON completion, streamed or not', async () => {
  const request = { model, prompt: PROMPT, temperature: 0, max_tokens: MAX_TOKENS };
  const viaPackage = await client.completions.create(request);
  const res = await fetch(`${baseUrl}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(request),
  });
  assert.equal(res.status, 200);
  const plain = await res.json();
  assert.equal(viaPackage.object, 'text_completion');
  const text = viaPackage.choices[0].text;
  assert.ok(text.trim().length > 0, 'the completion is empty');
  assert.equal(text, plain.choices[0].text);
  assert.equal(viaPackage.choices[0].finish_reason, plain.choices[0].finish_reason);
  checkUsage(viaPackage.usage, 'completion');

  const stream = await client.completions.create({ ...request, stream: true });
  let streamed = '';
  for await (const chunk of stream) streamed += chunk.choices[0]?.text ?? '';
  assert.equal(streamed, text);
});

if (keyedUrl) {
  await check('with --api-key, the right key is served', async () => {
    const keyed = new OpenAI({ baseURL: `${keyedUrl}/v1`, apiKey: key, maxRetries: 0, timeout: 60_000 });
    const page = await keyed.models.list();
    assert.equal(page.data.length, 1);
  });
  await check('a wrong key throws AuthenticationError (401)', async () => {
    const wrong = new OpenAI({ baseURL: `${keyedUrl}/v1`, apiKey: `${key}-wrong`, maxRetries: 0, timeout: 60_000 });
    const e = await expectThrows(OpenAI.AuthenticationError, 401, () => wrong.models.list());
    assert.equal(e.type, 'authentication_error');
  });
}

await check('logprobs: each token is its top alternative at temperature 0, streamed or not, same text', async () => {
  const request = { model, messages: MESSAGES, temperature: 0, max_tokens: MAX_TOKENS, logprobs: true, top_logprobs: 3 };
  const r = await client.chat.completions.create(request);
  const choice = r.choices[0];
  assert.equal(choice.message.content, chat.choices[0].message.content, 'logprobs changed the text');
  const content = choice.logprobs?.content;
  assert.ok(Array.isArray(content) && content.length > 0, `logprobs: ${JSON.stringify(choice.logprobs)}`);
  const joined = content.map((t) => t.token).join('');
  assert.ok(choice.message.content.startsWith(joined.trimStart()) || joined.startsWith(choice.message.content),
    `tokens ${JSON.stringify(joined)} against ${JSON.stringify(choice.message.content)}`);
  for (const t of content) {
    assert.equal(t.top_logprobs.length, 3);
    assert.equal(t.top_logprobs[0].token, t.token, `greedy took ${t.token}, the top was ${t.top_logprobs[0].token}`);
    assert.ok(t.logprob <= 0 && t.top_logprobs[1].logprob <= t.top_logprobs[0].logprob);
    assert.deepEqual(t.bytes, [...Buffer.from(t.token)]);
  }
  const stream = await client.chat.completions.create({ ...request, stream: true });
  const streamed = [];
  for await (const chunk of stream) streamed.push(...(chunk.choices[0]?.logprobs?.content ?? []));
  assert.deepEqual(streamed.map((t) => t.token), content.map((t) => t.token));
  const completion = await client.completions.create({ model, prompt: PROMPT, temperature: 0, max_tokens: MAX_TOKENS, logprobs: 2 });
  const lp = completion.choices[0].logprobs;
  assert.equal(lp.tokens.length, lp.token_logprobs.length);
  assert.equal(lp.top_logprobs.length, lp.tokens.length);
  assert.equal(lp.text_offset[0], 0);
});

await check('presence/frequency penalties change a reply at temperature 0; a bias on no token is a 400', async () => {
  const base = chat.choices[0].message.content;
  const penalised = await client.chat.completions.create({
    model, messages: MESSAGES, temperature: 0, max_tokens: MAX_TOKENS, frequency_penalty: 2, presence_penalty: 2,
  });
  assert.notEqual(penalised.choices[0].message.content, base, 'the penalties changed nothing');
  // A bias on a token id the vocabulary lacks is the client's mistake.
  await expectThrows(OpenAI.BadRequestError, 400, () => client.chat.completions.create({
    model, messages: MESSAGES, temperature: 0, max_tokens: 4, logit_bias: { 99999999: 1 },
  }));
});

await check('n: 3 choices generated together, indexed, each its own draws; streamed, the same texts', async () => {
  const request = { model, messages: MESSAGES, temperature: 1, seed: 7, max_tokens: MAX_TOKENS, n: 3 };
  const r = await client.chat.completions.create(request);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  for (const c of r.choices) assert.ok(c.message.content.length > 0, `choice ${c.index} is empty`);
  assert.ok(new Set(r.choices.map((c) => c.message.content)).size > 1, 'three draws gave one text');
  assert.ok(r.usage.completion_tokens >= 3);
  const stream = await client.chat.completions.create({ ...request, stream: true });
  const texts = ['', '', ''];
  for await (const chunk of stream) for (const c of chunk.choices) texts[c.index] += c.delta?.content ?? '';
  assert.deepEqual(texts, r.choices.map((c) => c.message.content));
  const e = await expectThrows(OpenAI.BadRequestError, 400, () => client.chat.completions.create({ ...request, n: 16 }));
  assert.match(e.message, /--parallel/);
});

await check('json_schema: 50 replies at temperature 1 parse and validate (ajv); json_object replies parse', async () => {
  const Ajv = loadPackage('ajv');
  const schema = {
    type: 'object',
    properties: {
      book: { enum: ['Genesis', 'Exodus', 'Psalms'] },
      chapter: { type: 'integer' },
      holy: { type: 'boolean' },
    },
    required: ['book', 'chapter', 'holy'],
    additionalProperties: false,
  };
  const validate = new (Ajv.default ?? Ajv)().compile(schema);
  const replies = [];
  for (let first = 0; first < 50; first += 10) {  // ten at a time: within the slots and the queue
    replies.push(...await Promise.all(Array.from({ length: 10 }, (_, i) => client.chat.completions.create({
      model, messages: MESSAGES, temperature: 1, seed: first + i, max_tokens: 200,
      response_format: { type: 'json_schema', json_schema: { name: 'verse', schema } },
    }))));
  }
  for (const r of replies) {
    const text = r.choices[0].message.content;
    assert.equal(r.choices[0].finish_reason, 'stop', `cut short: ${text}`);
    const value = JSON.parse(text);
    assert.ok(validate(value), `${text}: ${JSON.stringify(validate.errors)}`);
  }
  const object = await client.chat.completions.create({
    model, messages: MESSAGES, temperature: 1, seed: 3, max_tokens: 200, response_format: { type: 'json_object' },
  });
  if (object.choices[0].finish_reason === 'stop') {
    assert.equal(typeof JSON.parse(object.choices[0].message.content), 'object');
  }
  await expectThrows(OpenAI.BadRequestError, 400, () => client.chat.completions.create({
    model, messages: MESSAGES, max_tokens: 8,
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', patternProperties: {} } } },
  }));
});

// The largest difference between two vectors' values, and a vector's length.
const farthest = (a, b) => Math.max(...a.map((x, i) => Math.abs(x - b[i])));
const norm = (v) => Math.sqrt(v.reduce((sum, x) => sum + x * x, 0));

await check('embeddings.create: unit vectors, equal texts equal, different texts different; float and base64 agree', async () => {
  const texts = ['In the beginning God created the heaven and the earth.', 'And the earth was without form, and void;',
    'In the beginning God created the heaven and the earth.'];
  // No encoding_format: the package asks for base64 and decodes it into numbers itself.
  const r = await client.embeddings.create({ model, input: texts });
  assert.equal(r.object, 'list');
  assert.equal(r.model, model);
  assert.equal(r.data.length, texts.length);
  const width = r.data[0].embedding.length;
  assert.ok(width > 0);
  for (const [i, d] of r.data.entries()) {
    assert.equal(d.object, 'embedding');
    assert.equal(d.index, i);
    assert.equal(d.embedding.length, width);
    assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-4, `vector ${i} has length ${norm(d.embedding)}`);
  }
  assert.ok(farthest(r.data[0].embedding, r.data[2].embedding) < 1e-4, 'the same text gave different vectors');
  assert.ok(farthest(r.data[0].embedding, r.data[1].embedding) > 1e-3, 'different texts gave the same vector');
  assert.ok(r.usage.prompt_tokens > 0);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens);

  // Asked for by name, the answer comes as it is: numbers, or base64 of little-endian float32 values.
  const asFloats = await client.embeddings.create({ model, input: texts[0], encoding_format: 'float' });
  assert.equal(asFloats.data.length, 1);
  const floats = asFloats.data[0].embedding;
  assert.ok(farthest(floats, r.data[0].embedding) < 1e-4, 'alone and batched differ');
  const asBase64 = await client.embeddings.create({ model, input: texts[0], encoding_format: 'base64', dimensions: width });
  const bytes = Buffer.from(asBase64.data[0].embedding, 'base64');
  assert.equal(bytes.length, 4 * width);
  const decoded = Array.from({ length: width }, (_, i) => bytes.readFloatLE(4 * i));
  assert.deepEqual(decoded, floats.map((x) => Math.fround(x)));
});

await check('embeddings.create with an empty input, or dimensions other than the width, throws BadRequestError', async () => {
  for (const input of ['', [], ['a text', '']]) {
    const e = await expectThrows(OpenAI.BadRequestError, 400, () => client.embeddings.create({ model, input }));
    assert.match(e.param, /^input/);
    assert.equal(e.type, 'invalid_request_error');
  }
  const e = await expectThrows(OpenAI.BadRequestError, 400, () =>
    client.embeddings.create({ model, input: 'a text', dimensions: 3 }));
  assert.equal(e.param, 'dimensions');
});

if (toolsUrl) {
  const tools = new OpenAI({ baseURL: `${toolsUrl}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
  const TOOLS = [
    {
      type: 'function',
      function: {
        name: 'get_weather',
        description: 'The weather in a city',
        parameters: {
          type: 'object',
          properties: { unit: { type: 'string', enum: ['celsius', 'fahrenheit'] }, detailed: { type: 'boolean' } },
          required: ['unit'],
        },
      },
    },
    { type: 'function', function: { name: 'now', description: 'The time', parameters: { type: 'object', properties: {} } } },
  ];
  const ASK = [{ role: 'user', content: 'What is the weather like?' }];
  const CALL = { model, messages: ASK, tools: TOOLS, tool_choice: 'required', max_tokens: 200, temperature: 0 };

  let call = null;
  await check('tools: a required call comes back as message.tool_calls, finish_reason tool_calls', async () => {
    const r = await tools.chat.completions.create(CALL);
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.tool_calls.length, 1);
    call = choice.message.tool_calls[0];
    assert.equal(call.type, 'function');
    assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
    assert.ok(['get_weather', 'now'].includes(call.function.name), call.function.name);
    const args = JSON.parse(call.function.arguments);
    if (call.function.name === 'get_weather') assert.ok(['celsius', 'fahrenheit'].includes(args.unit), call.function.arguments);
  });

  await check('tools: the call\'s result sent back as a tool message is answered in text', async () => {
    const r = await tools.chat.completions.create({
      model, tools: TOOLS, max_tokens: MAX_TOKENS, temperature: 0,
      messages: [...ASK, { role: 'assistant', content: null, tool_calls: [call] },
        { role: 'tool', tool_call_id: call.id, content: '{"temperature": 21}' }],
    });
    const choice = r.choices[0];
    assert.ok(['stop', 'length'].includes(choice.finish_reason), choice.finish_reason);
    assert.equal(typeof choice.message.content, 'string');
    assert.ok(choice.message.content.length > 0);
    assert.equal(choice.message.tool_calls, undefined);
  });

  await check('tools: tool_choice naming a function calls that one, at temperature 1 over 5 seeds', async () => {
    for (let seed = 1; seed <= 5; ++seed) {
      const r = await tools.chat.completions.create({
        ...CALL, temperature: 1, seed, tool_choice: { type: 'function', function: { name: 'get_weather' } },
      });
      const c = r.choices[0].message.tool_calls[0];
      assert.equal(c.function.name, 'get_weather');
      assert.ok(['celsius', 'fahrenheit'].includes(JSON.parse(c.function.arguments).unit), c.function.arguments);
    }
  });

  await check('tools: a streamed call reassembled from delta.tool_calls equals the call not streamed', async () => {
    const stream = await tools.chat.completions.create({ ...CALL, stream: true });
    const calls = [];
    let pieces = 0, finish = null;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (!choice) continue;
      if (choice.finish_reason) finish = choice.finish_reason;
      for (const d of choice.delta.tool_calls ?? []) {
        if (d.id) {
          assert.equal(calls.length, d.index, 'calls begin in order');
          calls.push({ id: d.id, name: d.function.name, arguments: d.function.arguments ?? '' });
        } else {
          calls[d.index].arguments += d.function.arguments;
          ++pieces;
        }
      }
    }
    assert.equal(finish, 'tool_calls');
    assert.equal(calls.length, 1);
    assert.ok(pieces >= 2, `arguments in ${pieces} pieces`);
    assert.equal(calls[0].name, call.function.name);
    assert.equal(calls[0].arguments, call.function.arguments);
  });

  await check('tools: a template without tool syntax throws BadRequestError naming tools', async () => {
    const e = await expectThrows(OpenAI.BadRequestError, 400, () =>
      client.chat.completions.create({ ...CALL, max_tokens: 4 }));
    assert.equal(e.param, 'tools');
    assert.match(e.message, /no tool calling/);
  });
}

await check('temperature "hot" throws BadRequestError (400) naming it', async () => {
  const e = await expectThrows(OpenAI.BadRequestError, 400, () =>
    client.chat.completions.create({ model, messages: MESSAGES, temperature: 'hot' }));
  assert.equal(e.param, 'temperature');
  assert.equal(e.type, 'invalid_request_error');
});

await check('a chat without messages throws BadRequestError (400) naming them', async () => {
  const e = await expectThrows(OpenAI.BadRequestError, 400, () => client.chat.completions.create({ model }));
  assert.equal(e.param, 'messages');
});

console.log('openai client test passed');
