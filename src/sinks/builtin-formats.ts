/**
 * The built-in formats of contract section 17: transforms the relay ships, in CEL, so that users
 * can read them (docs/hooks.md shows each verbatim; a test checks it) and copy one to change it.
 * They degrade for events without a box (an unknown type, an operator event) rather than fail.
 */

/** Whether the event has a box with a string id (every `box.*` event; others may not). */
const HAS_BOX = 'has(event.data.box) && type(event.data.box) == map && has(event.data.box.id) && type(event.data.box.id) == string';
const HAS_NAME = 'has(event.data.box.name) && type(event.data.box.name) == string';
const HAS_STATE = 'has(event.data.state) && type(event.data.state) == string';

/** The chat line: `**box.error**: box ci-42 (bx_abc), now error`, the upstream's texts escaped and cut short. */
const CHAT_TEXT = `"**" + escapeMarkdown(truncate(event.type, 128)) + "**: " + (${HAS_BOX}
    ? "box " + (${HAS_NAME} ? escapeMarkdown(truncate(event.data.box.name, 200)) + " (" + escapeMarkdown(truncate(event.data.box.id, 256)) + ")" : escapeMarkdown(truncate(event.data.box.id, 256)))
      + (${HAS_STATE} ? ", now " + escapeMarkdown(truncate(event.data.state, 64)) : "")
    : "event " + escapeMarkdown(truncate(event.id, 256)))`;

export const TEAMS_TRANSFORM = `{
  "type": "message",
  "attachments": [{
    "contentType": "application/vnd.microsoft.card.adaptive",
    "contentUrl": null,
    "content": {
      "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
      "type": "AdaptiveCard",
      "version": "1.4",
      "body": [{"type": "TextBlock", "text": ${CHAT_TEXT}, "wrap": true}]
    }
  }]
}`;

export const DISCORD_TRANSFORM = `{
  "content": ${CHAT_TEXT},
  "allowed_mentions": {"parse": []}
}`;

/**
 * PagerDuty Events API v2: a box's error triggers its alert, its recovery resolves it; `routingKey` is the hook's.
 * The key names an account other than `default` (contract section 21): two accounts' boxes of one id are two alerts.
 */
export const PAGERDUTY_TRANSFORM = `event.type == "box.error" ? {
  "routing_key": routingKey,
  "event_action": "trigger",
  "dedup_key": "boxrelay-" + (event.boxrelayaccount != "default" ? event.boxrelayaccount + "-" : "") + event.data.box.id,
  "payload": {
    "summary": truncate("box " + (${HAS_NAME} ? event.data.box.name + " (" + event.data.box.id + ")" : event.data.box.id) + " entered error", 1024),
    "source": event.source,
    "severity": "error",
    "custom_details": event
  }
} : event.type in ["box.ready", "box.archived"] ? {
  "routing_key": routingKey,
  "event_action": "resolve",
  "dedup_key": "boxrelay-" + (event.boxrelayaccount != "default" ? event.boxrelayaccount + "-" : "") + event.data.box.id
} : null`;

export const BUILTIN_TRANSFORMS = { teams: TEAMS_TRANSFORM, discord: DISCORD_TRANSFORM, pagerduty: PAGERDUTY_TRANSFORM } as const;
export type BuiltinFormat = keyof typeof BUILTIN_TRANSFORMS;
