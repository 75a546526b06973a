// Drives the operator console in Debian's headless Chromium through playwright-core (no browser download).
//
//   node console.mjs live BASE_URL SCREENSHOT_DIR        sign in, watch a deploy reach AUTH_REQUIRED, approve it with a
//                                                       click and see it complete; open its page; cancel a running task
//   node console.mjs reconcile BASE_URL SCREENSHOT_DIR TASK   reconcile a task left in needs_reconciliation
//   node console.mjs list BASE_URL SCREENSHOT_DIR '{"canceled": ..., "waiting": ..., "total": N}'
//                                                       page through the task list, filter it by state and agent,
//                                                       search a context id, read a canceled task's terminal reason,
//                                                       and reach a row's actions in a narrow window
//   node console.mjs xss BASE_URL SCREENSHOT_DIR '{"token": ..., "tasks": [...], "payload": ...}'
//                                                       open each task's page, click every javascript: part it shows, and
//                                                       report what ran (title, dialogs, javascript: links), then
//                                                       check that the page's CSP stops a javascript: link outright
//   node console.mjs dead-letters BASE_URL SCREENSHOT_DIR '{"listed": ..., "stale": ..., "onPage": ...}'
//                                                       list the dead letters, deliver one again from the list, click
//                                                       one another operator delivered meanwhile (an error shown), and
//                                                       deliver one again from its task's page
//   node console.mjs overview BASE_URL SCREENSHOT_DIR '{"approval": ..., "failed": ..., ...}'
//                                                       read the overview and its attention queue, open each planted
//                                                       task's timeline, take the screenshots at 1280, 800 and 420 px,
//                                                       approve from the queue with the keyboard alone, and leave a
//                                                       cancel unconfirmed with Escape
//   node console.mjs first-paint BASE_URL SCREENSHOT_DIR '{"runs": N}'
//                                                       the overview's first paint (its counts drawn) after a load
//                                                       with the token already held, N times
//   node console.mjs bidi BASE_URL SCREENSHOT_DIR '{"token": ..., "task": ...}'
//                                                       open a task whose artifact's name and first link hold an unclosed
//                                                       U+202E, and report the order the characters after them show in
//
// Prints one JSON object a line (one per step) for tests/ops/test_console_browser.py; exits 1 after printing
// {"error": ...} when a step fails.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const [scenario, base, shots, taskArg] = process.argv.slice(2);
const OPERATOR_TOKEN = 'ops_demo_5b9e';
const DEPLOYER_TOKEN = 'dpl_test_7c1e4b';
const WAIT = 30000;
const ARGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync',
];

const report = (step, fields) => console.log(JSON.stringify({ step, ...fields }));

async function send(agent, text, messageId, token) {
  const headers = { 'Content-Type': 'application/json', 'A2A-Version': '1.0' };
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(`${base}/${agent}/a2a/jsonrpc`, {
    method: 'POST',
    headers,
    body: JSON.stringify({
      jsonrpc: '2.0', id: 1, method: 'SendMessage',
      params: { message: { messageId, role: 'ROLE_USER', parts: [{ text }] }, configuration: { returnImmediately: true } },
    }),
  });
  const body = await response.json();
  if (!body.result || !body.result.task) throw new Error(`SendMessage to ${agent}: ${JSON.stringify(body)}`);
  return body.result.task.id;
}

const row = (id) => `#tasks tr[data-task-id="${id}"]`;

async function shot(page, name) {
  await page.screenshot({ path: path.join(shots, name), fullPage: true });
}

async function signIn(page, toTasks = true) {
  await page.goto(`${base}/console/`);
  await page.waitForSelector('#sign-in:not([hidden])');
  const signOutBefore = await page.isVisible('#sign-out');
  const hint = await page.waitForSelector('#demo-hint:not([hidden])');
  const hintText = await hint.textContent();
  await page.fill('#token', 'not-the-token');
  await page.click('#sign-in-form button[type=submit]');
  const refused = await (await page.waitForSelector('#sign-in-error:not(:empty)')).textContent();
  await page.fill('#token', OPERATOR_TOKEN);
  await page.click('#sign-in-form button[type=submit]');
  await page.waitForSelector('#overview-view:not([hidden])');
  await page.waitForSelector('#feed.live');
  const stored = await page.evaluate(() => sessionStorage.getItem('a2a-bridge.operator-token'));
  const signOutAfter = await page.isVisible('#sign-out');
  report('sign-in', { hint: hintText, refused, stored, signOutBefore, signOutAfter });
  if (toTasks) await openTasks(page);
}

async function openTasks(page) {
  await page.click('#views a[data-view="tasks"]');
  await page.waitForSelector('#tasks-view:not([hidden])');
}

// Answers the confirmation dialog an action opened: gives `reason` and confirms, or (`yes` false) keeps things as
// they are; what the dialog said of the consequence.
async function confirm(page, reason = '', yes = true) {
  await page.waitForSelector('#confirm[open]', { timeout: WAIT });
  const said = await page.textContent('#confirm-consequence');
  if (reason) await page.fill('#confirm-reason', reason);
  await page.click(yes ? '#confirm-yes' : '#confirm-no');
  await page.waitForSelector('#confirm:not([open])', { state: 'attached', timeout: WAIT });
  return said;
}

// Records every A2A state a task's row shows, as the page changes it.
async function watchStates(page, id) {
  await page.evaluate((taskId) => {
    window.__seen = window.__seen || {};
    const seen = (window.__seen[taskId] = []);
    const note = () => {
      const tr = document.querySelector(`#tasks tr[data-task-id="${taskId}"]`);
      const state = tr && tr.dataset.state;
      if (state && seen[seen.length - 1] !== state) seen.push(state);
    };
    new MutationObserver(note).observe(document.querySelector('#tasks tbody'), { childList: true, subtree: true, attributes: true });
    note();
  }, id);
}

const seenStates = (page, id) => page.evaluate((taskId) => window.__seen[taskId], id);

async function live(page) {
  await signIn(page);
  await page.evaluate(() => { window.__sameDocument = true; });

  const deploy = await send('deployer', 'Deploy build 2026.10.06-7 to staging', `console-deploy-${Date.now()}`, DEPLOYER_TOKEN);
  await watchStates(page, deploy);
  await page.waitForSelector(`${row(deploy)}[data-state="AUTH_REQUIRED"] button[data-action="approve"]`, { timeout: WAIT });
  const waiting = await page.$eval(row(deploy), (tr) => ({
    phase: tr.querySelector('.phase').textContent,
    mustAct: tr.querySelector('.must-act') && tr.querySelector('.must-act').dataset.who,
    claim: tr.querySelector('.claim').dataset.claim,
    generation: tr.querySelector('.generation').textContent,
    actions: [...tr.querySelectorAll('[data-action]')].map((node) => node.dataset.action),
  }));
  await shot(page, '01-deploy-waiting-for-approval.png');
  await page.click(`${row(deploy)} button[data-action="approve"]`);
  const consequence = await confirm(page, 'change window 14:00-15:00');
  await page.waitForSelector(`${row(deploy)}[data-state="COMPLETED"]`, { timeout: WAIT });
  const done = await page.$eval(row(deploy), (tr) => ({
    phase: tr.querySelector('.phase').textContent,
    claim: tr.querySelector('.claim').dataset.claim,
    generation: tr.querySelector('.generation').textContent,
    actions: [...tr.querySelectorAll('[data-action]')].map((node) => node.dataset.action),
  }));
  const notice = await page.textContent('#notice');
  await shot(page, '02-deploy-completed.png');
  report('approve', {
    task: deploy, states: await seenStates(page, deploy), waiting, done, notice, consequence,
    sameDocument: await page.evaluate(() => window.__sameDocument === true),
  });

  await page.click(`${row(deploy)} td.task a`);
  await page.waitForSelector(`#task [data-task-id="${deploy}"] [data-artifact="deploy-report"]`, { timeout: WAIT });
  const page_ = await page.$eval('#task', (view) => ({
    state: view.firstElementChild.dataset.state,
    history: view.querySelectorAll('.history li').length,
    artifacts: [...view.querySelectorAll('[data-artifact]')].map((node) => node.dataset.artifact),
    report: view.querySelector('[data-artifact="deploy-report"] pre').textContent,
    operations: [...view.querySelectorAll('.events tr[data-operation]')].map((tr) => tr.dataset.operation),
    operator: [...view.querySelectorAll('.timeline .entry.kind-operator')].map((li) => li.textContent),
  }));
  await shot(page, '03-task-page.png');
  report('task-page', page_);

  await page.click('#task-view a.back');
  await page.waitForSelector('#tasks-view:not([hidden])');
  const suite = await send('test-runner', 'Run the full suite for payments-api at commit 9f3c2e1', `console-suite-${Date.now()}`);
  await watchStates(page, suite);
  await page.waitForSelector(`${row(suite)}[data-state="WORKING"] button[data-action="cancel"]`, { timeout: WAIT });
  await page.click(`${row(suite)} button[data-action="cancel"]`);
  await confirm(page, 'wrong commit');
  await page.waitForSelector(`${row(suite)}[data-state="CANCELED"]`, { timeout: WAIT });
  const canceled = await page.$eval(row(suite), (tr) => ({
    claim: tr.querySelector('.claim').dataset.claim,
    phase: tr.querySelector('.phase').textContent,
    ended: tr.querySelector('.phase').dataset.ended,
    terminalReason: tr.querySelector('.phase').dataset.terminalReason,
    message: tr.querySelector('.message').textContent,
    actions: [...tr.querySelectorAll('[data-action]')].map((node) => node.dataset.action),
  }));
  await shot(page, '04-task-canceled.png');
  report('cancel', {
    task: suite, states: await seenStates(page, suite), ...canceled,
    sameDocument: await page.evaluate(() => window.__sameDocument === true),
  });
}

async function reconcile(page, id) {
  await signIn(page);
  await page.waitForSelector(`${row(id)} .claim[data-claim="needs_reconciliation"]`, { timeout: WAIT });
  await page.click(`${row(id)} [data-action="reconcile"]`);
  const form = await page.waitForSelector('#task form.reconcile', { timeout: WAIT });
  const before = await page.$eval('#task', (view) => ({
    state: view.firstElementChild.dataset.state,
    claim: view.querySelector('.claim-state').textContent,
    message: view.querySelector('.status-message').textContent,
  }));
  await form.$eval('select[name=outcome]', (select) => { select.value = 'completed'; });
  const pairs = await form.$$('.pair');
  await (await pairs[0].$('[name=value]')).fill('staging serves build 2026.10.06-0');
  await (await pairs[1].$('[name=value]')).fill('console test');
  await (await form.$('.add-pair')).click();
  const added = (await form.$$('.pair'))[2];
  await (await added.$('[name=key]')).fill('health');
  await (await added.$('[name=value]')).fill('3 of 3 passing');
  await shot(page, '05-reconcile-form.png');
  await (await form.$('button[type=submit]')).click();
  await confirm(page);
  await page.waitForSelector(`#task [data-task-id="${id}"][data-state="COMPLETED"] .events tr[data-operation="reconcile_completed"]`, { timeout: WAIT });
  const after = await page.$eval('#task', (view) => ({
    state: view.firstElementChild.dataset.state,
    claim: view.querySelector('.claim-state').textContent,
    message: view.querySelector('.status-message').textContent,
    evidence: JSON.parse(view.querySelector('.events tr[data-operation="reconcile_completed"] code.evidence-json').textContent),
    reconcileForm: Boolean(view.querySelector('form.reconcile')),
  }));
  await shot(page, '06-reconciled.png');
  report('reconcile', { task: id, before, after });
}

const rowIds = (page) => page.$$eval('#tasks tbody tr', (rows) => rows.map((tr) => tr.dataset.taskId));

// Waits until the list shows `count` rows, each with `text` in its cell `cell` when given.
async function listShows(page, count, cell = null, text = null) {
  await page.waitForFunction(([n, column, wanted]) => {
    const rows = [...document.querySelectorAll('#tasks tbody tr')];
    return rows.length === n && (!column || rows.every((tr) => tr.querySelector(`td.${column}`).textContent === wanted));
  }, [count, cell, text], { timeout: WAIT });
}

async function list(page, { canceled, waiting, context, total }) {
  await signIn(page);
  await listShows(page, 50);
  const first = await rowIds(page);
  const pager = async () => ({
    label: await page.textContent('#page-label'),
    newer: await page.isEnabled('#page-newer'),
    older: await page.isEnabled('#page-older'),
  });
  const firstPager = await pager();
  await page.click('#page-older');
  await listShows(page, total - 50);
  const second = await rowIds(page);
  const secondPager = await pager();
  await shot(page, '07-second-page.png');
  await page.click('#page-newer');
  await listShows(page, 50);
  const back = await rowIds(page);

  await page.selectOption('#filter-state', 'CANCELED');
  await listShows(page, 1, 'state', 'CANCELED');
  const phase = await page.$eval(`${row(canceled)} .phase`, (td) => ({
    text: td.textContent, ended: td.dataset.ended, terminalReason: td.dataset.terminalReason,
    reason: td.querySelector('.reason') && td.querySelector('.reason').textContent,
  }));
  await page.selectOption('#filter-state', '');
  await page.selectOption('#filter-agent', 'deployer');
  await listShows(page, 2, 'agent', 'deployer');
  const deployerRows = await rowIds(page);
  await page.selectOption('#filter-agent', '');
  await page.fill('#filter-q', context);
  await page.click('#filters button[type=submit]');
  await listShows(page, 1);
  const found = await rowIds(page);
  await shot(page, '08-search.png');
  await page.click('#filter-clear');
  await listShows(page, 50);

  const reach = async (width) => {
    await page.setViewportSize({ width, height: 800 });
    const button = page.locator(`${row(waiting)} button[data-action="cancel"]`);
    await button.scrollIntoViewIfNeeded();
    const box = await button.boundingBox();
    const onTop = await button.evaluate((node) => {
      const rect = node.getBoundingClientRect();
      return document.elementFromPoint(rect.left + rect.width / 2, rect.top + rect.height / 2) === node;
    });
    await shot(page, `09-narrow-${width}.png`);
    const cut = await page.$$eval('#tasks th, #tasks td', (cells) => cells
      .filter((cell) => cell.offsetParent !== null && cell.scrollWidth > cell.clientWidth + 1 && !cell.querySelector('.message'))
      .map((cell) => cell.textContent));
    const table = await page.$eval('#tasks', (node) => ({ width: node.scrollWidth, shown: node.parentElement.clientWidth }));
    return {
      right: box.x + box.width, left: box.x, onTop, cut, table,
      pageWidth: await page.evaluate(() => document.documentElement.scrollWidth),
    };
  };
  const narrow = { 1280: await reach(1280), 1000: await reach(1000), 800: await reach(800), 420: await reach(420) };
  const icon = await page.evaluate(async () => {
    const link = document.querySelector('link[rel="icon"]');
    const response = await fetch(link.href);
    return { href: link.getAttribute('href'), status: response.status, type: response.headers.get('content-type') };
  });
  report('list', {
    first, second, back, firstPager, secondPager, phase, deployerRows, found, narrow, icon,
  });
}

const deadRow = (id) => `#dead-letters tr[data-task-id="${id}"]`;

async function deadLetters(page, { listed, stale, onPage }) {
  await signIn(page);
  await page.click('#views a[data-view="dead-letters"]');
  await page.waitForSelector(`${deadRow(listed)} button[data-action="redeliver"]`, { timeout: WAIT });
  const rows = await page.$$eval('#dead-letters tbody tr', (trs) => trs.map((tr) => ({
    task: tr.dataset.taskId,
    link: tr.querySelector('td.task a').getAttribute('href'),
    agent: tr.querySelector('td.agent').textContent,
    config: tr.querySelector('td.config').textContent,
    revision: tr.querySelector('td.revision').textContent,
    attempts: tr.querySelector('td.attempts').textContent,
    lastError: tr.querySelector('td.last-error').textContent,
    failingSince: tr.querySelector('td.failing-since').textContent,
    buttons: [...tr.querySelectorAll('button')].map((button) => button.textContent),
  })));
  const planted = await page.$$eval('#dead-letters img, #dead-letters script', (nodes) => nodes.length);
  const current = await page.$eval('#views a[aria-current="page"]', (link) => link.dataset.view);
  await shot(page, '10-dead-letters.png');

  // Another operator delivers one again first: its row's button then fails, and says why.
  const other = await fetch(`${base}/test-runner/tasks/${stale}/webhooks/redeliver`, {
    method: 'POST', headers: { Authorization: `Bearer ${OPERATOR_TOKEN}` },
  });
  if (other.status !== 200) throw new Error(`redeliver ${stale}: HTTP ${other.status}`);
  await page.click(`${deadRow(stale)} button[data-action="redeliver"]`);
  await confirm(page);
  const refused = await (await page.waitForSelector('#dead-notice.error:not(:empty)', { timeout: WAIT })).textContent();
  await page.waitForSelector(deadRow(stale), { state: 'detached', timeout: WAIT });

  await page.click(`${deadRow(listed)} button[data-action="redeliver"]`);
  await confirm(page);
  await page.waitForSelector('#dead-notice:not(.error):not(:empty)', { timeout: WAIT });
  const delivering = await page.textContent('#dead-notice');
  await page.waitForSelector(deadRow(listed), { state: 'detached', timeout: WAIT });
  await shot(page, '11-dead-letter-delivered-again.png');
  report('dead-letters', {
    rows, planted, current, refused, delivering, title: await page.title(),
    left: await page.$$eval('#dead-letters tbody tr', (trs) => trs.map((tr) => tr.dataset.taskId)),
  });

  await page.click(`${deadRow(onPage)} td.task a`);
  const dead = `#task [data-task-id="${onPage}"] .deliveries tr[data-dead="true"]`;
  await page.waitForSelector(`${dead} button[data-action="redeliver"]`, { timeout: WAIT });
  const before = await page.$eval(dead, (tr) => ({
    config: tr.dataset.configId,
    cells: [...tr.querySelectorAll('td')].map((td) => td.textContent),
  }));
  await shot(page, '12-task-dead-letter.png');
  await page.click(`${dead} button[data-action="redeliver"]`);
  await confirm(page);
  await page.waitForSelector('#task-notice:not(.error):not(:empty)', { timeout: WAIT });
  await page.waitForSelector(dead, { state: 'detached', timeout: WAIT });
  report('task-dead-letter', { task: onPage, before, notice: await page.textContent('#task-notice') });
}

// The page as served, before any task is opened: its title, and the CSP violations it reports from now on.
async function watchForScripts(page) {
  await page.addInitScript(() => {
    window.__violations = [];
    document.addEventListener('securitypolicyviolation', (event) => window.__violations.push(event.effectiveDirective));
  });
}

async function xss(page, { token, tasks, payload }) {
  const dialogs = [];
  page.on('dialog', (dialog) => {
    dialogs.push(dialog.message());
    dialog.dismiss().catch(() => {});
  });
  await watchForScripts(page);
  await page.goto(`${base}/console/`);
  await page.waitForSelector('#sign-in:not([hidden])');
  await page.fill('#token', token);
  await page.click('#sign-in-form button[type=submit]');
  await page.waitForSelector('#overview-view:not([hidden])');
  await page.waitForSelector('#feed.live');
  const title = await page.title();
  for (const id of tasks) {
    await page.evaluate((taskId) => { location.hash = `#/tasks/${taskId}`; }, id);
    await page.waitForSelector(`#task [data-task-id="${id}"] .part`, { timeout: WAIT });
    const parts = await page.$$eval('#task .part', (nodes) => nodes.map((node) => ({
      tag: node.tagName.toLowerCase(), href: node.getAttribute('href'), rel: node.getAttribute('rel'), text: node.textContent,
    })));
    // Locators, not element handles: the change feed may draw the page again while the test clicks.
    const planted = page.locator('#task .part', { hasText: /^javascript:/i });
    for (let i = 0; i < await planted.count(); i += 1) await planted.nth(i).click();
    await shot(page, `xss-${id.slice(0, 8)}.png`);
    report(`task:${id}`, {
      task: id, parts, title: await page.title(), violations: await page.evaluate(() => [...window.__violations]),
      javascriptLinks: await page.$$eval('a[href]', (links) => links.filter((a) => /^\s*javascript:/i.test(a.getAttribute('href'))).length),
      token: await page.evaluate(() => sessionStorage.getItem('a2a-bridge.operator-token')),
    });
  }
  // A javascript: link that got onto the page all the same: the CSP (no 'unsafe-inline') refuses to run it.
  const before = await page.evaluate(() => window.__violations.length);
  await page.evaluate((url) => {
    const link = document.createElement('a');
    link.href = url;
    document.body.append(link);
    link.click();
    link.remove();
  }, payload);
  await page.waitForFunction((count) => window.__violations.length > count, before, { timeout: WAIT });
  report('csp', {
    title, titleAfter: await page.title(), dialogs,
    violations: await page.evaluate(() => window.__violations),
  });
}

// Whether each character of a node's text shows right of the one before it (left-to-right, as written).
async function shownInOrder(locator) {
  return locator.evaluate((node) => {
    const text = node.firstChild;
    const lefts = [];
    for (let i = 0; i < text.length; i += 1) {
      const range = document.createRange();
      range.setStart(text, i);
      range.setEnd(text, i + 1);
      lefts.push(range.getBoundingClientRect().left);
    }
    return lefts.every((left, i) => i === 0 || left > lefts[i - 1]);
  });
}

async function bidi(page, { token, task }) {
  await page.goto(`${base}/console/`);
  await page.waitForSelector('#sign-in:not([hidden])');
  await page.fill('#token', token);
  await page.click('#sign-in-form button[type=submit]');
  await page.waitForSelector('#overview-view:not([hidden])');
  await page.evaluate((taskId) => { location.hash = `#/tasks/${taskId}`; }, task);
  await page.waitForSelector(`#task [data-task-id="${task}"] .artifact .part`, { timeout: WAIT });
  const parts = page.locator('#task .artifact .part');
  const followers = [];
  for (let i = 1; i < await parts.count(); i += 1) followers.push(await shownInOrder(parts.nth(i)));
  const heading = page.locator('#task .artifact h3').first();
  const isolated = await page.evaluate(() => [...document.querySelectorAll('#task .artifact h3, #task .artifact .part')]
    .map((node) => getComputedStyle(node).unicodeBidi));
  await shot(page, 'bidi.png');
  report('bidi', { followers, name: await heading.textContent(), isolated });
}

const attention = (page) => page.$$eval('#attention-items li', (items) => items.map((li) => ({
  kind: li.dataset.kind,
  task: li.dataset.taskId,
  why: li.querySelector('.why').textContent,
  what: li.querySelector('.what').textContent,
  actions: [...li.querySelectorAll('[data-action]')].map((node) => node.dataset.action),
})));

// What a width shows: whether the page is wider than the window, and the headers or labels cut short.
async function layoutAt(page, width, view) {
  await page.setViewportSize({ width, height: 900 });
  await page.waitForTimeout(100);
  return page.evaluate((name) => {
    const cut = [...document.querySelectorAll(`${name} th, ${name} h2, ${name} .kind-label`)]
      .filter((node) => node.offsetParent !== null && node.scrollWidth > node.clientWidth + 1)
      .map((node) => node.textContent);
    return { scrollWidth: document.documentElement.scrollWidth, cut };
  }, view);
}

async function overview(page, planted) {
  await signIn(page, false);
  const kinds = ['approval', 'needs_reconciliation', 'uncertain', 'past_lease', 'dead_letter', 'failed'];
  for (const kind of kinds) {
    await page.waitForSelector(`#attention-items li[data-kind="${kind}"][data-task-id="${planted[kind]}"]`, { timeout: WAIT });
  }
  await page.waitForSelector('#chart-throughput svg rect', { timeout: WAIT });
  const items = await attention(page);
  const counts = await page.$$eval('#attention-counts li', (lis) => Object.fromEntries(lis.map((li) => [li.dataset.kind, Number(li.dataset.count)])));
  const agents = await page.$$eval('#agent-counts tbody tr', (trs) => Object.fromEntries(trs.map((tr) => [tr.dataset.agent, {
    total: Number(tr.querySelector('.total').textContent),
    states: Object.fromEntries([...tr.querySelectorAll('.states .chip')].map((chip) => [chip.dataset.name, Number(chip.textContent.split(' ').pop())])),
    claims: Object.fromEntries([...tr.querySelectorAll('.claims .chip')].map((chip) => [chip.dataset.name, Number(chip.textContent.split(' ').pop())])),
  }])));
  const charts = await page.$$eval('.chart', (figures) => Object.fromEntries(figures.map((f) => [f.id, { peak: Number(f.dataset.peak), bars: f.querySelectorAll('rect').length }])));
  const sessions = await page.$$eval('#sessions tbody tr', (trs) => trs.map((tr) => ({ session: tr.dataset.session, status: tr.dataset.status })));
  const store = await page.$eval('#store-health [data-ok]', (dd) => ({ ok: dd.dataset.ok, text: dd.textContent }));
  const layout = {};
  for (const width of [1280, 800, 420]) {
    layout[width] = await layoutAt(page, width, '#overview-view');
    await shot(page, `console-${width}.png`);
  }
  await page.setViewportSize({ width: 1280, height: 900 });
  report('overview', { items, counts, agents, charts, sessions, store, layout });

  const timelines = {};
  for (const kind of kinds) {
    await page.evaluate((id) => { location.hash = `#/tasks/${id}`; }, planted[kind]);
    await page.waitForSelector(`#task [data-task-id="${planted[kind]}"] .timeline .entry`, { timeout: WAIT });
    timelines[kind] = await page.$eval('#task', (view) => ({
      waiting: view.querySelector('.waiting').dataset.who,
      waitingText: view.querySelector('.waiting').textContent,
      entries: [...view.querySelectorAll('.timeline .entry')].map((li) => ({ kind: li.dataset.kind, title: li.dataset.title, text: li.textContent })),
      failure: view.querySelector('.failure') && view.querySelector('.failure').textContent,
      explains: view.querySelector('.explain') && view.querySelector('.explain').dataset.explains,
    }));
    if (kind === 'failed') {
      for (const width of [1280, 420]) {
        await page.setViewportSize({ width, height: 900 });
        await shot(page, `console-task-${width}.png`);
      }
      await page.setViewportSize({ width: 1280, height: 900 });
    }
  }
  report('timelines', timelines);

  // The keyboard alone: Tab to the approval's button, Enter opens the dialog on its reason, Tab to the confirm
  // button, Enter approves.
  await page.evaluate(() => { location.hash = '#/'; });
  const approveButton = `#attention-items li[data-kind="approval"][data-task-id="${planted.approval}"] button[data-action="approve"]`;
  await page.waitForSelector(approveButton, { timeout: WAIT });
  await page.evaluate(() => document.activeElement && document.activeElement.blur());
  let tabs = 0;
  while (tabs < 80 && !(await page.$eval(approveButton, (node) => node === document.activeElement))) {
    await page.keyboard.press('Tab');
    tabs += 1;
  }
  await page.keyboard.press('Enter');
  await page.waitForSelector('#confirm[open]', { timeout: WAIT });
  const focused = await page.evaluate(() => document.activeElement.id);
  const said = await page.textContent('#confirm-consequence');
  await page.keyboard.type('release train 42');
  await page.keyboard.press('Tab');
  await page.keyboard.press('Tab');
  const onConfirm = await page.evaluate(() => document.activeElement.id);
  await shot(page, 'console-confirm.png');
  await page.keyboard.press('Enter');
  await page.waitForSelector(`#attention-items li[data-kind="approval"][data-task-id="${planted.approval}"]`, { state: 'detached', timeout: WAIT });
  report('keyboard', { tabs, focused, said, onConfirm });

  // Escape leaves a cancel unconfirmed: nothing is sent, the item stays.
  const cancelButton = `#attention-items li[data-kind="past_lease"] button[data-action="cancel"]`;
  await page.click(cancelButton);
  await page.waitForSelector('#confirm[open]', { timeout: WAIT });
  const cancelSaid = await page.textContent('#confirm-consequence');
  await page.keyboard.press('Escape');
  await page.waitForSelector('#confirm:not([open])', { state: 'attached', timeout: WAIT });
  const stays = await page.$eval(cancelButton, (node) => !node.disabled);
  report('escape', { cancelSaid, stays, task: await page.$eval('#attention-items li[data-kind="past_lease"]', (li) => li.dataset.taskId) });

  // Still live: a turn that fails now shows in the open overview's queue, with no reload.
  await page.evaluate(() => { window.__sameDocument = true; });
  const failing = await send('raising', 'raise now', `overview-live-${Date.now()}`);
  await page.waitForSelector(`#attention-items li[data-kind="failed"][data-task-id="${failing}"]`, { timeout: WAIT });
  report('live', { task: failing, sameDocument: await page.evaluate(() => window.__sameDocument === true) });
}

async function firstPaint(page, { runs }) {
  await page.addInitScript((token) => {
    sessionStorage.setItem('a2a-bridge.operator-token', token);
    window.__painted = null;
    new MutationObserver((_, observer) => {
      const counts = document.querySelector('#attention-counts li');
      if (counts && window.__painted === null) {
        window.__painted = performance.now();
        observer.disconnect();
      }
    }).observe(document, { childList: true, subtree: true });
  }, OPERATOR_TOKEN);
  const times = [];
  for (let i = 0; i < runs; i += 1) {
    await page.goto(`${base}/console/?run=${i}#/`);
    await page.waitForFunction(() => window.__painted !== null, null, { timeout: WAIT });
    times.push(await page.evaluate(() => window.__painted));
  }
  const total = await page.$eval('#agent-counts tbody', (body) => [...body.querySelectorAll('.total')].reduce((n, td) => n + Number(td.textContent), 0));
  await shot(page, 'first-paint.png');
  report('first-paint', { times, total });
}

const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'a2a-console-chromium-'));
fs.mkdirSync(shots, { recursive: true });
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ARGS,
  viewport: { width: 1360, height: 860 },
});
let failed = false;
try {
  const page = await context.newPage();
  page.on('pageerror', (error) => report('page-error', { message: String(error) }));
  if (scenario === 'live') await live(page);
  else if (scenario === 'reconcile') await reconcile(page, taskArg);
  else if (scenario === 'list') await list(page, JSON.parse(taskArg));
  else if (scenario === 'xss') await xss(page, JSON.parse(taskArg));
  else if (scenario === 'dead-letters') await deadLetters(page, JSON.parse(taskArg));
  else if (scenario === 'bidi') await bidi(page, JSON.parse(taskArg));
  else if (scenario === 'overview') await overview(page, JSON.parse(taskArg));
  else if (scenario === 'first-paint') await firstPaint(page, JSON.parse(taskArg));
  else throw new Error(`unknown scenario ${scenario}`);
} catch (error) {
  failed = true;
  console.log(JSON.stringify({ error: String(error && error.stack ? error.stack : error) }));
  try {
    const [open] = context.pages();
    if (open) await open.screenshot({ path: path.join(shots, `failed-${scenario}.png`), fullPage: true });
  } catch {
    // the failure is already reported
  }
} finally {
  await context.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
