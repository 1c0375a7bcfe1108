// Call other Kiln tools from a Node tool's script: const { tools } = require('./kiln_tools').
//
// Every run finds this folder beside its script (the runner writes it; nothing to install):
//
//   const { tools, ToolCallError } = require('./kiln_tools');
//   const rate = tools.fx_rate({from: 'GBP', to: 'JPY'});
//   const text = tools['fx-rate']({to: 'JPY'});
//   const same = tools.call('fx_rate', {from: 'GBP'});
//
// Synchronous. The n-th call of a run has the key `call:<n>:<12 hex of sha256(name +
// canonical JSON of the arguments)>`; with its answer in KILN_ANSWERS a call returns it,
// without it writes {"ask": key, "call": {name, arguments}} on the talk channel and ends the
// run at once (exit 0); Kiln runs the script again with the answer (kiln/runner/TALKING.md).
'use strict';

const crypto = require('node:crypto');
const fs = require('node:fs');

const NAME = /^[a-zA-Z][a-zA-Z0-9_-]{0,62}$/;

class ToolCallError extends Error {
  // The called tool failed or was refused: message is its text, result the whole MCP result.
  constructor(name, result) {
    super(textOf(result) || `the tool '${name}' failed without a message`);
    this.name = 'ToolCallError';
    this.tool = name;
    this.result = result;
  }
}

function textOf(result) {
  return (result.content || [])
    .filter((b) => b && b.type === 'text')
    .map((b) => String(b.text ?? ''))
    .join('\n');
}

// Sorted keys, no spaces: the same arguments give the same key on every run.
function canonical(value) {
  if (Array.isArray(value)) return `[${value.map((v) => canonical(v === undefined ? null : v)).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const keys = Object.keys(value).filter((k) => value[k] !== undefined).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`).join(',')}}`;
  }
  if (typeof value === 'number' && !Number.isFinite(value)) {
    throw new TypeError(`a tool's arguments must be JSON data: ${value} is not a JSON number`);
  }
  const text = JSON.stringify(value);
  if (text === undefined) throw new TypeError(`a tool's arguments must be JSON data, not ${typeof value}`);
  return text;
}

function callKey(n, name, args) {
  const digest = crypto.createHash('sha256').update(name + canonical(args), 'utf8').digest('hex');
  return `call:${n}:${digest.slice(0, 12)}`;
}

// structuredContent when present, else a single text block's text (parsed when it is JSON),
// else the list of content blocks.
function valueOf(result) {
  if (result.structuredContent !== undefined && result.structuredContent !== null) {
    return result.structuredContent;
  }
  const blocks = result.content || [];
  if (blocks.length === 1 && blocks[0] && blocks[0].type === 'text') {
    const text = blocks[0].text ?? '';
    try {
      return JSON.parse(text);
    } catch {
      return text;
    }
  }
  return blocks.slice();
}

function declared() {
  const told = process.env.KILN_CALLS;
  if (told === undefined) return null;
  const names = JSON.parse(told);
  return Array.isArray(names) ? names.map(String) : [];
}

function refused(name, why) {
  return new ToolCallError(name, {content: [{type: 'text', text: why}], isError: true});
}

function ask(calls) {
  const fd = process.env.KILN_TALK_FD;
  if (!fd) {
    throw new Error(`cannot call '${calls[0].name}': this is not a Kiln run (no KILN_TALK_FD); tools call tools only when Kiln runs them`);
  }
  const lines = calls.map(({key, name, args}) => JSON.stringify({ask: key, call: {name, arguments: args}}) + '\n');
  let data = Buffer.from(lines.join(''), 'utf8');
  while (data.length) data = data.subarray(fs.writeSync(Number(fd), data));
  process.exit(0);
}

let count = 0;
let answers = null; // read once: a run's answers never change

// Independent calls together, in one round: gather([[name, args], ...]) -> their results.
function gather(calls) {
  const planned = calls.map(([name, args]) => plan(name, args));
  if (answers === null) answers = JSON.parse(process.env.KILN_ANSWERS || '{}') || {};
  const missing = planned.filter(({key}) => !Object.prototype.hasOwnProperty.call(answers, key));
  if (missing.length) ask(missing);
  return planned.map(({key, name}) => resultOf(key, name, answers[key]));
}

function call(name, args) {
  return gather([[name, args]])[0];
}

function plan(name, args) {
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw new TypeError(`${JSON.stringify(name)} is not a tool name (${NAME.source})`);
  }
  args = args ?? {};
  if (typeof args !== 'object' || Array.isArray(args)) {
    throw new TypeError(`the arguments of '${name}' must be an object`);
  }
  const may = declared();
  if (may !== null && !may.includes(name)) {
    const list = may.length ? may.join(', ') : 'none: its manifest declares no calls';
    throw refused(name, `this tool may not call '${name}': it calls only the tools its manifest declares in "calls" (here: ${list})`);
  }
  count += 1;
  return {key: callKey(count, name, args), name, args: JSON.parse(canonical(args))};
}

function resultOf(key, name, result) {
  if (result === null || typeof result !== 'object') throw refused(name, `the answer to ${key} is not a tool result`);
  if (result.isError) throw new ToolCallError(name, result);
  return valueOf(result);
}

// tools.<name>(args), tools['<name>'](args), tools.call(name, args).
const tools = new Proxy(
  {call, gather},
  {
    get(target, prop) {
      if (prop === 'call') return call;
      if (prop === 'gather') return gather;
      // Not tools: what JavaScript itself asks an object for (`${tools}`, await, JSON).
      if (typeof prop !== 'string' || prop === 'then' || prop === 'toJSON') return undefined;
      if (prop in Object.prototype) return Reflect.get(target, prop);
      return (args) => call(prop, args);
    },
  },
);

module.exports = {tools, ToolCallError, callKey, canonical, valueOf};
