'use strict';
// Loaded with `node --require` before a Node tool's own script. The tool's settings and
// secrets arrive on a pipe (the descriptor named by KILN_PRIVATE_FD), not in the environment
// given to exec, so they never appear in /proc/<pid>/environ; here they join process.env,
// which is what the script and the processes it starts see.
const fs = require('node:fs');

const fd = Number(process.env.KILN_PRIVATE_FD);
const ready = Number(process.env.KILN_READY_FD);
delete process.env.KILN_PRIVATE_FD;
delete process.env.KILN_READY_FD;
// Processes the tool forks with Node must not run this again (their fd 3 is something else).
process.execArgv = process.execArgv.filter((arg, i, all) => arg !== '--require' && all[i - 1] !== '--require');
// What the script's first console.log (or stderr write) would load: stdout and stderr are
// pipes, whose streams are net sockets. Loaded while a standby waits, not on its call's path
// (about a third of a trivial tool's run); the streams themselves are left to the script, as
// making one sets its pipe non-blocking.
require('node:net');
if (Number.isInteger(ready) && ready > 2) {
  // Node has started and now waits for its call: the supervisor tells the server, so that a
  // save answers once this standby is here (kiln.runner.standby), not while Node still starts.
  try {
    fs.writeSync(ready, 'r');
  } catch {}
  try {
    fs.closeSync(ready);
  } catch {}
}
if (Number.isInteger(fd) && fd > 2) {
  let data = '';
  try {
    data = fs.readFileSync(fd, 'utf8');
  } finally {
    try {
      fs.closeSync(fd);
    } catch {}
  }
  // A call always sends at least {}: nothing at all means the run was discarded before its
  // call (or the server is gone), and the tool's code must not run.
  if (!data) process.exit(0);
  Object.assign(process.env, JSON.parse(data));
}
