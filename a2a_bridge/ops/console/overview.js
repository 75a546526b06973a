// The console's overview (/console/api/overview), drawn by console.js with its helpers: the attention queue (each
// item says why it needs the operator and what they can do, with the action at hand), tasks counted by agent, the
// last hour's throughput and latency as two small SVG charts (elements made through the DOM: the CSP allows no
// inline script or style), the sessions and replicas, and the store's health.
'use strict';

window.A2AConsoleParts = window.A2AConsoleParts || {};

window.A2AConsoleParts.overview = (h) => {
  const { el, $ } = h;
  const SVG = 'http://www.w3.org/2000/svg';
  const KINDS = {
    approval: 'Approval waiting',
    needs_reconciliation: 'Needs reconciliation',
    uncertain: 'Uncertain outcome',
    past_lease: 'Past its lease',
    dead_letter: 'Dead-lettered webhook',
    failed: 'Failed in the last hour',
  };

  function svg(tag, attributes = {}, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
    for (const child of children) node.append(child);
    return node;
  }

  // A bar chart of one series per minute (nulls drawn as gaps), its largest value written above it.
  function chart(figure, title, minutes, series, unit) {
    const width = 360;
    const height = 90;
    const values = minutes.map((minute) => series.map((s) => minute[s.key]));
    const top = Math.max(0, ...values.flat().filter((v) => v !== null && v !== undefined));
    const scale = top > 0 ? (height - 14) / top : 0;
    const bar = width / minutes.length;
    const plot = svg('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': title, class: 'bars' });
    plot.append(svg('line', { x1: 0, y1: height - 0.5, x2: width, y2: height - 0.5, class: 'axis' }));
    minutes.forEach((minute, i) => {
      series.forEach((s, j) => {
        const value = minute[s.key];
        if (value === null || value === undefined || value === 0) return;
        const tall = Math.max(1, value * scale);
        const inner = bar / series.length;
        plot.append(svg('rect', {
          x: i * bar + j * inner, y: height - tall, width: Math.max(1, inner - 0.6), height: tall, class: s.cls,
        }, svg('title', {}, document.createTextNode(`${minute.minute.slice(11, 16)} UTC · ${s.label}: ${format(value, unit)}`))));
      });
    });
    const last = minutes[minutes.length - 1] || {};
    const legend = el('figcaption', {}, el('strong', { text: title }), ' ',
      series.map((s) => el('span', { class: `legend ${s.cls}`, text: `${s.label} now ${format(last[s.key], unit)}` })),
      el('span', { class: 'hint', text: ` · peak ${format(top, unit)}` }));
    figure.replaceChildren(legend, plot);
    figure.dataset.peak = String(top);
  }

  function format(value, unit) {
    if (value === null || value === undefined) return '—';
    if (unit === 's') return value >= 1 ? `${value.toFixed(1)} s` : `${Math.round(value * 1000)} ms`;
    return `${value}${unit ? ` ${unit}` : ''}`;
  }

  function countChips(counts) {
    return Object.entries(counts).sort((a, b) => b[1] - a[1])
      .map(([name, n]) => el('span', { class: 'chip quiet', 'data-name': name }, el('bdi', { text: name.replace(/_/g, ' ') }), ` ${n}`));
  }

  function itemView(item) {
    const since = item.since ? el('time', { datetime: item.since, text: `${h.ago(item.since)} (${h.moment(item.since)})` }) : null;
    return el('li', { class: `attention-item kind-${item.kind}`, 'data-kind': item.kind, 'data-task-id': item.taskId },
      el('div', { class: 'attention-head' },
        el('span', { class: `kind-label kind-${item.kind}`, text: KINDS[item.kind] || item.kind }),
        el('a', { href: `#/tasks/${encodeURIComponent(item.taskId)}`, class: 'mono', title: item.taskId }, el('bdi', { text: h.shortId(item.taskId) })),
        el('span', { class: 'agent' }, el('bdi', { text: item.agent })),
        since ? el('span', { class: 'since' }, 'since ', since) : null),
      el('p', { class: 'why' }, el('bdi', { text: item.why })),
      el('p', { class: 'what hint' }, el('bdi', { text: item.what })),
      el('div', { class: 'actions' }, h.itemActions(item)));
  }

  function render(body) {
    const { attention } = body;
    $('#overview-hint').textContent = `What needs you, and how the server is doing; read ${h.moment(body.now)}.`;
    $('#attention-counts').replaceChildren(...Object.entries(KINDS).map(([kind, label]) => el('li', {
      class: `count-${kind}${attention.counts[kind] ? ' some' : ''}`, 'data-kind': kind, 'data-count': String(attention.counts[kind] || 0),
    }, el('strong', { text: String(attention.counts[kind] || 0) }), ` ${label}`)));
    $('#attention-items').replaceChildren(...attention.items.map(itemView));
    $('#no-attention').hidden = attention.items.length > 0;

    $('#agent-counts tbody').replaceChildren(...body.agents.map((row) => el('tr', { 'data-agent': row.agent },
      el('td', { class: 'agent' }, el('bdi', { text: row.agent })),
      el('td', { class: 'num total', text: String(row.total) }),
      el('td', { class: 'phases' }, countChips(row.phases)),
      el('td', { class: 'states' }, countChips(row.states)),
      el('td', { class: 'claims' }, countChips(row.claims)))));

    chart($('#chart-throughput'), 'Throughput per minute', body.traffic, [
      { key: 'requests', label: 'requests', cls: 'series-a' },
      { key: 'turns', label: 'turns', cls: 'series-b' },
      { key: 'failed', label: 'failed', cls: 'series-c' },
    ], '');
    chart($('#chart-latency'), 'Turn latency per minute', body.traffic, [
      { key: 'p50', label: 'median', cls: 'series-a' },
      { key: 'p95', label: 'p95', cls: 'series-b' },
    ], 's');

    const sessions = body.sessions;
    $('#sessions').replaceChildren(
      el('p', {}, sessions.shared
        ? 'Shared store: replicas hold sessions; a dead session\'s claims are recovered by the others.'
        : 'One process holds the store.'),
      el('table', { class: 'sessions' },
        el('thead', {}, el('tr', {}, ['session', 'claims held', 'status'].map((t) => el('th', { text: t })))),
        el('tbody', {}, sessions.sessions.map((row) => el('tr', { 'data-session': String(row.session), 'data-status': row.status },
          el('td', { class: 'num', text: String(row.session) }),
          el('td', { class: 'num', text: String(row.claims) }),
          el('td', { class: `status-${row.status.replace(/ /g, '-')}`, text: row.status }))))));

    const store = body.store;
    $('#store-health').replaceChildren(el('dl', { class: 'facts' },
      el('dt', { text: 'kind' }), el('dd', { text: store.kind }),
      el('dt', { text: 'health' }), el('dd', { class: store.ok ? 'ok' : 'error', 'data-ok': String(store.ok), text: store.ok ? 'answers and takes writes' : store.problem }),
      el('dt', { text: 'checked in' }), el('dd', { text: `${store.answeredMs} ms` })));
  }

  return { render };
};
