// `npm run build`: the console's HTML and CSS beside its compiled script, and uPlot (its charts)
// bundled from node_modules into dist/console/vendor, so the relay serves it itself (no CDN).
import { copyFileSync, cpSync, mkdirSync } from 'node:fs';

cpSync('console/static', 'dist/console', { recursive: true });
mkdirSync('dist/console/vendor', { recursive: true });
copyFileSync('node_modules/uplot/dist/uPlot.esm.js', 'dist/console/vendor/uplot.js');
copyFileSync('node_modules/uplot/dist/uPlot.min.css', 'dist/console/vendor/uplot.css');
