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
const { pathToFileURL } = require('node:url');
const nodeModule = require('node:module');

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

// The file a cell stands for: require() and import() resolve from the
// context's working directory (its node_modules, then NODE_PATH).
const cellPath = () => path.join(process.cwd(), '[cell]');

const sandbox = {
  require: nodeModule.createRequire(cellPath()),
  module: { exports: {} },
  process, Buffer, console,
  setTimeout, clearTimeout, setInterval, clearInterval, setImmediate, clearImmediate,
  queueMicrotask, structuredClone, fetch: globalThis.fetch, URL, URLSearchParams,
  TextEncoder, TextDecoder, AbortController, AbortSignal, Blob: globalThis.Blob,
  performance: globalThis.performance,
};
sandbox.exports = sandbox.module.exports;
sandbox.__dirname = process.cwd();
sandbox.__filename = cellPath();
const context = vm.createContext(sandbox);
vm.runInContext('globalThis.global = globalThis;', context);

// import() in a cell (and in the static imports rewritten into it) is
// answered here: node resolves the specifier as an ES module imported from
// the cwd (import.meta.resolve with a parent needs
// --experimental-import-meta-resolve), falling back to require's resolution,
// which also searches NODE_PATH. The callback itself needs
// --experimental-vm-modules. Both flags are set by airlock-envd.
let esmResolve = null;
const esmResolveReady = import('data:text/javascript,export default (s, p) => import.meta.resolve(s, p)')
  .then((m) => { esmResolve = m.default; }, () => {});
const isBuiltin = nodeModule.isBuiltin || ((s) => nodeModule.builtinModules.includes(s));

async function resolveFromCwd(specifier) {
  if (specifier.startsWith('node:') || isBuiltin(specifier) || /^(file|data):/.test(specifier)) return specifier;
  await esmResolveReady;
  const parent = cellPath();
  let first = null;
  if (esmResolve) {
    try { return String(await esmResolve(specifier, pathToFileURL(parent).href)); } catch (err) { first = err; }
  }
  try {
    return pathToFileURL(nodeModule.createRequire(parent).resolve(specifier)).href;
  } catch (err) {
    throw first || err;
  }
}

async function importModuleDynamically(specifier, _script, attributes) {
  const target = await resolveFromCwd(specifier);
  if (attributes && Object.keys(attributes).length) return import(target, { with: attributes, assert: attributes });
  return import(target);
}

function compile(code) {
  return new vm.Script(code, { filename: '[cell]', importModuleDynamically });
}

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

// Options for a cell that is not a plain script: top-level await, and
// import/export declarations (which only a module may hold).
const relaxed = { ecmaVersion: 'latest', sourceType: 'script', allowAwaitOutsideFunction: true, allowImportExportEverywhere: true };

// Parses a cell that needs the rewrite below: it has top-level await or
// import/export declarations. Returns { ast } for such a cell, { error } (the
// parser's SyntaxError) if it does not parse even so, and {} for a plain
// script or when acorn is missing.
function planCell(code) {
  if (!acorn || !/\b(await|import|export)\b/.test(code)) return {};
  try { acorn.parse(code, { ecmaVersion: 'latest', sourceType: 'script' }); return {}; } catch (_) { /* fallthrough */ }
  try { return { ast: acorn.parse(code, relaxed) }; } catch (err) { return { error: err }; }
}

// The statements that bind the names of a static import declaration, run at
// the start of the cell (imports are hoisted): the module comes from import(),
// so resolution, caching and the namespace are node's own.
function importBindings(code, node, i, names) {
  const m = '__airlock_import_' + i;
  let out = 'const ' + m + ' = await import(' + code.slice(node.source.start, node.source.end) + ');';
  for (const sp of node.specifiers) {
    names.push(sp.local.name);
    if (sp.type === 'ImportNamespaceSpecifier') {
      out += ' ' + sp.local.name + ' = ' + m + ';';
    } else {
      const name = sp.type === 'ImportDefaultSpecifier' ? 'default' : sp.imported.type === 'Identifier' ? sp.imported.name : sp.imported.value;
      const key = JSON.stringify(name);
      const msg = JSON.stringify('The requested module ' + JSON.stringify(node.source.value).replace(/^"|"$/g, "'") +
        ' does not provide an export named ' + key.replace(/^"|"$/g, "'"));
      out += ' if (!(' + key + ' in ' + m + ')) throw new SyntaxError(' + msg + ');';
      out += ' ' + sp.local.name + ' = ' + m + '[' + key + '];';
    }
  }
  return out;
}

// Rewrites a cell (parsed by planCell) into an async function whose
// top-level declarations and imports become assignments to context globals,
// so that they survive into the next cell; the last expression becomes the
// return value.
function rewriteAsync(code, ast) {
  const names = [];
  const edits = [];
  let prologue = '';
  let imports = 0;
  for (const node of ast.body) {
    let decl = node;
    if (node.type === 'ImportDeclaration') {
      prologue += importBindings(code, node, imports++, names) + ' ';
      edits.push({ start: node.start, end: node.end, text: ';' });
      continue;
    }
    if (node.type === 'ExportNamedDeclaration' && !node.source) {
      // `export` has no meaning in a cell: its declaration is kept,
      // an export list is dropped.
      if (!node.declaration) { edits.push({ start: node.start, end: node.end, text: ';' }); continue; }
      decl = node.declaration;
    }
    if (decl.type === 'VariableDeclaration') {
      const parts = [];
      for (const d of decl.declarations) {
        declaredNames(d.id, names);
        if (d.init) parts.push('(' + code.slice(d.id.start, d.id.end) + ' = ' + code.slice(d.init.start, d.init.end) + ')');
      }
      edits.push({ start: node.start, end: node.end, text: parts.length ? 'void (' + parts.join(', ') + ');' : ';' });
    } else if (decl.type === 'FunctionDeclaration' || decl.type === 'ClassDeclaration') {
      names.push(decl.id.name);
      edits.push({ start: node.start, end: node.end, text: decl.id.name + ' = ' + code.slice(decl.start, decl.end) + ';' });
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
  // The prologue shares the wrapper's first line: the cell's line numbers
  // stay those of the wrapper.
  return '(async () => { ' + prologue + '\n' + out + '\n})()';
}

// TypeScript keeps a cell's import declarations (even those only its later
// cells use; type-only imports go) for the rewrite above; a cell without
// them compiles as a script, as before.
function tsOptions(t, code) {
  const o = { target: t.ScriptTarget.ES2022, module: t.ModuleKind.None, removeComments: false };
  if (!/\bimport\b/.test(code)) return o;
  o.module = t.ModuleKind.ESNext;
  if (parseInt(t.versionMajorMinor, 10) >= 5) o.verbatimModuleSyntax = true;
  else Object.assign(o, { preserveValueImports: true, isolatedModules: true });
  return o;
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
      if (t) code = t.transpile(code, tsOptions(t, code));
    }
    let value;
    const plan = planCell(code);
    if (plan.ast) {
      value = await compile(rewriteAsync(code, plan.ast)).runInContext(context, { breakOnSigint: true });
    } else {
      try {
        value = compile(code).runInContext(context, { displayErrors: false, breakOnSigint: true });
      } catch (err) {
        // V8 names the first import declaration; the parser names the
        // actual mistake in a cell that has imports.
        if (plan.error && err instanceof SyntaxError && /import statement outside a module/.test(err.message)) {
          throw Object.assign(new SyntaxError(plan.error.message), { stack: 'SyntaxError: ' + plan.error.message + '\n    at [cell]' });
        }
        throw err;
      }
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
