// The operator console: signs in with the operator's token (kept in sessionStorage), follows the server's change feed
// (/console/api/stream, Server-Sent Events read through fetch so that the token goes in a header), and calls the
// agents' own endpoints for approve, reconcile, cancel and a dead letter's redelivery. The list is one page of the
// feed, filtered by agent and state; a search (task id or context id) asks /console/api/tasks for its page instead,
// and the feed then only refreshes the rows that page shows. Pages go on with the server's `next` cursor. The dead
// letters (/console/api/webhooks/dead) are read when their view opens, on Refresh and after each redelivery. The
// overview (/console/api/overview, drawn by overview.js) is the page shown on signing in, read again as the feed
// reports changes; a task's page shows its timeline (timeline.js). Every action asks for confirmation first (confirm.js),
// naming its consequence and taking an optional reason, which the server keeps in the claim's evidence.
'use strict';

(() => {
  const TOKEN_KEY = 'a2a-bridge.operator-token';
  const PAGE_SIZE = 50;
  const state = {
    token: sessionStorage.getItem(TOKEN_KEY),
    rows: new Map(),
    feed: null,
    openTask: null,
    loading: null,
    reload: false,
    filters: { agent: '', state: '', q: '' },
    before: null,
    earlier: [],
    next: null,
    deadLoads: 0,
    overviewLoads: 0,
    overviewAt: 0,
    overviewTimer: null,
  };
  const OVERVIEW_EVERY = 10000;
  const OVERVIEW_AT_MOST = 1000;
  const $ = (selector, root = document) => root.querySelector(selector);

  function el(tag, props = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props)) {
      if (value === undefined || value === null || value === false) continue;
      if (key === 'class') node.className = value;
      else if (key === 'text') node.textContent = value;
      else if (key === 'on') for (const [name, handler] of Object.entries(value)) node.addEventListener(name, handler);
      else if (key.includes('-') || ['title', 'href', 'type', 'role', 'name', 'placeholder', 'rel', 'target', 'datetime'].includes(key)) node.setAttribute(key, value);
      else node[key] = value;
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const shortState = (name) => (name || '').replace(/^TASK_STATE_/, '');
  const shortId = (id) => (id.length > 13 ? `${id.slice(0, 8)}…` : id);
  const time = (stamp) => (stamp ? new Date(stamp).toISOString().slice(11, 19) : '');
  const moment = (stamp) => (stamp ? `${new Date(stamp).toISOString().replace('T', ' ').slice(0, 19)} UTC` : '—');
  function ago(stamp) {
    const seconds = Math.max(0, Math.round((Date.now() - new Date(stamp).getTime()) / 1000));
    if (seconds < 60) return `${seconds} s ago`;
    if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
    if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ${Math.floor((seconds % 3600) / 60)} min ago`;
    return `${Math.floor(seconds / 86400)} days ago`;
  }

  function badge(name) {
    const label = shortState(name);
    return el('span', { class: `badge state-${label.toLowerCase()}`, text: label });
  }

  function notificationLabel(notification) {
    return notification.kind + (notification.provider ? `: ${notification.provider}` : '');
  }

  // A terminal task shows how it ended, by its A2A state: the Task Status' terminal_reason groups several ends under
  // one word (CANCELED under "completed"), which would misread here; the task's page explains the three views.
  function phaseView(row) {
    if (!row.ended) return [row.status.phase, mustAct(row.waiting)];
    return [`${row.status.phase}: ${row.ended}`];
  }

  // Who must act for the task to go on, when it is not its agent at work: the operator, a user, the bridge.
  function mustAct(waiting) {
    if (!waiting || waiting.who.startsWith('agent ')) return null;
    return el('span', { class: 'must-act', 'data-who': waiting.who }, '→ ', el('bdi', { text: waiting.who }), ': ', el('bdi', { text: waiting.what }));
  }

  function listParams(extra = {}) {
    const params = new URLSearchParams({ limit: String(PAGE_SIZE) });
    if (state.filters.agent) params.set('agent', state.filters.agent);
    if (state.filters.state) params.set('state', state.filters.state);
    for (const [key, value] of Object.entries(extra)) if (value) params.set(key, value);
    return params;
  }

  function claimLabel(claim) {
    const pending = claim.cancellation_requested && claim.state !== 'cancelled';
    return claim.state.replace(/_/g, ' ') + (pending ? ' · cancel requested' : '');
  }

  // --- the server ---------------------------------------------------------------------------------------------

  class SignedOut extends Error {}

  async function call(path, options = {}) {
    const headers = { ...(options.headers || {}), Authorization: `Bearer ${state.token}` };
    const response = await fetch(path, { ...options, headers });
    if (response.status === 401 || response.status === 403) {
      signOut(response.status === 403 ? 'That token is not the operator’s.' : 'The server did not accept that token.');
      throw new SignedOut();
    }
    let body = null;
    try {
      body = await response.json();
    } catch {
      body = null;
    }
    if (!response.ok) throw new Error((body && body.error && body.error.message) || `HTTP ${response.status}`);
    return body;
  }

  function setFeed(mode) {
    const feed = $('#feed');
    feed.className = `feed ${mode}`;
    feed.textContent = { live: 'live', connecting: 'connecting…', reconnecting: 'reconnecting…', off: 'offline' }[mode];
  }

  // The server ends the feed every half minute; a feed that ended is opened again at once (its first frame is a full
  // snapshot), one that failed after a second.
  async function openFeed() {
    const controller = new AbortController();
    state.feed = controller;
    if (!$('#feed').classList.contains('live')) setFeed('connecting');
    let ended = false;
    try {
      const searching = Boolean(state.filters.q);
      const response = await fetch(`api/stream?${listParams(searching ? {} : { before: state.before })}`, {
        headers: { Authorization: `Bearer ${state.token}` },
        signal: controller.signal,
      });
      if (response.status === 401 || response.status === 403) {
        signOut('The server did not accept that token.');
        return;
      }
      if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
      setFeed('live');
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf('\n\n')) >= 0) {
          onFrame(buffer.slice(0, cut));
          buffer = buffer.slice(cut + 2);
        }
      }
      ended = true;
    } catch (error) {
      if (controller.signal.aborted) return;
    }
    if (state.feed !== controller) return;
    if (!ended) setFeed('reconnecting');
    setTimeout(() => {
      if (state.feed === controller) openFeed();
    }, ended ? 0 : 1000);
  }

  function onFrame(frame) {
    let event = 'message';
    let data = '';
    for (const line of frame.split('\n')) {
      if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) data += line.slice(5).trim();
    }
    if (event !== 'tasks' || !data) return;
    const body = JSON.parse(data);
    if (state.filters.q) {
      const shown = body.tasks.filter((row) => state.rows.has(row.id));
      for (const row of shown) state.rows.set(row.id, row);
      renderTasks(new Set(shown.map((row) => row.id)));
    } else {
      if (body.snapshot) state.rows.clear();
      for (const row of body.tasks) state.rows.set(row.id, row);
      const kept = new Set(body.ids);
      for (const id of [...state.rows.keys()]) if (!kept.has(id)) state.rows.delete(id);
      state.next = body.next;
      renderTasks(new Set(body.snapshot ? [] : body.tasks.map((row) => row.id)));
    }
    if (state.openTask && body.tasks.some((row) => row.id === state.openTask)) loadTask(state.openTask);
    if (!body.snapshot || body.tasks.length) overviewChanged();
  }

  // --- actions --------------------------------------------------------------------------------------------------

  function notice(text, error = false) {
    for (const box of [$('#notice'), $('#dead-notice'), $('#task-notice'), $('#overview-notice')]) {
      if (!box) continue;
      box.textContent = text;
      box.className = error ? 'notice error' : 'notice';
    }
  }

  async function act(action, row, body) {
    const paths = {
      approve: `/${row.agent}/approve/${row.id}`,
      cancel: `/${row.agent}/tasks/${row.id}/cancel`,
      reconcile: `/${row.agent}/tasks/${row.id}/reconcile`,
    };
    const options = { method: 'POST' };
    if (body) {
      options.body = JSON.stringify(body);
      options.headers = { 'Content-Type': 'application/json' };
    }
    try {
      const answer = await call(paths[action], options);
      const done = {
        approve: `Approved ${row.id.slice(0, 8)}; the deploy resumes.`,
        cancel: answer && shortState(answer.state) === 'CANCELED'
          ? `Canceled ${row.id.slice(0, 8)}.`
          : `Cancel recorded for ${row.id.slice(0, 8)}; reconcile it as cancelled once the work has stopped.`,
        reconcile: `Reconciled ${row.id.slice(0, 8)}: claim ${answer && answer.state}.`,
      }[action];
      notice(done);
      if (state.openTask === row.id) loadTask(row.id);
    } catch (error) {
      if (!(error instanceof SignedOut)) notice(`${action} failed: ${error.message}`, true);
    }
    if (!$('#overview-view').hidden) loadOverview();
  }

  // --- confirmation (confirm.js) -----------------------------------------------------------------------------

  const confirmAction = (options) => confirmParts.ask(options);

  // Approve or cancel, once confirmed; the button stays disabled while the server answers.
  async function confirmed(action, row, button) {
    button.disabled = true;
    const answer = await confirmAction(confirmParts[action](row));
    if (!answer) {
      button.disabled = false;
      return;
    }
    await act(action, row, answer.reason ? { reason: answer.reason } : undefined);
  }

  function actionButtons(row) {
    const buttons = [];
    if (row.actions.includes('approve')) {
      buttons.push(el('button', {
        type: 'button', class: 'primary', 'data-action': 'approve', text: 'Approve…',
        on: { click: (event) => confirmed('approve', row, event.currentTarget) },
      }));
    }
    if (row.actions.includes('reconcile')) {
      buttons.push(el('a', { class: 'button', href: `#/tasks/${row.id}`, 'data-action': 'reconcile', text: 'Reconcile…' }));
    }
    if (row.actions.includes('cancel')) {
      buttons.push(el('button', {
        type: 'button', class: 'danger', 'data-action': 'cancel', text: 'Cancel…',
        on: { click: (event) => confirmed('cancel', row, event.currentTarget) },
      }));
    }
    return buttons;
  }

  // The actions of an attention item: those of its task, or a dead letter's delivery again.
  function itemActions(item) {
    if (item.kind === 'dead_letter') return [redeliverButton({ ...item.webhook, agent: item.agent })];
    return actionButtons({ id: item.taskId, agent: item.agent, actions: item.actions });
  }

  // A dead letter (one task's push config the outbox gave up) delivered again from where it stopped; the views that
  // show it are read again, whether it worked or not (another operator may have delivered it already).
  async function redeliver(letter) {
    const path = `/${encodeURIComponent(letter.agent)}/tasks/${encodeURIComponent(letter.taskId)}/webhooks/redeliver`;
    try {
      await call(path, {
        method: 'POST',
        body: JSON.stringify({ configId: letter.configId }),
        headers: { 'Content-Type': 'application/json' },
      });
      notice(`Delivering webhook ${letter.configId} of ${letter.taskId.slice(0, 8)} again.`);
    } catch (error) {
      if (error instanceof SignedOut) return;
      notice(`Deliver again failed: ${error.message}`, true);
    }
    if (!$('#dead-view').hidden) loadDeadLetters();
    if (state.openTask === letter.taskId) loadTask(letter.taskId);
    if (!$('#overview-view').hidden) loadOverview();
  }

  function redeliverButton(letter) {
    return el('button', {
      type: 'button', class: 'primary', 'data-action': 'redeliver', text: 'Deliver again',
      on: {
        click: async (event) => {
          const button = event.currentTarget;
          button.disabled = true;
          const answer = await confirmAction(confirmParts.redeliver(letter));
          if (!answer) {
            button.disabled = false;
            return;
          }
          redeliver(letter);
        },
      },
    });
  }

  // --- the list ---------------------------------------------------------------------------------------------------

  function renderTasks(changed) {
    const rows = [...state.rows.values()].sort((a, b) => (a.created_at < b.created_at ? 1 : -1));
    const body = $('#tasks tbody');
    body.replaceChildren(...rows.map((row) => {
      const tr = el('tr', { 'data-task-id': row.id, 'data-state': shortState(row.state), class: changed.has(row.id) ? 'changed' : '' },
        el('td', { class: 'task', 'data-label': 'Task' },
          el('a', { href: `#/tasks/${row.id}`, title: row.id, class: 'mono', text: shortId(row.id) }),
          el('div', { class: 'message', title: row.message }, el('bdi', { text: row.message }))),
        el('td', { class: 'agent', 'data-label': 'Agent', text: row.agent }),
        el('td', { class: 'state', 'data-label': 'A2A state' }, badge(row.state)),
        el('td', { class: 'phase', 'data-label': 'Phase', 'data-ended': row.ended, 'data-terminal-reason': row.status.terminal_reason }, phaseView(row)),
        el('td', { class: 'notifications', 'data-label': 'Notifications' }, row.status.notifications.map((n) => el('span', { class: 'chip', text: notificationLabel(n) }))),
        el('td', { class: 'claim', 'data-label': 'Claim', 'data-claim': row.claim.state, text: claimLabel(row.claim) }),
        el('td', { class: 'generation num', 'data-label': 'Gen', text: String(row.claim.claim_generation) }),
        el('td', { class: 'lease mono', 'data-label': 'Lease until', text: time(row.claim.lease_until) || '—' }),
        el('td', { class: 'actions', 'data-label': 'Actions' }, actionButtons(row)));
      return tr;
    }));
    const filtered = state.filters.agent || state.filters.state || state.filters.q;
    $('#no-tasks').textContent = filtered ? 'No tasks match.' : 'No tasks yet.';
    $('#no-tasks').hidden = rows.length > 0;
    $('#page-newer').disabled = state.earlier.length === 0;
    $('#page-older').disabled = !state.next;
    $('#page-label').textContent = `Page ${state.earlier.length + 1}`;
    $('#list-hint').textContent = state.filters.q
      ? 'Search results, newest first; the rows shown refresh as they change.'
      : 'Newest first; rows change as the server reports them.';
  }

  // --- filters, search and pages ------------------------------------------------------------------------------

  async function search() {
    const query = state.filters.q;
    try {
      const body = await call(`api/tasks?${listParams({ q: query, before: state.before })}`);
      if (state.filters.q !== query) return;
      state.rows = new Map(body.tasks.map((row) => [row.id, row]));
      state.next = body.next;
      renderTasks(new Set());
    } catch (error) {
      if (!(error instanceof SignedOut)) notice(`Search failed: ${error.message}`, true);
    }
  }

  // The list again from its first row (or from `state.before`): the feed reopened with the filters, and the search.
  function reloadList() {
    state.rows.clear();
    state.next = null;
    renderTasks(new Set());
    if (state.feed) state.feed.abort();
    openFeed();
    if (state.filters.q) search();
  }

  function applyFilters(event) {
    if (event) event.preventDefault();
    state.filters = { agent: $('#filter-agent').value, state: $('#filter-state').value, q: $('#filter-q').value.trim() };
    state.before = null;
    state.earlier = [];
    reloadList();
  }

  function clearFilters() {
    $('#filters').reset();
    applyFilters();
  }

  function older() {
    if (!state.next) return;
    state.earlier.push(state.before);
    state.before = state.next;
    reloadList();
  }

  function newer() {
    if (!state.earlier.length) return;
    state.before = state.earlier.pop();
    reloadList();
  }

  // --- dead letters ---------------------------------------------------------------------------------------------

  async function loadDeadLetters() {
    const ticket = ++state.deadLoads;
    try {
      const body = await call('api/webhooks/dead');
      if (ticket === state.deadLoads) renderDeadLetters(body.deadLetters);
    } catch (error) {
      if (!(error instanceof SignedOut) && ticket === state.deadLoads) notice(`Could not load the dead letters: ${error.message}`, true);
    }
  }

  function renderDeadLetters(letters) {
    $('#dead-letters tbody').replaceChildren(...letters.map((letter) => el('tr', { 'data-task-id': letter.taskId, 'data-config-id': letter.configId },
      el('td', { class: 'task' }, el('a', { href: `#/tasks/${encodeURIComponent(letter.taskId)}`, title: letter.taskId, class: 'mono', text: shortId(letter.taskId) })),
      el('td', { class: 'agent', text: letter.agent }),
      el('td', { class: 'config' }, el('code', { text: letter.configId })),
      el('td', { class: 'revision num', text: String(letter.deliveredRevision) }),
      el('td', { class: 'attempts num', text: String(letter.attempts) }),
      el('td', { class: 'last-error', text: letter.lastError || '—' }),
      el('td', { class: 'failing-since mono', text: moment(letter.failingSince) }),
      el('td', { class: 'actions' }, redeliverButton(letter)))));
    $('#no-dead-letters').hidden = letters.length > 0;
  }

  // --- one task -------------------------------------------------------------------------------------------------

  // A URL someone else wrote (a message or an artifact) is a link only when it is http or https; anything else
  // (javascript:, data:, a relative path) is shown as text, never followed.
  function linkOrText(url) {
    let scheme = null;
    try {
      scheme = new URL(url).protocol;
    } catch {
      scheme = null;
    }
    if (scheme === 'http:' || scheme === 'https:') {
      return el('a', { class: 'part', href: url, text: url, rel: 'noopener noreferrer nofollow', target: '_blank' });
    }
    return el('code', { class: 'part url', text: url });
  }

  function partView(part) {
    if (part.text !== undefined) return el('pre', { class: 'part text', text: part.text });
    if (part.data !== undefined) return el('pre', { class: 'part data', text: JSON.stringify(part.data, null, 2) });
    if (part.url !== undefined) return linkOrText(part.url);
    if (part.raw !== undefined) return el('p', { class: 'part hint', text: `${part.mediaType || 'file'} (${Math.round(part.raw.length * 0.75)} bytes)` });
    return el('pre', { class: 'part', text: JSON.stringify(part) });
  }

  function section(title, count, ...content) {
    return el('section', { class: 'block' }, el('h2', {}, title, count !== null ? el('span', { class: 'count', text: ` ${count}` }) : null), ...content);
  }

  function facts(pairs) {
    return el('dl', { class: 'facts' }, pairs.flatMap(([term, value, cls]) => [
      el('dt', { text: term }),
      el('dd', { class: cls || '' }, value),
    ]));
  }

  function reconcileForm(row) {
    const form = $('#reconcile-template').content.firstElementChild.cloneNode(true);
    const pairs = $('.pairs', form);
    const addPair = (key = '', value = '') => {
      pairs.append(el('div', { class: 'pair' },
        el('input', { name: 'key', placeholder: 'key', value: key, 'aria-label': 'evidence key' }),
        el('input', { name: 'value', placeholder: 'value', value, 'aria-label': 'evidence value' })));
    };
    addPair('note', '');
    addPair('checked_by', '');
    $('.add-pair', form).addEventListener('click', () => addPair());
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      const evidence = {};
      for (const pair of form.querySelectorAll('.pair')) {
        const key = pair.querySelector('[name=key]').value.trim();
        const value = pair.querySelector('[name=value]').value.trim();
        if (key && value) evidence[key] = value;
      }
      if (!Object.keys(evidence).length) {
        notice('Reconcile needs at least one item of evidence.', true);
        return;
      }
      const outcome = form.outcome.value;
      const button = form.querySelector('[type=submit]');
      button.disabled = true;
      confirmAction(confirmParts.reconcile(row, outcome)).then((answer) => {
        if (!answer) {
          button.disabled = false;
          return;
        }
        act('reconcile', row, { outcome, evidence, ...(answer.reason ? { reason: answer.reason } : {}) });
      });
    });
    return form;
  }

  async function loadTask(id) {
    if (state.loading === id) {
      state.reload = true;
      return;
    }
    state.loading = id;
    try {
      const detail = await call(`api/tasks/${encodeURIComponent(id)}`);
      if (state.openTask === id) renderTask(detail);
    } catch (error) {
      if (!(error instanceof SignedOut) && state.openTask === id) {
        $('#task').replaceChildren(el('p', { class: 'error', text: `Could not load task ${id}: ${error.message}` }));
      }
    } finally {
      state.loading = null;
    }
    if (state.reload && state.openTask === id) {
      state.reload = false;
      loadTask(id);
    }
  }

  function deliveryState(delivery) {
    if (delivery.dead) return 'dead letter';
    return delivery.attempts ? 'retrying' : 'pending';
  }

  function deliveriesView(row, webhooks) {
    if (!webhooks.length) return el('p', { class: 'hint', text: 'Nothing left to deliver: no push config, or every one is up to date.' });
    const rows = webhooks.map((delivery) => el('tr', { 'data-config-id': delivery.configId, 'data-dead': String(delivery.dead) },
      el('td', {}, el('code', { text: delivery.configId })),
      el('td', { class: 'delivery-state', text: deliveryState(delivery) }),
      el('td', { class: 'num', text: String(delivery.deliveredRevision) }),
      el('td', { class: 'num', text: String(delivery.attempts) }),
      el('td', { class: 'mono', text: moment(delivery.nextAttempt) }),
      el('td', { class: 'mono', text: moment(delivery.failingSince) }),
      el('td', { class: 'last-error', text: delivery.lastError || '—' }),
      el('td', { class: 'actions' }, delivery.dead ? redeliverButton({ ...delivery, agent: row.agent }) : null)));
    return el('div', { class: 'scroll' }, el('table', { class: 'deliveries' },
      el('thead', {}, el('tr', {}, ['config', 'state', 'delivered up to', 'attempts', 'next attempt', 'failing since', 'last error', '']
        .map((h) => el('th', { text: h })))),
      el('tbody', {}, rows)));
  }

  function renderTask(detail) {
    const { row, task, claim, webhooks } = detail;
    state.rows.set(row.id, row);
    const container = $('#task');
    const kept = container.querySelector('form.reconcile');
    const said = container.querySelector(`[data-task-id="${CSS.escape(row.id)}"] #task-notice`);
    const history = task.history || [];
    const artifacts = task.artifacts || [];
    const chips = row.status.notifications.map((n) => el('span', { class: 'chip', text: notificationLabel(n) }));
    const statusCard = el('div', { class: 'card' }, el('h3', { text: 'A2A and Task Status' }), facts([
      ['agent', row.agent],
      ['A2A state', shortState(row.state)],
      ['phase', phaseView(row), 'phase'],
      ['ended', row.ended || '—', 'ended'],
      ['context', el('code', { text: row.context_id })],
      ['revision', row.status.revision],
      ['notifications', chips.length ? chips : 'none'],
      ['created', moment(row.created_at)],
    ]));
    const claimCard = el('div', { class: 'card' }, el('h3', { text: 'Claim' }), facts([
      ['state', claimLabel(claim), 'claim-state'],
      ['generation', String(claim.claim_generation)],
      ['session', String(claim.session_generation)],
      ['lease until', claim.lease_until ? moment(claim.lease_until) : '—'],
      ['stage', claim.stage || '—'],
    ]));
    const messages = el('ol', { class: 'history' }, history.map((message) => {
      const role = (message.role || '').replace('ROLE_', '').toLowerCase();
      return el('li', { class: `message-${role}` }, el('span', { class: 'role', text: role }), el('div', {}, (message.parts || []).map(partView)));
    }));
    const outputs = artifacts.length
      ? artifacts.map((artifact) => el('div', { class: 'artifact', 'data-artifact': artifact.artifactId },
        el('h3', { text: artifact.name || artifact.artifactId }), (artifact.parts || []).map(partView)))
      : el('p', { class: 'hint', text: 'No artifacts.' });
    const eventRows = claim.events.map((event) => el('tr', { 'data-operation': event.operation },
      el('td', { class: 'mono', text: time(event.at) }),
      el('td', { class: 'num', text: String(event.claim_generation) }),
      el('td', { class: 'operation', text: event.operation }),
      el('td', { text: event.state.replace(/_/g, ' ') }),
      el('td', {}, el('code', { class: 'evidence-json', text: JSON.stringify(event.evidence) }))));
    const events = el('div', { class: 'scroll' }, el('table', { class: 'events' },
      el('thead', {}, el('tr', {}, ['at', 'gen', 'operation', 'state', 'evidence'].map((h) => el('th', { text: h })))),
      el('tbody', {}, eventRows)));
    const view = el('div', { 'data-task-id': row.id, 'data-state': shortState(row.state) },
      el('div', { class: 'heading' }, el('h1', {}, 'Task ', el('code', { text: row.id })), badge(row.state)),
      el('p', { class: 'status-message' }, el('bdi', { text: row.message || '(no status message)' })),
      el('p', { id: 'task-notice', class: said ? said.className : 'notice', role: 'status', text: said ? said.textContent : '' }),
      timelineParts.view(detail),
      el('div', { class: 'columns' }, statusCard, claimCard),
      el('div', { class: 'actions' }, actionButtons(row).filter((node) => node.dataset.action !== 'reconcile')),
      row.actions.includes('reconcile') ? (kept || reconcileForm(row)) : null,
      section('Webhook deliveries', webhooks.length, deliveriesView(row, webhooks)),
      section('History', history.length, messages),
      section('Artifacts', artifacts.length, outputs),
      section('Claim events', claim.events.length, events));
    container.replaceChildren(view);
  }

  // --- pages ----------------------------------------------------------------------------------------------------

  function show(id) {
    for (const section of ['#sign-in', '#overview-view', '#tasks-view', '#dead-view', '#task-view']) $(section).hidden = section !== id;
    const current = { '#overview-view': 'overview', '#tasks-view': 'tasks', '#dead-view': 'dead-letters' }[id];
    for (const link of document.querySelectorAll('#views a')) {
      if (link.dataset.view === current) link.setAttribute('aria-current', 'page');
      else link.removeAttribute('aria-current');
    }
  }

  function route() {
    if (!state.token) {
      show('#sign-in');
      return;
    }
    const match = location.hash.match(/^#\/tasks\/(.+)$/);
    state.openTask = match ? decodeURIComponent(match[1]) : null;
    if (state.openTask) {
      show('#task-view');
      $('#task').replaceChildren(el('p', { class: 'hint', text: 'Loading…' }));
      loadTask(state.openTask);
    } else if (location.hash === '#/dead-letters') {
      show('#dead-view');
      loadDeadLetters();
    } else if (location.hash === '#/tasks') {
      show('#tasks-view');
      renderTasks(new Set());
    } else {
      show('#overview-view');
      loadOverview();
    }
  }

  // --- the overview ---------------------------------------------------------------------------------------------

  // Read while the overview shows: on opening it, after a change the feed reports (at most once a second), and
  // every ten seconds anyway (the charts move with the minutes).
  async function loadOverview() {
    const ticket = ++state.overviewLoads;
    state.overviewAt = Date.now();
    clearTimeout(state.overviewTimer);
    state.overviewTimer = setTimeout(() => {
      if (state.token && !$('#overview-view').hidden) loadOverview();
    }, OVERVIEW_EVERY);
    try {
      const body = await call('api/overview');
      if (ticket === state.overviewLoads && !$('#overview-view').hidden) overviewParts.render(body);
    } catch (error) {
      if (!(error instanceof SignedOut) && ticket === state.overviewLoads) notice(`Could not load the overview: ${error.message}`, true);
    }
  }

  function overviewChanged() {
    if ($('#overview-view').hidden) return;
    const wait = state.overviewAt + OVERVIEW_AT_MOST - Date.now();
    clearTimeout(state.overviewTimer);
    state.overviewTimer = setTimeout(loadOverview, Math.max(0, wait));
  }

  function start() {
    $('#sign-out').hidden = false;
    $('#views').hidden = false;
    route();
    openFeed();
  }

  function signOut(message = '') {
    sessionStorage.removeItem(TOKEN_KEY);
    state.token = null;
    state.rows.clear();
    if (state.feed) state.feed.abort();
    state.feed = null;
    setFeed('off');
    $('#sign-out').hidden = true;
    $('#views').hidden = true;
    $('#dead-letters tbody').replaceChildren();
    clearTimeout(state.overviewTimer);
    state.overviewLoads += 1;
    $('#attention-items').replaceChildren();
    $('#sign-in-error').textContent = message;
    route();
  }

  async function signIn(event) {
    event.preventDefault();
    state.token = $('#token').value.trim();
    try {
      await call('api/tasks?limit=1');
    } catch (error) {
      if (!(error instanceof SignedOut)) {
        $('#sign-in-error').textContent = `Could not sign in: ${error.message}`;
        state.token = null;
      }
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, state.token);
    $('#token').value = '';
    $('#sign-in-error').textContent = '';
    start();
  }

  async function loadInfo() {
    try {
      const info = await (await fetch('api/info')).json();
      $('#filter-agent').append(...info.agents.map((name) => el('option', { value: name, text: name })));
      if (info.demo) {
        const hint = $('#demo-hint');
        hint.replaceChildren('This server runs as the demo: it accepts the demo operator token (the default of ',
          el('code', { text: '--operator-token' }), ', in the README). Outside a demo, configure principals of your own.');
        hint.hidden = false;
      }
    } catch {
      // the hint and the agent filter's names are a convenience; the form and the list work without them
    }
  }

  const helpers = { el, $, shortId, moment, ago, itemActions };
  const overviewParts = window.A2AConsoleParts.overview(helpers);
  const timelineParts = window.A2AConsoleParts.timeline(helpers);
  const confirmParts = window.A2AConsoleParts.confirm(helpers);

  $('#sign-in-form').addEventListener('submit', signIn);
  $('#sign-out').addEventListener('click', () => signOut());
  $('#filters').addEventListener('submit', applyFilters);
  $('#filter-agent').addEventListener('change', () => applyFilters());
  $('#filter-state').addEventListener('change', () => applyFilters());
  $('#filter-clear').addEventListener('click', clearFilters);
  $('#page-older').addEventListener('click', older);
  $('#page-newer').addEventListener('click', newer);
  $('#dead-refresh').addEventListener('click', loadDeadLetters);
  window.addEventListener('hashchange', route);
  loadInfo();
  if (state.token) start();
  else route();
})();
