// R and Java contexts of code-interpreter-v1 (issue 26 item 7) through the
// official @e2b/code-interpreter SDK, as E2B's own template serves them:
// runCode(code, { language: 'r' | 'java' }) and createCodeContext({ language }).
// R runs on IRkernel (Jupyter protocol: text/plain results, plots as PNG,
// errors named by the kernel); Java on a JShell runner (expression values as
// results, exceptions by class name, env vars as system properties like E2B's
// Java kernel). Both stream stdout/stderr, take per-execution env vars and are
// interrupted (state kept) when a client times out.
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'
import { TimeoutError } from 'e2b'
import { uniq, TEST_TIMEOUT } from './helpers.mjs'

const tag = `interpreter-r-java-${uniq()}`
const created = []
after(() => Promise.allSettled(created.map((id) => Sandbox.kill(id))))

async function withSandbox (fn, opts = {}) {
  const sbx = await Sandbox.create({ timeoutMs: 300_000, ...opts, metadata: { 'e2e-suite': tag } })
  created.push(sbx.sandboxId)
  try {
    return await fn(sbx)
  } finally {
    await sbx.kill().catch(() => {})
  }
}

/** Runs code and asserts it produced no error; returns the execution. */
async function ok (sbx, code, opts = {}) {
  const ex = await sbx.runCode(code, { timeoutMs: 180_000, ...opts })
  assert.equal(ex.error, undefined, `unexpected error from ${JSON.stringify(code)}: ${JSON.stringify(ex.error)}`)
  return ex
}

// IRkernel shows a visible value as display_data (not execute_result), so
// on E2B as here it is results[0].text with isMainResult false, and
// execution.text (the main result's) is undefined.
const rtext = (ex) => ex.results[0]?.text

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
const T = TEST_TIMEOUT * 2

describe('R contexts', { timeout: T * 4 }, () => {
  it('keep state, stream output, show results and plots, and report errors', { timeout: T }, async () => {
    await withSandbox(async (sbx) => {
      let t = Date.now()
      await ok(sbx, 'x <- 41', { language: 'r' })
      console.log(`# R: first cell (kernel start included) ${Date.now() - t} ms`)
      t = Date.now()
      let ex = await ok(sbx, 'x + 1', { language: 'R' })
      console.log(`# R: second cell ${Date.now() - t} ms`)
      assert.equal(rtext(ex), '[1] 42')
      assert.equal(ex.results.length, 1)
      assert.equal(ex.results[0].isMainResult, false)
      assert.equal(ex.executionCount, 2)

      const out = []
      const err = []
      ex = await ok(sbx, 'cat("hello from R\\n")\nmessage("to stderr")\ninvisible(NULL)', {
        language: 'r',
        onStdout: (m) => out.push(m.line),
        onStderr: (m) => err.push(m.line)
      })
      assert.equal(ex.logs.stdout.join(''), 'hello from R\n')
      // IRkernel sends message()'s line and then a newline of its own.
      assert.match(ex.logs.stderr.join(''), /^to stderr\n/)
      assert.equal(out.join(''), 'hello from R\n')
      assert.equal(err.join(''), ex.logs.stderr.join(''))
      assert.equal(ex.results.length, 0)

      ex = await ok(sbx, 'data.frame(a = 1:2, b = c("x", "y"))', { language: 'r' })
      assert.match(rtext(ex), /a b\n1 1 x\n2 2 y/)
      assert.match(ex.results[0].html ?? '', /<table/)

      ex = await ok(sbx, 'plot(1:10, main = "squares")', { language: 'r' })
      const png = ex.results.find((r) => r.png)
      assert.ok(png, `no PNG among ${JSON.stringify(ex.results.map((r) => Object.keys(r)))}`)
      assert.deepEqual(Buffer.from(png.png, 'base64').subarray(0, 8), PNG_SIGNATURE)

      ex = await sbx.runCode('stop("boom")', { language: 'r', timeoutMs: 60_000 })
      assert.ok(ex.error, 'stop() gave no error')
      assert.equal(ex.error.name, 'ERROR')
      assert.match(ex.error.value, /boom/)
      assert.equal(typeof ex.error.traceback, 'string')
      // The context survives the error.
      assert.equal(rtext(await ok(sbx, 'x', { language: 'r' })), '[1] 41')
    })
  })

  it('take sandbox and per-execution env vars, contexts with a cwd, and interrupts', { timeout: T }, async () => {
    await withSandbox(async (sbx) => {
      assert.equal(rtext(await ok(sbx, 'Sys.getenv("TEST_ENV_VAR")', { language: 'r' })), '[1] "supertest"')
      let ex = await ok(sbx, 'Sys.getenv("FOO")', { language: 'r', envs: { FOO: 'bar' } })
      assert.equal(rtext(ex), '[1] "bar"')
      ex = await ok(sbx, 'Sys.getenv("FOO", unset = "default")', { language: 'r' })
      assert.equal(rtext(ex), '[1] "default"')
      ex = await ok(sbx, 'Sys.getenv("TEST_ENV_VAR")', { language: 'r', envs: { TEST_ENV_VAR: 'overwrite' } })
      assert.equal(rtext(ex), '[1] "overwrite"')
      assert.equal(rtext(await ok(sbx, 'Sys.getenv("TEST_ENV_VAR")', { language: 'r' })), '[1] "supertest"')

      const ctx = await sbx.createCodeContext({ language: 'r', cwd: '/tmp' })
      assert.equal(ctx.language, 'r')
      assert.equal(ctx.cwd, '/tmp')
      assert.equal(rtext(await ok(sbx, 'getwd()', { context: ctx })), '[1] "/tmp"')
      const listed = await sbx.listCodeContexts()
      assert.ok(listed.some((c) => c.id === ctx.id && c.language === 'r'), JSON.stringify(listed))

      await ok(sbx, 'kept <- 7', { context: ctx })
      const start = Date.now()
      await assert.rejects(sbx.runCode('while (TRUE) {}', { context: ctx, timeoutMs: 3000 }), TimeoutError)
      const t1 = Date.now()
      assert.equal(rtext(await ok(sbx, 'kept', { context: ctx, timeoutMs: 60_000 })), '[1] 7')
      console.log(`# R interrupt: timeout after ${t1 - start} ms, next cell (state kept) in ${Date.now() - t1} ms`)
    }, { envs: { TEST_ENV_VAR: 'supertest' } })
  })
})

describe('Java contexts', { timeout: T * 4 }, () => {
  it('keep state, stream output, show values and report exceptions and compile errors', { timeout: T }, async () => {
    await withSandbox(async (sbx) => {
      let t = Date.now()
      await ok(sbx, 'int x = 41;', { language: 'java' })
      console.log(`# Java: first cell (JVM start included) ${Date.now() - t} ms`)
      t = Date.now()
      let ex = await ok(sbx, 'x + 1', { language: 'java' })
      console.log(`# Java: second cell ${Date.now() - t} ms`)
      assert.equal(ex.text, '42')
      assert.equal(ex.results.length, 1)
      assert.equal(ex.results[0].isMainResult, true)

      // Several statements and declarations in one cell; the last
      // expression is the result; a String is shown as itself.
      ex = await ok(sbx, 'String greet(String n) { return "hi " + n; }\nList<Integer> l = new ArrayList<>(List.of(1, 2));\nl.add(3);\ngreet("\\"R\\"\\tand Java")', { language: 'java' })
      assert.equal(ex.text, 'hi "R"\tand Java')

      const out = []
      ex = await ok(sbx, 'System.out.println("hello from Java");\nSystem.err.println("to stderr");', {
        language: 'java',
        onStdout: (m) => out.push(m.line)
      })
      assert.equal(ex.logs.stdout.join(''), 'hello from Java\n')
      assert.equal(ex.logs.stderr.join(''), 'to stderr\n')
      assert.equal(out.join(''), 'hello from Java\n')
      assert.equal(ex.results.length, 0)

      ex = await sbx.runCode('int d = 0;\nx / d', { language: 'java', timeoutMs: 60_000 })
      assert.ok(ex.error, 'division by zero gave no error')
      assert.equal(ex.error.name, 'java.lang.ArithmeticException')
      assert.equal(ex.error.value, '/ by zero')
      assert.match(ex.error.traceback, /java\.lang\.ArithmeticException: \/ by zero\n\tat /)

      ex = await sbx.runCode('int y = "not a number";', { language: 'java', timeoutMs: 60_000 })
      assert.ok(ex.error, 'a type error compiled')
      assert.equal(ex.error.name, 'CompilationException')
      assert.match(ex.error.value, /incompatible types/)
      assert.match(ex.error.traceback, /\^/)

      // Output before an exception is streamed; the context survives.
      ex = await sbx.runCode('System.out.println("before");\nthrow new IllegalStateException("after");', { language: 'java', timeoutMs: 60_000 })
      assert.equal(ex.logs.stdout.join(''), 'before\n')
      assert.equal(ex.error?.name, 'java.lang.IllegalStateException')
      assert.equal((await ok(sbx, 'x', { language: 'java' })).text, '41')
    })
  })

  it('take sandbox and per-execution env vars, contexts with a cwd, and interrupts', { timeout: T }, async () => {
    await withSandbox(async (sbx) => {
      // E2B's Java kernel reads env vars as system properties; System.getenv
      // sees them too.
      assert.equal((await ok(sbx, 'System.getProperty("TEST_ENV_VAR")', { language: 'java' })).text, 'supertest')
      let ex = await ok(sbx, 'System.getProperty("FOO") + "/" + System.getenv("FOO")', { language: 'java', envs: { FOO: 'bar' } })
      assert.equal(ex.text, 'bar/bar')
      ex = await ok(sbx, 'System.getProperty("FOO", "default") + "/" + System.getenv("FOO")', { language: 'java' })
      assert.equal(ex.text, 'default/null')
      ex = await ok(sbx, 'System.getProperty("TEST_ENV_VAR")', { language: 'java', envs: { TEST_ENV_VAR: 'overwrite' } })
      assert.equal(ex.text, 'overwrite')
      assert.equal((await ok(sbx, 'System.getProperty("TEST_ENV_VAR")', { language: 'java' })).text, 'supertest')

      const ctx = await sbx.createCodeContext({ language: 'java', cwd: '/tmp' })
      assert.equal(ctx.language, 'java')
      assert.equal((await ok(sbx, 'new java.io.File(".").getCanonicalPath()', { context: ctx })).text, '/tmp')

      await ok(sbx, 'int kept = 7;', { context: ctx })
      const start = Date.now()
      await assert.rejects(sbx.runCode('while (true) {}', { context: ctx, timeoutMs: 3000 }), TimeoutError)
      const t1 = Date.now()
      assert.equal((await ok(sbx, 'kept', { context: ctx, timeoutMs: 60_000 })).text, '7')
      console.log(`# Java interrupt: timeout after ${t1 - start} ms, next cell (state kept) in ${Date.now() - t1} ms`)
    }, { envs: { TEST_ENV_VAR: 'supertest' } })
  })
})

describe('R and Java contexts across a pause', { timeout: T * 2 }, () => {
  // One language at a time: an R and a Java kernel next to the default
  // Python and JavaScript ones do not fit in the default 576 MiB together
  // (the OOM guard kills one; docs/DECISIONS.md, issue 26).
  it('keep their state when the sandbox is paused and resumed', { timeout: T }, async () => {
    await withSandbox(async (sbx) => {
      await ok(sbx, 'kept_r <- 5', { language: 'r' })
      assert.equal(await sbx.betaPause(), true)
      const resumed = await Sandbox.connect(sbx.sandboxId)
      assert.equal(rtext(await ok(resumed, 'kept_r + 1', { language: 'r' })), '[1] 6')
    })
    await withSandbox(async (sbx) => {
      await ok(sbx, 'int keptJava = 6;', { language: 'java' })
      assert.equal(await sbx.betaPause(), true)
      const resumed = await Sandbox.connect(sbx.sandboxId)
      assert.equal((await ok(resumed, 'keptJava + 1', { language: 'java' })).text, '7')
    })
  })
})
