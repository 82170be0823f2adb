import type { CloudEvent } from '../events/cloudevent.js';

/** Slack's control characters: escaped so upstream text cannot mention channels or forge links. */
function escapeSlack(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

const text = (value: unknown): string | undefined => (typeof value === 'string' && value !== '' ? escapeSlack(value) : undefined);

/** `box ci-42 (bx_abc) entered error from running at <time>`, degrading gracefully for other events. */
export function slackText(event: CloudEvent): string {
  const box = event.data.box as { id?: unknown; name?: unknown } | undefined;
  const id = text(box?.id);
  const name = text(box?.name);
  const state = text(event.data.state);
  const previous = text(event.data.previousState);
  const when = `at ${escapeSlack(event.time)}`;
  if (id === undefined) return `${escapeSlack(event.type)} event ${escapeSlack(event.id)} ${when}`;
  const who = name === undefined ? `box ${id}` : `box ${name} (${id})`;
  if (state === undefined) return `${who}: ${escapeSlack(event.type)} ${when}`;
  return `${who} entered ${state}${previous === undefined ? '' : ` from ${previous}`} ${when}`;
}

/** The body a `slack` hook receives. */
export function slackBody(event: CloudEvent): string {
  return JSON.stringify({ text: slackText(event) });
}
