import { InvalidRequestError } from './errors.js';

// `YYYY-MM-DDTHH:MM[:SS[.fraction]]` then `Z`, `±HH:MM` or `±HHMM`: a time that names its zone.
const ISO_WITH_ZONE = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?(?:Z|[+-](\d{2}):?(\d{2}))$/;

type Fields = [year: number, month: number, day: number, hour: number, minute: number, second: number, zoneHours: number, zoneMinutes: number];

const DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
const isLeap = (year: number) => (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;

/**
 * An ISO-8601 time with a zone as epoch ms; undefined for anything else: no zone (whose meaning would
 * depend on the server's), a date only, or an impossible date or time (Date.parse rolls 02-30 over
 * into March and takes 24:00). The one reader of such times: the receiver's `createdAt`, the upstream's
 * `updatedAt`, the admin API, the CLI and the secrets file accept the same forms.
 */
export function parseIsoWithZone(text: string): number | undefined {
  const match = ISO_WITH_ZONE.exec(text);
  if (!match) return undefined;
  const [year, month, day, hour, minute, second, zoneHours, zoneMinutes] = match.slice(1).map((part) => Number(part ?? 0)) as Fields;
  const daysInMonth = month === 2 && isLeap(year) ? 29 : (DAYS_IN_MONTH[month - 1] ?? 0);
  const valid = day >= 1 && day <= daysInMonth && hour <= 23 && minute <= 59 && second <= 59 && zoneHours <= 23 && zoneMinutes <= 59;
  if (!valid) return undefined;
  const ms = Date.parse(text);
  return Number.isNaN(ms) ? undefined : ms;
}

/** A `since` of the admin API or the CLI, as epoch ms; refused (invalid_request) when parseIsoWithZone does not take it. */
export function requireSince(text: string): number {
  const since = parseIsoWithZone(text);
  if (since === undefined) throw new InvalidRequestError('since must be an ISO-8601 time with a zone, e.g. 2026-11-21T10:00:00Z');
  return since;
}
