// Package interpreter is the stateful code-interpreter service of the agent
// (port 49999, spec §4): contexts for Python (an ipykernel process, driven
// over a direct pipe into its shell — fastpath.go — with the Jupyter
// protocol over ZeroMQ for the cells that need it), JavaScript/TypeScript (a
// persistent Node.js vm context), Bash (a persistent shell), R (IRkernel over
// the same Jupyter client) and Java (a JShell runner), streaming results as
// NDJSON.
//
// Python cells: the agent writes each cell as a JSON line to a pipe that the
// kernel's own event loop (ipykernel's main thread) watches; the cell runs on
// the kernel's ZMQInteractiveShell with its formatters, magics, hooks,
// matplotlib integration, SIGINT handling and execution count, and its
// outputs are written by that thread straight to a second pipe as they come
// (fastpath.py); the count, and with the default interactivity the result,
// wait for the cell's next record, so a quick cell's records leave in one
// pipe write (each write is a wake-up of the agent, a Sentry round trip under
// gVisor). Output in flight is bounded: a stream record holds at most 256 Ki
// characters, and a cell's stdout/stderr buffer is sent from the writing
// thread as soon as it holds that much, so a cell printing 50 MB neither
// holds it all in memory nor sends one giant message, and a slow client slows
// the writer. A write larger than PIPE_BUF is made with SIGINT held, so an
// interrupt never tears a line. ipykernel's stream flush timer (0.2 s after
// a write, in the IOPub thread) is routed through the channel for good: a
// timer armed in one cell that fires while the next one runs sends what that
// cell printed as its stream record, never over ZeroMQ where no client
// listens; between cells it takes ipykernel's own path. A cell that needs ipykernel's asyncio runner (top-level
// await) is answered "fallback" and runs as a Jupyter execute_request over
// ZeroMQ in the same kernel; so does everything when the channel could not be
// installed. MIME bundles are decoded keeping each number's literal (a float
// 1.0 stays 1.0 on the wire).
//
// The rest of this comment is how the package works now (moved here from
// docs/ARCHITECTURE.md, which keeps the map).
//
// # Code interpreter (port 49999)
//
// `POST /execute` resolves a context (explicit id, the language's default context, or the default
// Python context), serializes executions per context, streams NDJSON records (stdout/stderr with
// timestamps, results with MIME fields mapped to E2B keys, errors, execution counts, keepalives
// every 5 s of silence) and always ends with `end_of_execution`. Lines are flushed together (a line
// waits at most 2 ms; a quick cell's whole answer is one write). A dropped client connection
// cancels the request context, which interrupts the kernel (SIGINT; a runner that does not stop
// within a few seconds is replaced). A kernel that dies mid-execution is reported as
// `ContextRestarting` (with its signal) and restarted; one killed for memory — by the agent's OOM
// guard (gVisor, `oomguard.KilledByGuard`) or by the guest kernel's OOM killer (microVM: "Killed
// process <pid>" in the kernel log) — as `OutOfMemoryError`; the
// sandbox, its other contexts and files live on (e2e on both runtimes). Kernels (Python, JavaScript, Bash, R, Java) run as root, as E2B's interpreter does in `code-interpreter-v1`:
// a context may use any cwd (`/root` too) and files written from code belong to root. The default cwd
// is the default user's home (`/home/user`); `HOME` is `/root`. A cwd that is not an absolute path to
// an existing directory answers 400 with the reason (`POST /contexts`). A sandbox holds at most 32
// contexts (`interpreter.DefaultMaxContexts`, the default ones included): `POST /contexts` beyond that
// answers 429 naming the cap; port 49999 takes no access token on `/contexts` (E2B's protocol: the
// SDKs send none there), so the cap bounds what anyone who reaches a public sandbox can start; a
// sandbox whose contexts must stay private is created with `allowPublicTraffic: false` (its traffic
// token is then required on 49999, and the SDK sends it).
// The default Python and JavaScript contexts are registered (listed, with their ids) before port 49999
// accepts a request. The Python kernel starts in the background; node, for the JavaScript context,
// starts on that context's first use (an execution or a restart; ~0.3 s, with the sandbox env vars
// of that moment), so a sandbox that never runs JavaScript carries no node (issue 24, ~13 MiB). An
// execution waits for its kernel, and a kernel that fails to start is unlisted (the next use of the
// language tries again). The warm-up ends with `gc.collect()` and glibc's `malloc_trim(0)` in the
// kernel (`trimCode`), and the agent hands its free Go heap back before a checkpoint
// (internal/envd/freeze), so a boot snapshot neither saves nor restores those free pages. So
// `GET /contexts` right after create lists both, whatever the create's options (a cold boot too).
// `GET /contexts` lists contexts in creation order: the default
// Python and JavaScript contexts first, then the user's (each context carries a sequence number). The
// daemon warms a template's default Python context before its boot snapshot with `"silent": true`
// executions (an Airlock extension of `/execute`: Jupyter's silent `execute_request`, no results, the
// execution count does not advance), so the user's first cell reports `execution_count` 1 whether the
// sandbox came from the snapshot, the pool or a cold boot. Sandbox env vars set by `/init` after a context started are
// applied to it before its next execution; per-execution `env_vars` are set and restored around
// the cell.
//
// # The warm-up (warmup.go), the template's choice
//
// A new Python kernel first runs a silent warm-up (before any cell: `awaitWarm`), then the trim
// (`trimCode`) as a second request (also when there is no warm-up). The agent reads the warm-up
// once at start from `/etc/airlock/interpreter-warmup.py` in the template's root filesystem
// (`WarmupFile`, `LoadWarmup`): no file = `DefaultWarmup` (numpy, pandas, matplotlib.pyplot: the
// first `import pandas` is free; ~48 MiB of host memory in each idle sandbox, bench/README.md),
// empty or only comments = none, other text = that IPython cell; unreadable or over 64 KiB = the
// default, logged. A boot snapshot holds what it loaded. A warm-up whose reply is an error is
// logged (`interpreter warm-up failed`) and its output dropped, so the first cell is still cell 1
// with no error; a kernel that dies during its warm-up is restarted without it (logged), once.
//
// # R and Java contexts (internal/envd/interpreter/lang_r.go, lang_java.go)
//
// `language: "r"` runs Debian's IRkernel (`R -e 'IRkernel::main()'`) through the same ZeroMQ Jupyter
// client as ipykernel (a `kernelFlavor`: its command and its env-var code, `Sys.setenv` saved and
// restored around a cell), so results, plots (`image/png`), errors (`ERROR` + traceback) and
// interrupts (SIGINT) are IRkernel's, as in E2B's template. `language: "java"` runs one JVM per context
// with `java_runner.java` (a single-file program) driving a JShell on its local execution engine:
// cells are split into snippets, the last expression's value is the result (a `String` unquoted),
// exceptions come back named by class with their stack, compile errors as `CompilationException`
// with the diagnostics, SIGINT stops the cell (`JShell.stop`) and keeps the state. Env vars are
// system properties (E2B's Java kernel reads them with `System.getProperty`) and, per execution, also
// `System.getenv` (the JDK's environment map, opened with `--add-opens`). Neither starts by default;
// the first cell of the language starts its kernel. Cost and the choice of template: DECISIONS.md
// (2026-11-28, issue 26).
//
// # JavaScript and TypeScript cells: ES modules (internal/envd/interpreter/runner.js)
//
// One Node process per context (`node --no-warnings --experimental-vm-modules
// --experimental-import-meta-resolve airlock-js-runner.js`); cells run as `vm.Script`s in one persistent
// `vm` context. Checked against Debian 12's node 18.20 (the template's) and node 20.
//
//   - **Plain cells** run as scripts, as before. A cell that does not parse as a script but does with
//     acorn's `allowAwaitOutsideFunction` + `allowImportExportEverywhere` (top-level `await`, `import`/
//     `export` declarations) is rewritten into `(async () => { … })()`: top-level declarations become
//     assignments to context globals (so they outlive the cell), the last expression is returned.
//
//   - **Static imports** are hoisted to the start of that function as `const m = await import(spec)`
//     plus one assignment per binding: default (`m.default`), named (`m[name]`, with Node's own
//     `SyntaxError` "The requested module 'x' does not provide an export named 'y'" when missing),
//     namespace (`m`), side-effect only (no binding). Bindings are context globals like the other
//     declarations: usable in later cells, but copies, not live bindings. `export` in front of a
//     declaration is dropped; an `export { … }` list is ignored.
//
//   - **`import()`** (a cell's own, the rewritten ones, and those in functions a cell defined, `eval` and
//     `new Function` included) reaches `vm.Script`'s `importModuleDynamically` (needs
//     `--experimental-vm-modules` in node 18 and 20), which answers with the runner's own `import()`
//     of the resolved specifier: node's module cache, CJS interop (default = `module.exports`, named
//     exports per cjs-module-lexer) and import attributes are node's. Resolution: builtins (`fs`,
//     `node:fs`), `file:` and `data:` as given; anything else by `import.meta.resolve(spec,
//     <cwd>/[cell])` (the ESM resolver with the `import` condition, from the context's current cwd:
//     its `node_modules` upwards; the parent argument needs `--experimental-import-meta-resolve`),
//     falling back to `require.resolve` from the same place (which also searches `NODE_PATH`, where
//     Debian's `node-*` packages are). Neither found: the ESM resolver's `ERR_MODULE_NOT_FOUND`.
//
//   - **`require`** in cells is `createRequire(<cwd>/[cell])`: it resolves from the context's cwd (was
//     the runner file's directory), then `NODE_PATH`; `import` and `require` mix in one context.
//
//   - **Syntax errors** stay `SyntaxError` results. When V8 stops at the import ("Cannot use import
//     statement outside a module") because the cell has a real mistake elsewhere, acorn's message
//     (with line:column) is reported instead.
//
//   - **TypeScript** cells that contain `import` are transpiled with `module: ESNext` and
//     `preserveValueImports` + `isolatedModules` (TypeScript 4.8, Debian 12; `verbatimModuleSyntax`
//     on 5.x), so a value import used only by later cells is kept, `import type` is erased; the output
//     then takes the same rewrite. Other TS cells compile as before (`module: None`).
//
//   - Not supported: `import.meta` in a cell, `export default`, `export … from`; static import
//     attributes (`with { type: 'json' }`) where acorn (8.8 in Debian 12) does not parse them.
//
// # Rich results: DataFrame data, charts, PIL images (internal/envd/interpreter/display.py)
//
// The Python kernel is started by a launcher that loads `display.py` (embedded in the agent, written to
// the interpreter's state dir) into the kernel's shell before it serves: two IPython formatters and a
// PIL hook. A failure there is logged in the kernel log and the kernel runs without them.
//
//   - **`data`** (MIME `e2b/data`): a cell whose value is a pandas `DataFrame` returns `text`, `html` and
//     `data` = `{column: [values…]}` (`to_dict(orient="list")`; timestamps as ISO-8601 strings, NaN/NaT
//     as `null`, other non-JSON values as strings). Only DataFrames, and only if pandas is imported.
//
//   - **PIL**: `Image.save(path)` (a path, not a buffer) also displays the image: a `png` result, as
//     E2B's interpreter does. `show()` and a last-expression image already gave one.
//
//   - **`chart`** (MIME `e2b/chart`): every displayed matplotlib `Figure` (so `plt.show()`) returns its
//     `png` and a `chart` object shaped like the `@e2b/code-interpreter` SDK's types (`Chart`,
//     `ChartType`, `ScaleType`; keys exactly as E2B's, snake_case):
//
//   - every chart (`Chart`): `type`, `title` (`null` if none), `elements`;
//
//   - `Chart2D` (line, scatter, bar, box): also `x_label`, `y_label`, `x_unit`, `y_unit` (the text of a
//     ` (unit)` or `[unit]` in the label, else `null`);
//
//   - `PointChart` (`LineChart` `type: "line"`, `ScatterChart` `"scatter"`): also `x_ticks`/`y_ticks`
//     (numbers, ISO-8601 strings on a date axis), `x_tick_labels`/`y_tick_labels` (the drawn text),
//     `x_scale`/`y_scale` (`ScaleType`: `datetime` for a date axis, `categorical` for a string-category
//     axis, else matplotlib's scale name: `linear`, `log`, `symlog`, `logit`, `function`,
//     `functionlog`, `asinh`); `elements` are `PointData` `{label, points: [[x, y]…]}` (an unlabelled
//     line is `Line <n>`; dates as ISO strings);
//
//   - `BarChart` (`"bar"`): `elements` are `BarData` `{label, group, value}` (label: the tick label
//     under the bar, group: the container's label or `Group <n>`, value: the bar's number); for
//     horizontal bars `x_label`/`y_label` are swapped so `x_label` names the categories (as E2B);
//
//   - `PieChart` (`"pie"`): `PieData` `{label, angle (degrees), radius}`;
//
//   - `BoxAndWhiskerChart` (`"box_and_whisker"`): `BoxAndWhiskerData` `{label, min, first_quartile,
//     median, third_quartile, max, outliers[]}`, read from the boxes (patches or the default line
//     outlines), whiskers, medians and fliers, vertical or horizontal;
//
//   - `SuperChart` (`"superchart"`): a figure with several axes; `title` is the figure's suptitle,
//     `elements` are the charts of its axes;
//
//   - anything else (images, patches, mixed artists) is `{type: "unknown", title, elements: []}`, and
//     an extraction error gives the same: never a cell error. A figure without data has no `chart`.
//     Tick labels are read after `draw_without_rendering()` when matplotlib has not laid them out yet.
package interpreter
