#!/usr/bin/env node
// The compiled CLI; `npm run build` (or `npm start`) produces dist/.
import '../dist/src/cli/main.js';
