// The web page of `tensorpc serve`, driven in headless Chromium:
//
//   node tests/serve/page_test.mjs BASE_URL OUT_DIR [ENDPOINT,ENDPOINT,...]
//
// Fails (exit 1, with the reason) when the page does not load, when anything
// is logged as a console error or thrown on the page, when "Hello" does not
// get an answer that streams in (its text seen growing in two steps or more)
// and finishes within 60 s, or when the cluster view lacks one of the given
// server endpoints. Saves screenshots of both views at desktop and phone
// sizes in OUT_DIR: page-desktop.png, page-desktop-cluster.png,
// page-phone.png, page-phone-cluster.png.
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

const [baseUrl, outDir, endpointList = ''] = process.argv.slice(2);
if (!baseUrl || !outDir) exitFailed(['usage: node page_test.mjs BASE_URL OUT_DIR [ENDPOINT,ENDPOINT,...]']);
const endpoints = endpointList.split(',').map((s) => s.trim()).filter(Boolean);
fs.mkdirSync(outDir, { recursive: true });

const puppeteer = loadPuppeteer();
const browser = await puppeteer.launch({
  executablePath: process.env.TENSORPC_CHROMIUM || '/usr/bin/chromium',
  headless: 'new',
  args: ['--no-sandbox'],
}).catch((e) => exitFailed([`Chromium did not start: ${e.message}`]));
const problems = [];  // console errors and page errors, all reported at the end

async function check() {
  const page = await browser.newPage();
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console error: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  await page.setViewport({ width: 1280, height: 800 });

  const res = await page.goto(baseUrl, { waitUntil: 'load', timeout: 30_000 }).catch((e) => fail(`${baseUrl}: ${e.message}`));
  if (!res || !res.ok()) fail(`${baseUrl} answered ${res ? res.status() : 'nothing'}`);
  await page.waitForSelector('#prompt', { timeout: 10_000 }).catch(() => fail('no #prompt on the page'));

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
  await page.type('#prompt', 'Hello');
  await page.keyboard.press('Enter');  // Enter sends

  await page.waitForFunction(
    () => document.querySelector('#messages .msg.assistant') && document.getElementById('messages').dataset.state === 'idle',
    { timeout: ANSWER_TIMEOUT_MS, polling: 100 },
  ).catch(() => fail(`no finished answer within ${ANSWER_TIMEOUT_MS / 1000} s`));
  const answer = await page.evaluate(() => {
    const msg = [...document.querySelectorAll('#messages .msg.assistant')].at(-1);
    return {
      text: msg.querySelector('.content').textContent,
      error: msg.classList.contains('error') ? msg.textContent : null,
      note: msg.querySelector('.note')?.textContent ?? '',
      lengths: window.__answerLengths,
    };
  });
  if (answer.error) fail(`the answer is an error: ${answer.error}`);
  if (!answer.text.trim()) fail('the answer is empty');
  if (answer.lengths.length < 2) fail(`the answer did not stream (its lengths were ${JSON.stringify(answer.lengths)})`);
  console.log(`answer (${answer.lengths.length} steps; ${answer.note}): ${JSON.stringify(answer.text.slice(0, 200))}`);

  await page.screenshot({ path: path.join(outDir, 'page-desktop.png') });
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
  console.log(`cluster: ${await page.$$eval('#cluster [data-endpoint]', (els) => els.map((e) => e.dataset.endpoint).join(', '))}`);
  await page.screenshot({ path: path.join(outDir, 'page-desktop-cluster.png') });

  // Width and height only: changing isMobile would reload the page, and lose the chat.
  await page.setViewport({ width: 390, height: 844 });
  await page.click('#tab-chat');
  await page.screenshot({ path: path.join(outDir, 'page-phone.png') });
  await page.click('#tab-cluster');
  await page.screenshot({ path: path.join(outDir, 'page-phone-cluster.png') });
  await page.close();
}

try {
  await check();
} catch (e) {
  problems.unshift(e instanceof Failure ? e.message : `test error: ${e.stack || e.message}`);
} finally {
  await browser.close();
}
if (problems.length) exitFailed(problems);
console.log(`page test passed; screenshots in ${outDir}`);
