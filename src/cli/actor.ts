import { hostname, userInfo } from 'node:os';
import { auditSafe, type Actor } from '../model/audit.js';

// Who the operator commands act as in the audit trail: $AWA_ACTOR (a service account, a ticket, a name the OS
// user does not say), else the OS user, from `cli@<host>`.

export function cliActor(env: Readonly<Record<string, string | undefined>>): Actor {
  return { who: auditSafe(env.AWA_ACTOR || osUser(env)), origin: auditSafe(`cli@${hostname()}`, 300) };
}

function osUser(env: Readonly<Record<string, string | undefined>>): string {
  try {
    return userInfo().username;
  } catch {
    // A uid with no passwd entry (some containers): userInfo() throws.
    return env.USER || env.LOGNAME || 'unknown';
  }
}
