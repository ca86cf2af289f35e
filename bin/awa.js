#!/usr/bin/env node
// Installed entry point: runs the compiled CLI (npm run build produces dist/).
import { main } from '../dist/src/cli/main.js';

main();
