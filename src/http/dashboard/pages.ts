// The two server-rendered pages: the dashboard's shell (the script builds everything else from the JSON API)
// and the login form. The only values put in them are the base path, the CSRF token, the user's name and a
// fixed message, each escaped for the spot it lands in; and the list of job states (src/model/job.ts), so the
// page script keeps no copy of it.
import { JOB_STATES } from '../../model/job.js';

const HTML_ESCAPES: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
  '`': '&#96;',
};

/** Escapes text for an HTML text node or a quoted attribute value. */
export function escapeHtml(value: string): string {
  return value.replace(/[&<>"'`]/g, (c) => HTML_ESCAPES[c]!);
}

/** The page shell. `readOnly`: the login may not act; the body says so (data-role="read") and the stylesheet
 * hides every action control. `replicaReads`: the pages are read from a replica, whose lag the header shows. */
export function shellPage(
  base: string,
  csrfToken: string,
  user: string,
  canLogout: boolean,
  readOnly = false,
  replicaReads = false,
): string {
  const b = escapeHtml(base);
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="awa-base" content="${b}">
<meta name="awa-csrf" content="${escapeHtml(csrfToken)}">
<meta name="awa-role" content="${readOnly ? 'read' : 'operator'}">
<meta name="awa-job-states" content="${JOB_STATES.join(' ')}">
<meta name="awa-reads" content="${replicaReads ? 'replica' : 'primary'}">
<title>Awa dashboard</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="${b}/assets/dashboard.css">
<script type="module" src="${b}/assets/dashboard.js"></script>
</head>
<body data-role="${readOnly ? 'read' : 'operator'}">
<header class="top">
  <span class="brand">Awa</span>
  <nav id="nav">
    <a href="#/queues" data-page="queues">Queues</a>
    <a href="#/jobs" data-page="jobs">Jobs</a>
    <a href="#/flows" data-page="flows">Flows</a>
    <a href="#/dlq" data-page="dlq">DLQ</a>
    <a href="#/runtimes" data-page="runtimes">Runtimes</a>
    <a href="#/cron" data-page="cron">Cron</a>
    <a href="#/storage" data-page="storage">Storage</a>
    <a href="#/audit" data-page="audit">Audit</a>
  </nav>
  <span id="reads" class="reads" role="status" hidden></span>
  <span class="who">${escapeHtml(user)}${readOnly ? ' (read-only)' : ''}</span>
  ${canLogout ? `<form method="post" action="${b}/logout" class="logout"><button type="submit">Log out</button></form>` : ''}
</header>
<div id="notice" role="status" aria-live="polite"></div>
<main id="main"><p class="muted">Loading…</p></main>
</body>
</html>
`;
}

export function loginPage(base: string, mode: 'token' | 'basic', failed: boolean): string {
  const b = escapeHtml(base);
  const fields =
    mode === 'basic'
      ? `<label>Username <input name="username" autocomplete="username" required></label>
  <label>Password <input name="password" type="password" autocomplete="current-password" required></label>`
      : `<label>Token <input name="password" type="password" autocomplete="current-password" required></label>`;
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Awa dashboard: log in</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="${b}/assets/dashboard.css">
</head>
<body class="login">
<form method="post" action="${b}/login" class="login-box">
  <h1>Awa dashboard</h1>
  ${failed ? '<p class="error" id="login-error">Wrong credentials.</p>' : ''}
  ${fields}
  <button type="submit">Log in</button>
</form>
</body>
</html>
`;
}
