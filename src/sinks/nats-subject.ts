import type { CloudEvent } from '../events/cloudevent.js';

/** One subject token: every code point outside [A-Za-z0-9_-] becomes `_`; an empty token is `_`. */
export function subjectToken(text: string): string {
  return text.replace(/[^A-Za-z0-9_-]/gu, '_') || '_';
}

/**
 * The type's tokens then the box id's, each by the section 4 rule (no box id: `_`): what every bus
 * routes on, joined by its own separator (`.` for NATS and RabbitMQ, `/` for MQTT).
 */
export function routingTokens(event: Pick<CloudEvent, 'type' | 'subject'>): string[] {
  return [...event.type.split('.').map(subjectToken), subjectToken(event.subject ?? '')];
}

/** `<prefix>.<type tokens>.<boxId>` (contract section 4); no box id ends in `_`. */
export function subjectFor(prefix: string, event: Pick<CloudEvent, 'type' | 'subject'>): string {
  return [prefix, ...routingTokens(event)].join('.');
}

/** Whether stream subject `pattern` takes every subject `target` (a `prefix.>` filter) names. */
export function subjectCovers(pattern: string, target: string): boolean {
  const have = pattern.split('.');
  const want = target.split('.');
  for (const [i, token] of have.entries()) {
    if (token === '>') return true;
    const wanted = want[i];
    if (wanted === undefined || wanted === '>' || (token !== '*' && token !== wanted)) return false;
  }
  return have.length === want.length && !want.includes('>');
}
