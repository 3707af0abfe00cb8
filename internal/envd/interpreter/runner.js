// Airlock JavaScript context runner. Started by airlock-envd; one process per
// context. Requests arrive as JSON lines on stdin; user output goes to fd 1/2;
// replies go to fd 3 as JSON lines. After each execution a sync marker is
// written to stdout and stderr so the agent knows both streams are drained.
'use strict';
const vm = require('node:vm');
const fs = require('node:fs');
const util = require('node:util');
const readline = require('node:readline');
const path = require('node:path');

let acorn = null;
try { acorn = require('acorn'); } catch (_) {
  try { acorn = require('/usr/share/nodejs/acorn'); } catch (_) { acorn = null; }
}
let ts = null;
function typescript() {
  if (ts === null) {
    try { ts = require('typescript'); } catch (_) {
      try { ts = require('/usr/share/nodejs/typescript'); } catch (_) { ts = false; }
    }
  }
  return ts || null;
}

const SYNC = process.env.AIRLOCK_SYNC || '\u0001AIRLOCK_SYNC\u0001';
const reply = (obj) => fs.writeSync(3, JSON.stringify(obj) + '\n');

const sandbox = {
  require: require,
  module: { exports: {} },
  process, Buffer, console,
  setTimeout, clearTimeout, setInterval, clearInterval, setImmediate, clearImmediate,
  queueMicrotask, structuredClone, fetch: globalThis.fetch, URL, URLSearchParams,
  TextEncoder, TextDecoder, AbortController, AbortSignal, Blob: globalThis.Blob,
  performance: globalThis.performance,
};
sandbox.exports = sandbox.module.exports;
sandbox.__dirname = process.cwd();
sandbox.__filename = path.join(process.cwd(), '[cell]');
const context = vm.createContext(sandbox);
vm.runInContext('globalThis.global = globalThis;', context);

function declaredNames(pattern, out) {
  if (!pattern) return;
  switch (pattern.type) {
    case 'Identifier': out.push(pattern.name); break;
    case 'ObjectPattern': for (const p of pattern.properties) declaredNames(p.type === 'RestElement' ? p.argument : p.value, out); break;
    case 'ArrayPattern': for (const e of pattern.elements) declaredNames(e, out); break;
    case 'RestElement': declaredNames(pattern.argument, out); break;
    case 'AssignmentPattern': declaredNames(pattern.left, out); break;
  }
}

// Rewrites a cell with top-level await into an async function whose
// top-level declarations become assignments to context globals, so that they
// survive into the next cell; the last expression becomes the return value.
function rewriteAsync(code) {
  const ast = acorn.parse(code, { ecmaVersion: 'latest', sourceType: 'script', allowAwaitOutsideFunction: true, allowReturnOutsideFunction: true });
  const names = [];
  const edits = [];
  for (const node of ast.body) {
    if (node.type === 'VariableDeclaration') {
      const parts = [];
      for (const d of node.declarations) {
        declaredNames(d.id, names);
        if (d.init) parts.push('(' + code.slice(d.id.start, d.id.end) + ' = ' + code.slice(d.init.start, d.init.end) + ')');
      }
      edits.push({ start: node.start, end: node.end, text: parts.length ? 'void (' + parts.join(', ') + ');' : ';' });
    } else if (node.type === 'FunctionDeclaration' || node.type === 'ClassDeclaration') {
      names.push(node.id.name);
      edits.push({ start: node.start, end: node.end, text: node.id.name + ' = ' + code.slice(node.start, node.end) + ';' });
    }
  }
  const last = ast.body[ast.body.length - 1];
  let out = '';
  let pos = 0;
  for (const e of edits) { out += code.slice(pos, e.start) + e.text; pos = e.end; }
  out += code.slice(pos);
  if (last && last.type === 'ExpressionStatement' && !edits.some((e) => e.start === last.start)) {
    // Replace the last expression statement with a return.
    const shift = out.length - code.length;
    const s = last.start + shift, e = last.end + shift;
    let expr = out.slice(s, e).replace(/;\s*$/, '');
    out = out.slice(0, s) + 'return (' + expr + ');' + out.slice(e);
  }
  for (const n of names) {
    if (!(n in context)) vm.runInContext('var ' + n + ';', context);
  }
  return '(async () => {\n' + out + '\n})()';
}

function hasTopLevelAwait(code) {
  if (!acorn || !/\bawait\b/.test(code)) return false;
  try { acorn.parse(code, { ecmaVersion: 'latest', sourceType: 'script' }); return false; } catch (_) { /* fallthrough */ }
  try { acorn.parse(code, { ecmaVersion: 'latest', sourceType: 'script', allowAwaitOutsideFunction: true }); return true; } catch (_) { return false; }
}

function formatValue(v) {
  if (typeof v === 'string') return v;
  return util.inspect(v, { depth: 4, colors: false, maxArrayLength: 200, breakLength: 100 });
}

function finish(id, obj) {
  try { fs.writeSync(1, SYNC); } catch (_) {}
  try { fs.writeSync(2, SYNC); } catch (_) {}
  reply(Object.assign({ id }, obj));
}

async function execute(req) {
  const saved = {};
  for (const [k, v] of Object.entries(req.env || {})) { saved[k] = process.env[k]; process.env[k] = v; }
  let code = req.code;
  try {
    if (req.typescript) {
      const t = typescript();
      if (t) code = t.transpile(code, { target: t.ScriptTarget.ES2022, module: t.ModuleKind.None, removeComments: false });
    }
    let value;
    if (hasTopLevelAwait(code)) {
      value = await vm.runInContext(rewriteAsync(code), context, { filename: '[cell]', breakOnSigint: true });
    } else {
      value = vm.runInContext(code, context, { filename: '[cell]', displayErrors: false, breakOnSigint: true });
      if (value && typeof value.then === 'function' && req.awaitPromises !== false) value = await value;
    }
    const out = { ok: true };
    if (value !== undefined) out.text = formatValue(value);
    finish(req.id, out);
  } catch (err) {
    const isErr = err && typeof err === 'object';
    finish(req.id, {
      ok: false,
      name: isErr && err.name ? String(err.name) : 'Error',
      value: isErr && 'message' in err ? String(err.message) : String(err),
      traceback: isErr && err.stack ? String(err.stack) : String(err),
    });
  } finally {
    for (const [k, v] of Object.entries(saved)) { if (v === undefined) delete process.env[k]; else process.env[k] = v; }
  }
}

process.on('SIGINT', () => {});
process.on('uncaughtException', (err) => { try { fs.writeSync(2, String(err && err.stack || err) + '\n'); } catch (_) {} });
process.on('unhandledRejection', (err) => { try { fs.writeSync(2, 'Unhandled rejection: ' + String(err && err.stack || err) + '\n'); } catch (_) {} });

const queue = [];
let busy = false;
async function pump() {
  if (busy) return;
  busy = true;
  while (queue.length) await execute(queue.shift());
  busy = false;
}
const rl = readline.createInterface({ input: process.stdin });
rl.on('line', (line) => {
  if (!line.trim()) return;
  let req;
  try { req = JSON.parse(line); } catch (_) { return; }
  queue.push(req);
  pump();
});
rl.on('close', () => process.exit(0));
reply({ ready: true });
