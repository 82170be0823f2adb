import uPlot from './vendor/uplot.js';
import { h, message } from './dom.js';

/** One bucket of `GET /admin/stats` (contract section 15). */
export interface StatsBucket {
  start: string;
  accepted: Record<string, number>;
  delivered: Record<string, number>;
  failed: Record<string, number>;
}

/** The periods the Overview offers, each with a bucket that keeps it under the API's 500 buckets. */
export const PERIODS = {
  '1h': { label: 'Last hour', ms: 3_600_000, bucket: '1m' },
  '24h': { label: 'Last 24 hours', ms: 86_400_000, bucket: '5m' },
  '7d': { label: 'Last 7 days', ms: 7 * 86_400_000, bucket: '1h' },
} as const;
export type Period = keyof typeof PERIODS;

/** Line colours that read on the light and the dark background alike. */
const PALETTE = ['#3b82f6', '#e5484d', '#30a46c', '#d4a017', '#8e4ec6', '#f76b15', '#12a594', '#d6409f'];

const WHOLE_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000];

/** A chart element keeps its uPlot instance, so tests can read the very data it draws. */
export type ChartCanvas = HTMLCanvasElement & { uplot?: uPlot };

const cssColor = (name: string) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

/** One point in time of a chart, with a count per name. */
export interface CountsAt {
  start: string;
  counts: Record<string, number>;
}

/**
 * A line per name (event type, or sink) over the buckets, with a caption that gives the totals as
 * text. Built again at each refresh: the old chart is destroyed by `release`.
 */
export function countChart(title: string, buckets: StatsBucket[], key: keyof Omit<StatsBucket, 'start'>, width: number): { node: HTMLElement; chart?: uPlot } {
  return linesChart(title, buckets.map((b) => ({ start: b.start, counts: b[key] })), width);
}

/** A line per name over the points, with a caption that gives the totals as text. */
export function linesChart(title: string, points: CountsAt[], width: number): { node: HTMLElement; chart?: uPlot } {
  const names = [...new Set(points.flatMap((b) => Object.keys(b.counts)))].sort();
  const totals = names.map((name) => points.reduce((sum, b) => sum + (b.counts[name] ?? 0), 0));
  const caption = h(
    'figcaption',
    null,
    title,
    names.length > 0 ? `: ${names.map((name, i) => `${name} ${totals[i]}`).join(', ')}` : '',
  );
  const figure = h('figure', { class: 'chart' }, caption);
  if (names.length === 0) {
    figure.append(message('empty', 'None in this period.'));
    return { node: figure };
  }
  const data: uPlot.AlignedData = [points.map((b) => Date.parse(b.start) / 1000), ...names.map((name) => points.map((b) => b.counts[name] ?? 0))];
  const text = cssColor('--fg');
  const grid = cssColor('--line');
  const axis: uPlot.Axis = { stroke: text, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
  const chart = new uPlot(
    {
      width,
      height: 200,
      series: [{}, ...names.map((name, i) => ({ label: name, stroke: PALETTE[i % PALETTE.length], width: 2, points: { show: false } }))],
      // Counts: whole-number steps on the y axis, never 0.25 of an event.
      axes: [axis, { ...axis, size: 48, incrs: WHOLE_STEPS }],
      scales: { y: { range: (_u, _min, max) => [0, Math.max(1, max)] } },
      legend: { live: false },
    },
    data,
    figure,
  );
  (chart.ctx.canvas as ChartCanvas).uplot = chart;
  return { node: figure, chart };
}

/** The width a chart gets: the view's, less its padding (the charts are built before they are shown). */
export function chartWidth(): number {
  const main = document.querySelector('main');
  return Math.max(240, Math.min(900, (main?.clientWidth ?? 640) - 32));
}
