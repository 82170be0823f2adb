import type { HookAnswer, HookRequest } from './hook-server.js';

/**
 * Stand-ins for the alerting services, checking each request against the service's documented
 * request shape (not against our code) and answering as the service does: PagerDuty Events API v2
 * (POST /v2/enqueue: 202, or 400 "Invalid event"), a Microsoft Teams Workflows webhook taking an
 * Adaptive Card message (202), a Discord execute-webhook (204 without `?wait=true`; 400 otherwise).
 * Each returns the problems found, empty when the request is well formed.
 */
export type ShapeCheck = (request: HookRequest) => string[];

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

function jsonBody(request: HookRequest, problems: string[]): Record<string, unknown> | undefined {
  if (!String(request.headers['content-type']).startsWith('application/json')) problems.push(`content-type ${request.headers['content-type']}`);
  try {
    const body = JSON.parse(request.body) as unknown;
    if (isObject(body)) return body;
    problems.push('the body is not a JSON object');
  } catch {
    problems.push('the body is not JSON');
  }
  return undefined;
}

const unknownKeys = (object: Record<string, unknown>, known: string[]) => Object.keys(object).filter((key) => !known.includes(key)).map((key) => `unknown field ${key}`);

/** developer.pagerduty.com, Events API v2 "Send an Alert Event". */
export const pagerDutyShape: ShapeCheck = (request) => {
  const problems: string[] = [];
  const body = jsonBody(request, problems);
  if (!body) return problems;
  problems.push(...unknownKeys(body, ['routing_key', 'event_action', 'dedup_key', 'payload', 'images', 'links', 'client', 'client_url']));
  if (typeof body.routing_key !== 'string' || body.routing_key.length !== 32) problems.push('routing_key is the 32-character integration key');
  if (!['trigger', 'acknowledge', 'resolve'].includes(body.event_action as string)) problems.push('event_action is trigger, acknowledge or resolve');
  if (body.dedup_key !== undefined && (typeof body.dedup_key !== 'string' || body.dedup_key.length > 255)) problems.push('dedup_key is a string of at most 255 characters');
  if (body.event_action !== 'trigger') {
    if (typeof body.dedup_key !== 'string') problems.push('acknowledge and resolve need the dedup_key');
    return problems;
  }
  const payload = body.payload;
  if (!isObject(payload)) return [...problems, 'a trigger needs a payload'];
  problems.push(...unknownKeys(payload, ['summary', 'source', 'severity', 'timestamp', 'component', 'group', 'class', 'custom_details']));
  if (typeof payload.summary !== 'string' || payload.summary === '' || payload.summary.length > 1024) problems.push('payload.summary is 1 to 1024 characters');
  if (typeof payload.source !== 'string' || payload.source === '') problems.push('payload.source is required');
  if (!['critical', 'error', 'warning', 'info'].includes(payload.severity as string)) problems.push('payload.severity is critical, error, warning or info');
  if (payload.custom_details !== undefined && !isObject(payload.custom_details)) problems.push('payload.custom_details is an object');
  return problems;
};

/** learn.microsoft.com: a Workflows ("Post to a channel when a webhook request is received") message with an Adaptive Card. */
export const teamsShape: ShapeCheck = (request) => {
  const problems: string[] = [];
  const body = jsonBody(request, problems);
  if (!body) return problems;
  if (body.type !== 'message') problems.push('type is "message"');
  const attachments = body.attachments;
  if (!Array.isArray(attachments) || attachments.length === 0) return [...problems, 'attachments is a non-empty list'];
  for (const attachment of attachments as unknown[]) {
    if (!isObject(attachment)) {
      problems.push('an attachment is an object');
      continue;
    }
    if (attachment.contentType !== 'application/vnd.microsoft.card.adaptive') problems.push('contentType is application/vnd.microsoft.card.adaptive');
    const card = attachment.content;
    if (!isObject(card) || card.type !== 'AdaptiveCard') {
      problems.push('content is an AdaptiveCard');
      continue;
    }
    if (typeof card.version !== 'string' || !/^1\.[0-6]$/.test(card.version)) problems.push('version is 1.0 to 1.6 (Teams)');
    if (!Array.isArray(card.body)) problems.push('the card has a body list');
    for (const element of (card.body as unknown[]) ?? []) {
      if (!isObject(element) || typeof element.type !== 'string') problems.push('each body element has a type');
      else if (element.type === 'TextBlock' && typeof element.text !== 'string') problems.push('a TextBlock has a text');
    }
  }
  if (Buffer.byteLength(request.body) > 28 * 1024) problems.push('a Teams message is at most 28 KB');
  return problems;
};

/** discord.com/developers: Execute Webhook (JSON params) and the allowed mentions object. */
export const discordShape: ShapeCheck = (request) => {
  const problems: string[] = [];
  const body = jsonBody(request, problems);
  if (!body) return problems;
  problems.push(...unknownKeys(body, ['content', 'username', 'avatar_url', 'tts', 'embeds', 'allowed_mentions', 'components', 'attachments', 'flags', 'thread_name', 'applied_tags', 'poll']));
  if (typeof body.content !== 'string' || body.content === '' || [...body.content].length > 2000) problems.push('content is 1 to 2000 characters');
  const mentions = body.allowed_mentions;
  if (mentions !== undefined) {
    if (!isObject(mentions) || !Array.isArray(mentions.parse)) problems.push('allowed_mentions.parse is a list');
    else if (!(mentions.parse as unknown[]).every((type) => ['roles', 'users', 'everyone'].includes(type as string))) problems.push('allowed_mentions.parse holds roles, users, everyone');
  }
  return problems;
};

/** A receiver's answer: the service's success status when the shape holds, else 400 (recorded in `problems`). */
export function answering(check: ShapeCheck, success: number, problems: string[][]): (request: HookRequest) => HookAnswer {
  return (request) => {
    const found = check(request);
    problems.push(found);
    return found.length === 0 ? success : 400;
  };
}
