#!/usr/bin/env node
// Installed entry point: runs the compiled CLI (npm run build produces dist/).
import '../dist/src/cli/main.js';
