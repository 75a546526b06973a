// The console's confirmation dialog, used by console.js before every action: a modal <dialog> (focus stays in it,
// Escape closes it) naming the action's consequence and taking an optional reason, which the server keeps in the
// claim's evidence. `ask` resolves to {reason} when confirmed, null when not; the other functions say what each action
// does to the task it names.
'use strict';

window.A2AConsoleParts = window.A2AConsoleParts || {};

window.A2AConsoleParts.confirm = (h) => {
  const { el, $ } = h;

  function ask({ title, consequence, verb, danger = false, reason = true }) {
    const dialog = $('#confirm');
    const form = $('#confirm-form');
    $('#confirm-title').textContent = title;
    $('#confirm-consequence').replaceChildren(...consequence);
    const text = $('#confirm-reason');
    text.value = '';
    text.hidden = !reason;
    $('#confirm-reason-label').hidden = !reason;
    const yes = $('#confirm-yes');
    yes.textContent = verb;
    yes.className = danger ? 'danger solid' : 'primary';
    const opener = document.activeElement;
    dialog.showModal();
    (reason ? text : yes).focus();
    return new Promise((resolve) => {
      const finish = (answer) => {
        form.removeEventListener('submit', onYes);
        $('#confirm-no').removeEventListener('click', onNo);
        dialog.removeEventListener('cancel', onEscape);
        if (dialog.open) dialog.close();
        if (opener && opener.isConnected) opener.focus();
        resolve(answer);
      };
      const onYes = (event) => {
        event.preventDefault();
        finish({ reason: text.value.trim() });
      };
      const onNo = () => finish(null);
      const onEscape = (event) => {
        event.preventDefault();
        finish(null);
      };
      form.addEventListener('submit', onYes);
      $('#confirm-no').addEventListener('click', onNo);
      dialog.addEventListener('cancel', onEscape);
    });
  }

  const idOf = (id) => el('code', {}, el('bdi', { text: id }));
  const RECONCILED = {
    completed: 'ends COMPLETED, recorded as done: its work is not run again.',
    cancelled: 'ends CANCELED, recorded as stopped (it needs a cancel on record): its work is not run again.',
    continue: 'runs its step again in a new turn: whatever the lost turn did may be done twice.',
    uncertain: 'stays waiting for reconciliation, marked uncertain, until someone finds out what happened.',
  };

  return {
    ask,
    approve: (row) => ({
      title: 'Approve this deploy?', verb: 'Approve',
      consequence: ['Task ', idOf(row.id), ' of ', el('bdi', { text: row.agent }), ' goes on at once: the deploy rolls out. ',
        'An approval cannot be taken back; a rollout already under way can only be canceled.'],
    }),
    cancel: (row) => ({
      title: 'Cancel this task?', verb: 'Cancel the task', danger: true,
      consequence: ['Task ', idOf(row.id), ' of ', el('bdi', { text: row.agent }), ' is stopped: its turn is interrupted, the ',
        'agent\'s cancel runs and clients see it CANCELED. It cannot be resumed. A task whose outcome is unknown ',
        '(needs reconciliation) keeps the cancel on record until it is reconciled.'],
    }),
    reconcile: (row, outcome) => ({
      title: `Reconcile as ${outcome}?`, verb: `Reconcile: ${outcome}`, danger: outcome === 'continue',
      consequence: ['Task ', idOf(row.id), ' ', RECONCILED[outcome], ' Your evidence is kept in its claim.'],
    }),
    redeliver: (letter) => ({
      title: 'Deliver this webhook again?', verb: 'Deliver again', reason: false,
      consequence: ['The push notifications of task ', idOf(letter.taskId), ' to config ', idOf(letter.configId),
        ` are sent again from revision ${letter.deliveredRevision}, with the same ids, and retried as before; `,
        'the receiver may get events it had already taken.'],
    }),
  };
};
