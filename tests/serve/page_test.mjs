// The web page of `tensorpc serve`, driven in headless Chromium:
//
//   node tests/serve/page_test.mjs BASE_URL OUT_DIR [ENDPOINT,ENDPOINT,... [DEVICES_PER_SERVER]]
//
// Fails (exit 1, with the reason) when the page does not load, when anything
// is logged as a console error or thrown on the page, or when:
//   - "Hello" does not get an answer that streams in (its text seen growing in
//     two steps or more) and finishes within 60 s;
//   - after a reload the conversation is not there, or the past-chats list
//     does not hold it; a new chat does not start empty, or opening the old
//     one again does not show it;
//   - with the probabilities setting on, an answer is not shown as tokens, or
//     hovering one (or focusing it) shows no tip with its percentage and its
//     alternatives', or the tokens and their tips are gone after a reload;
//   - deleting a chat leaves it in the list or in storage;
//   - with storage failing (setItem throws), the page shows no note or does
//     not answer;
//   - at 1280x800 the cluster view lacks one of the given server endpoints,
//     a server does not list DEVICES_PER_SERVER devices, or the view needs
//     scrolling.
// Saves screenshots in OUT_DIR: page-desktop.png, page-desktop-tooltip.png,
// page-desktop-cluster.png, page-phone.png, page-phone-chats.png,
// page-phone-cluster.png.
//
// puppeteer-core is found in TENSORPC_NPM_DIR (an `npm install --prefix`
// folder) when set, else as usual (NODE_PATH included); Chromium at
// TENSORPC_CHROMIUM or /usr/bin/chromium.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const ANSWER_TIMEOUT_MS = 60_000;
const CLUSTER_TIMEOUT_MS = 15_000;  // the page polls every 2 s and retries failures

function exitFailed(reasons) {
  console.error(`page test FAILED:\n  ${reasons.join('\n  ')}`);
  process.exit(1);
}

// A failed check, thrown so that the browser is closed and every reason reported.
class Failure extends Error {}
function fail(message) {
  throw new Failure(message);
}

// ESM imports ignore NODE_PATH; require from a path inside the npm folder finds its node_modules.
function loadPuppeteer() {
  const dir = process.env.TENSORPC_NPM_DIR;
  const require = createRequire(dir ? path.join(path.resolve(dir), 'index.js') : import.meta.url);
  try {
    return require('puppeteer-core');
  } catch (e) {
    exitFailed([`puppeteer-core not found (${dir ? `TENSORPC_NPM_DIR=${dir}` : 'set TENSORPC_NPM_DIR'}): ${e.message}`]);
  }
}

const [baseUrl, outDir, endpointList = '', devicesArg = ''] = process.argv.slice(2);
if (!baseUrl || !outDir) {
  exitFailed(['usage: node page_test.mjs BASE_URL OUT_DIR [ENDPOINT,ENDPOINT,... [DEVICES_PER_SERVER]]']);
}
const endpoints = endpointList.split(',').map((s) => s.trim()).filter(Boolean);
const devicesPerServer = devicesArg ? Number(devicesArg) : null;
fs.mkdirSync(outDir, { recursive: true });

const puppeteer = loadPuppeteer();
const browser = await puppeteer.launch({
  executablePath: process.env.TENSORPC_CHROMIUM || '/usr/bin/chromium',
  headless: 'new',
  args: ['--no-sandbox'],
}).catch((e) => exitFailed([`Chromium did not start: ${e.message}`]));
const problems = [];  // console errors and page errors, all reported at the end

// Fails unless `got` equals `want` (compared as JSON), saying what `what` was.
function expectSame(got, want, what) {
  const [g, w] = [JSON.stringify(got), JSON.stringify(want)];
  if (g !== w) fail(`${what} is ${g}, not ${w}`);
}

// A page that reports its console errors and thrown errors into `problems`.
async function newPage(context, label) {
  const page = await context.newPage();
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`${label}: console error: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`${label}: page error: ${e.message}`));
  await page.setViewport({ width: 1280, height: 800 });
  return page;
}

async function load(page, how = 'load') {
  const res = await (how === 'reload' ? page.reload({ waitUntil: 'load', timeout: 30_000 })
    : page.goto(baseUrl, { waitUntil: 'load', timeout: 30_000 })).catch((e) => fail(`${baseUrl}: ${e.message}`));
  if (!res || !res.ok()) fail(`${baseUrl} answered ${res ? res.status() : 'nothing'}`);
  await page.waitForSelector('#prompt', { timeout: 10_000 }).catch(() => fail('no #prompt on the page'));
}

// Sends `text` and waits for the answer to finish; returns its text, note and tokens.
async function ask(page, text) {
  const before = await page.$$eval('#messages .msg.assistant', (els) => els.length);
  await page.type('#prompt', text);
  await page.keyboard.press('Enter');  // Enter sends
  await page.waitForFunction(
    (n) => document.querySelectorAll('#messages .msg.assistant').length > n &&
      document.getElementById('messages').dataset.state === 'idle',
    { timeout: ANSWER_TIMEOUT_MS, polling: 100 }, before,
  ).catch(() => fail(`${JSON.stringify(text)}: no finished answer within ${ANSWER_TIMEOUT_MS / 1000} s`));
  const answer = await page.evaluate(() => {
    const msg = [...document.querySelectorAll('#messages .msg.assistant')].at(-1);
    return {
      text: msg.querySelector('.content').textContent,
      error: msg.classList.contains('error') ? msg.textContent : null,
      note: msg.querySelector('.note')?.textContent ?? '',
      tokens: msg.querySelectorAll('.content .tok').length,
    };
  });
  if (answer.error) fail(`${JSON.stringify(text)}: the answer is an error: ${answer.error}`);
  if (!answer.text.trim()) fail(`${JSON.stringify(text)}: the answer is empty`);
  return answer;
}

// What the chat shows: [[role, text], ...], and the past-chats list: [{title, open}].
const shownChat = (page) => page.evaluate(() => ({
  messages: [...document.querySelectorAll('#messages .msg')]
    .map((m) => [m.classList.contains('user') ? 'user' : 'assistant', m.querySelector('.content').textContent]),
  list: [...document.querySelectorAll('#chat-list li')].map((li) => ({
    title: li.querySelector('.chat-title').textContent,
    open: li.querySelector('.chat-open').getAttribute('aria-current') === 'true',
  })),
  tokens: document.querySelectorAll('#messages .tok').length,
}));

// Hovers the `i`-th token (or focuses it, `how` 'focus'); returns the tip's rows, or fails.
async function tokenTip(page, i, how) {
  const handle = (await page.$$('#messages .tok'))[i] ?? fail(`no token ${i} to ${how}`);
  if (how === 'hover') await handle.hover(); else await handle.focus();
  await page.waitForSelector('#token-tip:not([hidden])', { timeout: 2_000 })
    .catch(() => fail(`${how} on token ${i}: no tip shown`));
  const tip = await page.$eval('#token-tip', (e) => ({
    head: e.querySelector('.tip-head')?.textContent ?? '',
    alts: [...e.querySelectorAll('.tip-alts li')].map((li) => li.textContent),
    rect: e.getBoundingClientRect().toJSON(),
  }));
  const { left, top, right, bottom } = tip.rect;
  const inside = left >= 0 && top >= 0 && right <= page.viewport().width && bottom <= page.viewport().height;
  const pct = /(\d+(\.\d+)?|<0\.1)%$/;
  if (!pct.test(tip.head)) fail(`${how} on token ${i}: the tip says ${JSON.stringify(tip.head)}, no percentage`);
  if (tip.alts.length < 2 || !tip.alts.every((a) => pct.test(a))) {
    fail(`${how} on token ${i}: the tip's alternatives are ${JSON.stringify(tip.alts)}`);
  }
  if (!inside) fail(`${how} on token ${i}: the tip is outside the window`);
  return tip;
}

// At 1280x800 the cluster view shows every server, each with its devices, on one screen.
async function checkClusterView(page) {
  await page.click('#tab-cluster');
  await page.waitForFunction(
    (want) => {
      const shown = [...document.querySelectorAll('#cluster [data-endpoint]')].map((e) => e.dataset.endpoint);
      return shown.length > 0 && want.every((ep) => shown.includes(ep));
    },
    { timeout: CLUSTER_TIMEOUT_MS, polling: 200 },
    endpoints,
  ).catch(async () => {
    const shown = await page.$$eval('#cluster [data-endpoint]', (els) => els.map((e) => e.dataset.endpoint));
    const status = await page.$eval('#cluster-status', (e) => e.textContent);
    fail(`the cluster view shows ${JSON.stringify(shown)} (${status}), not every one of ${JSON.stringify(endpoints)}`);
  });
  const cluster = await page.evaluate(() => {
    const view = document.getElementById('cluster-view');
    return {
      servers: Object.fromEntries([...document.querySelectorAll('#cluster [data-endpoint]')]
        .map((e) => [e.dataset.endpoint, e.querySelectorAll('.device').length])),
      view: [view.scrollHeight, view.clientHeight],
      page: document.documentElement.scrollHeight,
    };
  });
  console.log(`cluster: ${JSON.stringify(cluster.servers)}; view ${cluster.view.join('/')} px, ` +
    `page ${cluster.page} px`);
  for (const ep of devicesPerServer == null ? [] : endpoints) {
    expectSame(cluster.servers[ep], devicesPerServer, `the count of devices the cluster view lists of ${ep}`);
  }
  await page.screenshot({ path: path.join(outDir, 'page-desktop-cluster.png') });
  if (cluster.view[0] > cluster.view[1] || cluster.page > 800) {
    fail(`at 1280x800 the cluster view needs scrolling: ${cluster.view[0]} px of content in ${cluster.view[1]}, ` +
      `the page ${cluster.page} px`);
  }
}

// A new chat starts empty; with the probabilities setting on, its answer is shown as tokens,
// each with a tip on hover and on focus, and the arrow keys move between them.
async function checkNewChatWithProbabilities(page) {
  await page.click('#new-chat');
  const shown = await shownChat(page);
  if (shown.messages.length) fail(`a new chat shows ${JSON.stringify(shown.messages)}`);
  if (shown.list.some((c) => c.open)) fail(`a new chat leaves ${JSON.stringify(shown.list)} marked open`);
  await page.click('#show-probs');
  const probed = await ask(page, 'Who made the heaven?');
  if (probed.tokens < 2) fail(`with probabilities on, the answer shows ${probed.tokens} tokens`);
  const hovered = await tokenTip(page, 1, 'hover');
  console.log(`token tip: ${hovered.head}; ${hovered.alts.join(', ')}`);
  await page.screenshot({ path: path.join(outDir, 'page-desktop-tooltip.png') });
  await page.mouse.move(5, 5);
  await page.waitForSelector('#token-tip[hidden]', { timeout: 2_000 })
    .catch(() => fail('the tip stays after the mouse left'));
  await tokenTip(page, 0, 'focus');
  await page.keyboard.press('ArrowRight');
  const focused = await page.evaluate(
    () => [...document.querySelectorAll('#messages .tok')].indexOf(document.activeElement));
  expectSame(focused, 1, 'the token focused by ArrowRight from the first');
  const probedChat = (await shownChat(page)).messages;
  return { probed, probedChat };
}

async function check() {
  const page = await newPage(browser, 'page');
  await load(page);

  // Record every length the answer had, in the page. Watching from here, or
  // even once per mutation callback, can miss a fast stream's steps: a small
  // model's whole answer may come in one network read, which the page still
  // adds chunk by chunk. Each mutation record gives the text before it
  // (characterDataOldValue, or the text nodes a replacement removed).
  await page.evaluate(() => {
    const seen = (window.__answerLengths = []);
    const note = (n) => { if (n > 0 && n !== seen[seen.length - 1]) seen.push(n); };
    const lastAnswer = () => [...document.querySelectorAll('#messages .msg.assistant .content')].at(-1);
    new MutationObserver((records) => {
      const answer = lastAnswer();
      if (!answer) return;
      for (const r of records) {
        if (!answer.contains(r.target)) continue;
        if (r.type === 'characterData') note(r.oldValue?.length ?? 0);
        else note([...r.removedNodes].reduce((n, node) => n + node.textContent.length, 0));
      }
      note(answer.textContent.length);
    }).observe(document.getElementById('messages'),
      { childList: true, subtree: true, characterData: true, characterDataOldValue: true });
  });
  const answer = await ask(page, 'Hello');
  const lengths = await page.evaluate(() => window.__answerLengths);
  if (lengths.length < 2) fail(`the answer did not stream (its lengths were ${JSON.stringify(lengths)})`);
  if (answer.tokens) fail('the answer is shown as tokens with the probabilities setting off');
  console.log(`answer (${lengths.length} steps; ${answer.note}): ${JSON.stringify(answer.text.slice(0, 200))}`);
  await page.screenshot({ path: path.join(outDir, 'page-desktop.png') });

  // The chat survives a reload, and is listed.
  const helloChat = [['user', 'Hello'], ['assistant', answer.text]];
  expectSame((await shownChat(page)).messages, helloChat, 'the chat');
  await load(page, 'reload');
  let shown = await shownChat(page);
  expectSame(shown.messages, helloChat, 'after a reload the chat');
  expectSame(shown.list, [{ title: 'Hello', open: true }], 'after a reload the past chats');
  const helloNote = await page.$eval('#messages .msg.assistant .note', (e) => e.textContent).catch(() => '');
  expectSame(helloNote, answer.note, "after a reload the answer's note");

  const { probed, probedChat } = await checkNewChatWithProbabilities(page);

  // Both chats listed, newest first; switching shows each one's messages.
  shown = await shownChat(page);
  expectSame(shown.list, [{ title: 'Who made the heaven?', open: true }, { title: 'Hello', open: false }],
    'with two chats the list');
  await page.click('#chat-list li:nth-child(2) .chat-open');
  shown = await shownChat(page);
  expectSame([shown.messages, shown.tokens], [helloChat, 0], 'opening "Hello" again: its messages and tokens');
  await page.click('#chat-list li:nth-child(1) .chat-open');
  await load(page, 'reload');
  shown = await shownChat(page);
  expectSame(shown.messages, probedChat, 'after a reload the second chat');
  expectSame(shown.tokens, probed.tokens, "after a reload the answer's token count");
  await tokenTip(page, 1, 'hover');
  if (!(await page.$eval('#show-probs', (e) => e.checked))) fail('the probabilities setting was not kept');

  // Deleting a chat: gone from the list, and from storage.
  await page.click('#chat-list li:nth-child(2) .chat-delete');
  const titles = async () => (await shownChat(page)).list.map((c) => c.title);
  expectSame(await titles(), ['Who made the heaven?'], 'after deleting "Hello" the list');
  await load(page, 'reload');
  expectSame(await titles(), ['Who made the heaven?'], 'after deleting "Hello" and a reload the list');

  await checkClusterView(page);

  // Width and height only: changing isMobile would reload the page.
  await page.setViewport({ width: 390, height: 844 });
  await page.click('#tab-chat');
  await page.screenshot({ path: path.join(outDir, 'page-phone.png') });
  await page.click('#chats summary');
  await page.waitForSelector('#chat-list li .chat-open', { visible: true, timeout: 2_000 })
    .catch(() => fail('on a phone, opening "Chats" shows no past chat'));
  await page.screenshot({ path: path.join(outDir, 'page-phone-chats.png') });
  await page.click('#tab-cluster');
  await page.screenshot({ path: path.join(outDir, 'page-phone-cluster.png') });
  await page.close();
}

// With storage that refuses every write, the page still answers, and says the chat is not kept.
async function checkStorageFailing() {
  const context = await browser.createBrowserContext();
  const page = await newPage(context, 'storage failing');
  await page.evaluateOnNewDocument(() => {
    Storage.prototype.setItem = () => { throw new DOMException('the quota is exceeded', 'QuotaExceededError'); };
  });
  await load(page);
  await ask(page, 'Hello');
  const note = await page.$eval('#storage-note', (e) => (e.hidden ? '' : e.textContent));
  if (!/not kept/.test(note)) fail(`with storage failing, the page's note is ${JSON.stringify(note)}`);
  await context.close();
}

try {
  await check();
  await checkStorageFailing();
} catch (e) {
  problems.unshift(e instanceof Failure ? e.message : `test error: ${e.stack || e.message}`);
} finally {
  await browser.close();
}
if (problems.length) exitFailed(problems);
console.log(`page test passed; screenshots in ${outDir}`);
