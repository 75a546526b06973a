// One task's timeline on the task page, drawn by console.js with its helpers: who must act now and since when, the
// entries of /console/api/tasks/{id}'s `timeline` on one time axis (A2A states, claim operations, Task Status
// notifications, webhook deliveries, operator actions with their reasons, a failed turn's error), and what "cancelled"
// (the claim) and CANCELED (A2A) each say.
'use strict';

window.A2AConsoleParts = window.A2AConsoleParts || {};

window.A2AConsoleParts.timeline = (h) => {
  const { el } = h;
  const KIND_LABELS = {
    a2a: 'A2A', claim: 'claim', status: 'Task Status', webhook: 'webhook', operator: 'operator', failure: 'failure',
  };

  function waitingView(waiting) {
    if (!waiting) return el('p', { class: 'waiting none', 'data-who': '', text: 'Nobody: the task has ended.' });
    return el('p', { class: 'waiting', 'data-who': waiting.who, 'data-since': waiting.since },
      el('strong', {}, el('bdi', { text: waiting.who })), ' must ', el('bdi', { text: waiting.what }),
      ', since ', el('time', { datetime: waiting.since, text: `${h.moment(waiting.since)} (${h.ago(waiting.since)})` }), '.');
  }

  // What the three views say of a task that ended by a cancel, side by side.
  function endExplained(row, claim) {
    const canceled = row.state === 'TASK_STATE_CANCELED' || claim.state === 'cancelled';
    if (!canceled) return null;
    return el('div', { class: 'explain', 'data-explains': 'cancel' },
      el('p', {}, el('strong', { text: 'CANCELED' }), ' (A2A) is what clients see: the task was stopped before its work finished.'),
      el('p', {}, el('strong', { text: 'cancelled' }), ' (claim) is the bridge\'s record of that same end: a cancel was asked for and the ',
        'work\'s stop reported, so the work is never run again.'),
      el('p', { class: 'hint' }, 'Task Status (the Common Agent Specification) puts every end that is not an error under one ',
        'terminal_reason; the A2A state above says how this task ended.'));
  }

  // A claim operation's generation, and the session and lease its claim had after it (events stored before the
  // ledger kept those have none).
  function claimFacts(entry) {
    const facts = [` · generation ${entry.generation}`];
    if (entry.session) facts.push(`session ${entry.session}`);
    if (entry.lease) facts.push(`lease until ${entry.lease.slice(11, 19)}`);
    return facts.join(' · ');
  }

  function entryView(entry) {
    const extra = [];
    if (entry.reason) extra.push(el('p', { class: 'reason-given' }, 'reason: ', el('q', {}, el('bdi', { text: entry.reason }))));
    if (entry.kind === 'claim' && entry.evidence && Object.keys(entry.evidence).length) {
      extra.push(el('code', { class: 'evidence-json' }, el('bdi', { text: JSON.stringify(entry.evidence) })));
    }
    return el('li', { class: `entry kind-${entry.kind}`, 'data-kind': entry.kind, 'data-title': entry.title },
      el('time', { datetime: entry.at, class: 'mono', text: entry.at.replace('T', ' ').replace('Z', '') }),
      el('span', { class: `tag kind-${entry.kind}`, text: KIND_LABELS[entry.kind] || entry.kind }),
      el('div', { class: 'body' },
        el('div', { class: 'title' }, el('bdi', { text: entry.title }),
          entry.generation !== undefined ? el('span', { class: 'hint claim-facts', text: claimFacts(entry) }) : null),
        entry.detail ? el('div', { class: 'detail' }, el('bdi', { text: entry.detail })) : null,
        extra));
  }

  function view(detail) {
    const failure = detail.timeline.filter((entry) => entry.kind === 'failure').pop();
    return el('section', { class: 'block timeline-block' },
      el('h2', {}, 'Timeline', el('span', { class: 'count', text: ` ${detail.timeline.length}` })),
      waitingView(detail.waiting),
      failure ? el('div', { class: 'failure card' }, el('h3', { text: 'Why the turn failed' }),
        el('p', {}, el('code', { class: 'failure-type', text: failure.title }), ' ', el('bdi', { class: 'failure-message', text: failure.detail }))) : null,
      endExplained(detail.row, detail.claim),
      el('ol', { class: 'timeline' }, detail.timeline.map(entryView)));
  }

  return { view };
};
