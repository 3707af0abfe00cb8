// The stateful code interpreter (port 49999 of code-interpreter-v1
// sandboxes) through the official @e2b/code-interpreter SDK: state across
// cells and clients, pandas/matplotlib rich results, streaming, errors,
// contexts, per-execution env vars, interrupts, JS/TS/Bash, big output and
// kernel crashes.
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'
import { NotFoundError, TimeoutError } from 'e2b'
import { uniq, TEST_TIMEOUT } from './helpers.mjs'

// Sandboxes created here use the code-interpreter SDK's default template
// (code-interpreter-v1), which the `e2b` tracker in helpers.mjs cannot do.
const tag = `interpreter-${uniq()}`
const created = []
async function create (opts = {}) {
  const sbx = await Sandbox.create({
    timeoutMs: 300_000,
    ...opts,
    metadata: { 'e2e-suite': tag, ...(opts.metadata ?? {}) }
  })
  created.push(sbx.sandboxId)
  return sbx
}
after(() => Promise.allSettled(created.map((id) => Sandbox.kill(id))))

/** Creates a sandbox, runs fn(sbx) and kills the sandbox afterwards. */
async function withSandbox (fn, opts) {
  const sbx = await create(opts)
  try {
    return await fn(sbx)
  } finally {
    await sbx.kill().catch(() => {})
  }
}

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])

/** Runs code and asserts it produced no error; returns the execution. */
async function ok (sbx, code, opts = {}) {
  const ex = await sbx.runCode(code, { timeoutMs: 120_000, ...opts })
  assert.equal(ex.error, undefined, `unexpected error from ${JSON.stringify(code)}: ${JSON.stringify(ex.error)}`)
  return ex
}

const stdout = (ex) => ex.logs.stdout.join('')

describe('code interpreter', { timeout: TEST_TIMEOUT * 20 }, () => {
  it('keeps state across cells and across a reconnect from a second client', { timeout: TEST_TIMEOUT }, async () => {
    await withSandbox(async (sbx) => {
      await ok(sbx, 'x = 41\ndef inc(v):\n    return v + 1')
      const ex = await ok(sbx, 'inc(x)')
      assert.equal(ex.text, '42')
      assert.equal(ex.results.length, 1)
      assert.equal(ex.results[0].isMainResult, true)
      assert.equal(ex.executionCount, 2, `executionCount ${ex.executionCount}`)

      const other = await Sandbox.connect(sbx.sandboxId)
      assert.notEqual(other, sbx)
      const ex2 = await ok(other, 'x += 1\ninc(x)')
      assert.equal(ex2.text, '43')
      // …and the first client sees the second one's change.
      assert.equal((await ok(sbx, 'x')).text, '42')

      // IPython's input and output history work for the session (the
      // kernel keeps it in memory, not in a per-cell SQLite write).
      const hist = await ok(sbx, "print(In[2]); print(Out[2]); get_ipython().run_line_magic('history', '-n 3')")
      assert.match(stdout(hist), /^inc\(x\)$/m)
      assert.match(stdout(hist), /^42$/m)
      assert.match(stdout(hist), /^\s*3:\s*x \+= 1$/m)
    })
  })

  it('pandas reads an uploaded CSV and groups it', { timeout: TEST_TIMEOUT }, async () => {
    await withSandbox(async (sbx) => {
      const rows = ['city,amount']
      const want = { alpha: 0, beta: 0, gamma: 0 }
      const cities = Object.keys(want)
      for (let i = 0; i < 300; i++) {
        const city = cities[i % 3]
        rows.push(`${city},${i}`)
        want[city] += i
      }
      await sbx.files.write('/home/user/data.csv', rows.join('\n') + '\n')
      const ex = await ok(sbx, [
        'import pandas as pd',
        "df = pd.read_csv('/home/user/data.csv')",
        "g = df.groupby('city')['amount'].sum()",
        'for k, v in g.items():',
        "    print(f'{k}={v}')",
        "print('rows', len(df))"
      ].join('\n'))
      const out = stdout(ex)
      for (const [city, sum] of Object.entries(want)) {
        assert.match(out, new RegExp(`^${city}=${sum}$`, 'm'))
      }
      assert.match(out, /^rows 300$/m)
    })
  })

  it('matplotlib plt.show() returns a PNG result', { timeout: TEST_TIMEOUT }, async () => {
    await withSandbox(async (sbx) => {
      const ex = await ok(sbx, [
        'import matplotlib.pyplot as plt',
        'plt.plot([1, 2, 3], [4, 1, 9])',
        "plt.title('airlock')",
        'plt.show()'
      ].join('\n'))
      const pngs = ex.results.filter((r) => r.png)
      assert.equal(pngs.length, 1, `results: ${JSON.stringify(ex.results.map((r) => r.formats()))}`)
      const bytes = Buffer.from(pngs[0].png, 'base64')
      assert.ok(bytes.length > 1000, `png is ${bytes.length} bytes`)
      assert.deepEqual(bytes.subarray(0, 8), PNG_SIGNATURE)
      assert.equal(pngs[0].isMainResult, false)
    })
  })

  it('matplotlib figures also return chart data (E2B\'s Chart types)', { timeout: TEST_TIMEOUT }, async () => {
    await withSandbox(async (sbx) => {
      const chartOf = async (code) => {
        const ex = await ok(sbx, `import matplotlib.pyplot as plt\n${code}\nplt.show()`)
        const figs = ex.results.filter((r) => r.png)
        assert.equal(figs.length, 1, JSON.stringify(ex.results.map((r) => r.formats())))
        return figs[0].chart
      }
      let c = await chartOf("plt.plot([1, 2, 3], [4, 1, 9], label='temp')\nplt.title('Heat')\nplt.xlabel('Time (s)')\nplt.ylabel('Temperature [°C]')")
      assert.equal(c.type, 'line')
      assert.equal(c.title, 'Heat')
      assert.equal(c.x_label, 'Time (s)')
      assert.equal(c.x_unit, 's')
      assert.equal(c.y_unit, '°C')
      assert.equal(c.x_scale, 'linear')
      assert.equal(c.y_scale, 'linear')
      assert.deepEqual(c.elements, [{ label: 'temp', points: [[1, 4], [2, 1], [3, 9]] }])
      assert.ok(c.x_ticks.length > 0 && c.x_ticks.length === c.x_tick_labels.length)
      assert.ok(c.y_tick_labels.every((l) => typeof l === 'string'))

      c = await chartOf("import datetime\nplt.plot([datetime.date(2024, 1, d) for d in (1, 2, 3)], [1, 2, 3])\nplt.yscale('log')")
      assert.equal(c.x_scale, 'datetime')
      assert.equal(c.y_scale, 'log')
      assert.deepEqual(c.elements[0].points[0], ['2024-01-01', 1])
      assert.equal(c.elements[0].label, 'Line 0')
      assert.match(c.x_ticks[0], /^2024-01-0/)

      c = await chartOf("plt.plot(['a', 'b', 'c'], [3, 1, 2])")
      assert.equal(c.x_scale, 'categorical')
      assert.deepEqual(c.x_tick_labels, ['a', 'b', 'c'])

      c = await chartOf("plt.scatter([1, 2, 3], [2, 4, 6], label='pts')\nplt.xscale('symlog')")
      assert.equal(c.type, 'scatter')
      assert.equal(c.x_scale, 'symlog')
      assert.deepEqual(c.elements, [{ label: 'pts', points: [[1, 2], [2, 4], [3, 6]] }])

      c = await chartOf("plt.bar(['Author A', 'Author B'], [100, 200], label='Books Sold')\nplt.xlabel('Authors')\nplt.ylabel('Sold (k)')")
      assert.equal(c.type, 'bar')
      assert.equal(c.x_label, 'Authors')
      assert.equal(c.y_unit, 'k')
      assert.deepEqual(c.elements, [
        { label: 'Author A', group: 'Books Sold', value: 100 },
        { label: 'Author B', group: 'Books Sold', value: 200 }
      ])

      c = await chartOf("plt.pie([1, 1, 2], labels=['x', 'y', 'z'])\nplt.title('Share')")
      assert.equal(c.type, 'pie')
      assert.equal(c.title, 'Share')
      assert.deepEqual(c.elements, [
        { label: 'x', angle: 90, radius: 1 },
        { label: 'y', angle: 90, radius: 1 },
        { label: 'z', angle: 180, radius: 1 }
      ])

      c = await chartOf("plt.boxplot([[85, 90, 78, 92, 88], [95, 89, 76, 91, 84, 87, 20]], labels=['Class A', 'Class B'])\nplt.ylabel('Score')")
      assert.equal(c.type, 'box_and_whisker')
      assert.equal(c.y_label, 'Score')
      assert.deepEqual(c.elements[0], { label: 'Class A', min: 78, first_quartile: 85, median: 88, third_quartile: 90, max: 92, outliers: [] })
      assert.equal(c.elements[1].label, 'Class B')
      assert.deepEqual(c.elements[1].outliers, [20])

      c = await chartOf("fig, axs = plt.subplots(1, 2)\nfig.suptitle('Two')\naxs[0].plot([1, 2], [3, 4])\naxs[0].set_title('L')\naxs[1].scatter([1], [2])")
      assert.equal(c.type, 'superchart')
      assert.equal(c.title, 'Two')
      assert.deepEqual(c.elements.map((e) => [e.type, e.title]), [['line', 'L'], ['scatter', null]])

      // A plot it cannot read: unknown, with its title, no error.
      c = await chartOf("fig, ax = plt.subplots()\nax.add_patch(plt.Circle((0, 0), 1))\nax.plot([0, 1], [0, 1], 'o')\nax.set_title('Circle')")
      assert.equal(c.type, 'unknown')
      assert.equal(c.title, 'Circle')
      assert.ok(Array.isArray(c.elements))
    })
  })

  it('a DataFrame as the last expression yields html and text', { timeout: TEST_TIMEOUT }, async () => {
    await withSandbox(async (sbx) => {
      const ex = await ok(sbx, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
      assert.equal(ex.results.length, 1)
      const r = ex.results[0]
      assert.equal(r.isMainResult, true)
      assert.match(r.html, /<table/)
      assert.match(r.text, /a\s+b/)
      assert.match(r.text, /1\s+2\s+y/)
      assert.deepEqual(r.formats(), ['html', 'data'])
      // data: the frame as JSON, column → values (E2B's e2b/data).
      assert.deepEqual(r.data, { a: [1, 2], b: ['x', 'y'] })
      const ex2 = await ok(sbx, "pd.DataFrame({'when': pd.to_datetime(['2024-05-01', None]), 'v': [1.5, float('nan')]})")
      assert.deepEqual(ex2.results[0].data, { when: ['2024-05-01T00:00:00', null], v: [1.5, null] })
      // Other values have no data.
      assert.equal((await ok(sbx, '[1, 2]')).results[0].data, undefined)
    })
  })

  it('a PIL image gives a png result from show(), as the last expression and from save(path)', { timeout: TEST_TIMEOUT }, async () => {
    await withSandbox(async (sbx) => {
      await ok(sbx, "from PIL import Image\nimg = Image.new('RGB', (32, 16), 'blue')")
      for (const code of ['img.show()', 'img', "img.save('/tmp/blue.png')"]) {
        const ex = await ok(sbx, code)
        const pngs = ex.results.filter((r) => r.png)
        assert.equal(pngs.length, 1, `${code}: ${JSON.stringify(ex.results.map((r) => r.formats()))}`)
        assert.deepEqual(Buffer.from(pngs[0].png, 'base64').subarray(0, 8), PNG_SIGNATURE)
      }
      // save() still writes the file.
      assert.equal((await ok(sbx, "Image.open('/tmp/blue.png').size")).text, '(32, 16)')
    })
  })

  it('streams stdout before the cell ends', { timeout: TEST_TIMEOUT }, async () => {
    await withSandbox(async (sbx) => {
      await ok(sbx, '1') // let the kernel finish starting so timing measures the stream only
      const seen = []
      const start = Date.now()
      const ex = await ok(sbx, "import time\nprint('first', flush=True)\ntime.sleep(2)\nprint('second')", {
        onStdout: (m) => { seen.push({ at: Date.now(), line: m.line }) }
      })
      const end = Date.now()
      assert.ok(seen.length >= 2, `stdout callbacks: ${JSON.stringify(seen)}`)
      assert.equal(seen[0].line, 'first\n')
      assert.equal(seen.map((s) => s.line).join(''), 'first\nsecond\n')
      assert.equal(stdout(ex), 'first\nsecond\n')
      const gap = end - seen[0].at
      console.log(`# streaming: first stdout after ${seen[0].at - start} ms, cell ended ${gap} ms later`)
      assert.ok(gap >= 1500, `first stdout arrived only ${gap} ms before the end`)
    })
  })

  it('reports Python errors with name, value and traceback', { timeout: TEST_TIMEOUT }, async () => {
    await withSandbox(async (sbx) => {
      let ex = await sbx.runCode('1 / 0')
      assert.equal(ex.error.name, 'ZeroDivisionError')
      assert.equal(ex.error.value, 'division by zero')
      assert.match(ex.error.traceback, /ZeroDivisionError/)
      assert.equal(ex.results.length, 0)

      let onError
      ex = await sbx.runCode('def broken(:\n    pass', { onError: (e) => { onError = e } })
      assert.equal(ex.error.name, 'SyntaxError')
      assert.ok(ex.error.value.length > 0)
      assert.match(ex.error.traceback, /SyntaxError/)
      assert.equal(onError?.name, 'SyntaxError')

      ex = await sbx.runCode("print('before')\nundefined_name_xyz")
      assert.equal(ex.error.name, 'NameError')
      assert.match(ex.error.value, /name 'undefined_name_xyz' is not defined/)
      assert.match(ex.error.traceback, /undefined_name_xyz/)
      assert.equal(stdout(ex), 'before\n')

      // An error does not poison the context.
      assert.equal((await ok(sbx, '6 * 7')).text, '42')
    })
  })

  it('contexts are isolated; restart clears state; remove and list work', { timeout: TEST_TIMEOUT }, async () => {
    await withSandbox(async (sbx) => {
      const c1 = await sbx.createCodeContext()
      const c2 = await sbx.createCodeContext({ language: 'python', cwd: '/tmp' })
      assert.equal(c1.language, 'python')
      assert.equal(c1.cwd, '/home/user')
      assert.equal(c2.cwd, '/tmp')
      assert.notEqual(c1.id, c2.id)

      await ok(sbx, 'secret = 123', { context: c1 })
      assert.equal((await ok(sbx, 'secret', { context: c1 })).text, '123')
      assert.equal((await ok(sbx, "'secret' in globals()", { context: c2 })).text, 'False')
      assert.equal((await ok(sbx, "'secret' in globals()")).text, 'False', 'default context shares state with c1')
      assert.equal((await ok(sbx, 'import os; os.getcwd()', { context: c2 })).text, '/tmp')

      const ids = (await sbx.listCodeContexts()).map((c) => c.id)
      assert.ok(ids.includes(c1.id) && ids.includes(c2.id), `list: ${ids}`)
      assert.ok(!ids.includes('default'))

      await sbx.restartCodeContext(c1)
      const ex = await sbx.runCode('secret', { context: c1 })
      assert.equal(ex.error?.name, 'NameError')
      assert.equal((await ok(sbx, '2 + 2', { context: c1 })).text, '4')

      await sbx.removeCodeContext(c2.id)
      const after = (await sbx.listCodeContexts()).map((c) => c.id)
      assert.ok(!after.includes(c2.id), `removed context still listed: ${after}`)
      assert.ok(after.includes(c1.id))
      await assert.rejects(sbx.runCode('1', { context: c2 }), NotFoundError)
      await assert.rejects(sbx.removeCodeContext(c2.id), NotFoundError)
    })
  })

  it('lists contexts in creation order: the defaults first, then the user\'s', { timeout: TEST_TIMEOUT }, async () => {
    await withSandbox(async (sbx) => {
      const made = []
      for (const language of ['python', 'bash', 'js', 'python', 'bash']) {
        made.push((await sbx.createCodeContext({ language })).id)
      }
      const listed = await sbx.listCodeContexts()
      assert.deepEqual(listed.slice(0, 2).map((c) => c.language), ['python', 'javascript'], JSON.stringify(listed))
      assert.deepEqual(listed.slice(2).map((c) => c.id), made)
      assert.equal(listed.length, 2 + made.length)
    })
  })

  it('the first cell in the default context is execution 1 (no hidden warm-up cell is counted)', { timeout: TEST_TIMEOUT }, async () => {
    // A default create comes from the boot snapshot (or the warm pool), a
    // secure one without public traffic boots cold: both start at 1.
    for (const opts of [{}, { secure: true, network: { allowPublicTraffic: false } }]) {
      await withSandbox(async (sbx) => {
        const first = await ok(sbx, '6 * 7')
        assert.equal(first.executionCount, 1, `options ${JSON.stringify(opts)}`)
        assert.equal((await ok(sbx, 'x = 1')).executionCount, 2)
        assert.equal((await ok(sbx, 'x')).executionCount, 3)
      }, opts)
    }
  })

  it('the default python and javascript contexts are listed as soon as create returns', { timeout: TEST_TIMEOUT }, async () => {
    // secure + no public traffic: never from the boot snapshot, a cold boot.
    for (const opts of [{ secure: true, network: { allowPublicTraffic: false } }, {}]) {
      await withSandbox(async (sbx) => {
        const listed = await sbx.listCodeContexts()
        assert.deepEqual(listed.map((c) => c.language), ['python', 'javascript'], `options ${JSON.stringify(opts)}: ${JSON.stringify(listed)}`)
        assert.ok(listed.every((c) => c.cwd === '/home/user' && c.id))
        // Both are usable by id.
        assert.equal((await ok(sbx, '6 * 7', { context: listed[0] })).text, '42')
        assert.equal((await ok(sbx, '6 * 7', { context: listed[1] })).text, '42')
      }, opts)
    }
  })

  it('code runs as root (a context in /root works, files from code belong to root); a bad cwd is a 400', { timeout: TEST_TIMEOUT }, async () => {
    await withSandbox(async (sbx) => {
      const c = await sbx.createCodeContext({ cwd: '/root' })
      assert.equal(c.cwd, '/root')
      let ex = await ok(sbx, "import os\nopen('from-code.txt', 'w').write('hi')\nf'{os.getcwd()} {os.getuid()}'", { context: c })
      assert.equal(ex.text, '/root 0')
      assert.equal((await sbx.files.getInfo('/root/from-code.txt', { user: 'root' })).owner, 'root')
      // The default context runs as root too, in the default user's home.
      ex = await ok(sbx, "import os, getpass\nf'{os.getcwd()} {getpass.getuser()}'")
      assert.equal(ex.text, '/home/user root')

      for (const [cwd, why] of [['/nonexistent-dir', 'does not exist'], ['/etc/hostname', 'is not a directory']]) {
        // The SDK shows only the status…
        await assert.rejects(sbx.createCodeContext({ cwd }), /400/)
        // …the body carries the reason.
        const res = await fetch(`${process.env.E2B_SANDBOX_URL}/contexts`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999' },
          body: JSON.stringify({ cwd })
        })
        const body = await res.text()
        assert.equal(res.status, 400, body)
        assert.ok(body.includes(cwd) && body.includes(why), body)
      }
    })
  })

  it('per-execution env vars are visible only in that execution', { timeout: TEST_TIMEOUT }, async () => {
    await withSandbox(async (sbx) => {
      const v = `val-${uniq()}`
      let ex = await ok(sbx, "import os\nos.environ.get('AIRLOCK_CELL_VAR')", { envs: { AIRLOCK_CELL_VAR: v } })
      assert.equal(ex.text, v)
      ex = await ok(sbx, "os.environ.get('AIRLOCK_CELL_VAR', 'unset')")
      assert.equal(ex.text, 'unset')
      // A subprocess of the cell sees the variable too.
      ex = await ok(sbx, "import subprocess\nsubprocess.run(['sh', '-c', 'echo $AIRLOCK_CELL_VAR'], capture_output=True, text=True).stdout.strip()", { envs: { AIRLOCK_CELL_VAR: v } })
      assert.equal(ex.text, v)

      ex = await ok(sbx, 'process.env.AIRLOCK_CELL_VAR', { language: 'js', envs: { AIRLOCK_CELL_VAR: v } })
      assert.equal(ex.text, v)
      ex = await ok(sbx, "process.env.AIRLOCK_CELL_VAR ?? 'unset'", { language: 'js' })
      assert.equal(ex.text, 'unset')

      ex = await ok(sbx, 'echo "[$AIRLOCK_CELL_VAR]"', { language: 'bash', envs: { AIRLOCK_CELL_VAR: v } })
      assert.equal(stdout(ex), `[${v}]\n`)
      ex = await ok(sbx, 'echo "[$AIRLOCK_CELL_VAR]"', { language: 'bash' })
      assert.equal(stdout(ex), '[]\n')

      // Sandbox-level envs reach the kernels; a per-execution value overrides
      // one of them for that execution only.
      const g = "os.environ.get('AIRLOCK_GLOBAL_VAR')"
      assert.equal((await ok(sbx, g)).text, 'global')
      assert.equal((await ok(sbx, g, { envs: { AIRLOCK_GLOBAL_VAR: 'override' } })).text, 'override')
      assert.equal((await ok(sbx, g)).text, 'global')
      assert.equal((await ok(sbx, 'process.env.AIRLOCK_GLOBAL_VAR', { language: 'js' })).text, 'global')
      ex = await ok(sbx, 'process.env.AIRLOCK_GLOBAL_VAR', { language: 'js', envs: { AIRLOCK_GLOBAL_VAR: 'override' } })
      assert.equal(ex.text, 'override')
      assert.equal((await ok(sbx, 'process.env.AIRLOCK_GLOBAL_VAR', { language: 'js' })).text, 'global')
    }, { envs: { AIRLOCK_GLOBAL_VAR: 'global' } })
  })

  it('a timed-out busy loop is interrupted and the context keeps working', { timeout: TEST_TIMEOUT }, async () => {
    await withSandbox(async (sbx) => {
      await ok(sbx, 'kept = 7')
      const start = Date.now()
      await assert.rejects(sbx.runCode('while True: pass', { timeoutMs: 3000 }), TimeoutError)
      const timedOut = Date.now() - start
      assert.ok(timedOut >= 2900 && timedOut < 15_000, `timed out after ${timedOut} ms`)

      const t1 = Date.now()
      const ex = await ok(sbx, '1+1', { timeoutMs: 30_000 })
      const recovered = Date.now() - t1
      assert.equal(ex.text, '2')
      console.log(`# interrupt: timeout after ${timedOut} ms, next cell answered in ${recovered} ms`)
      assert.ok(recovered < 10_000, `next cell took ${recovered} ms`)
      // SIGINT (not a restart) stopped it: state survived.
      assert.equal((await ok(sbx, 'kept')).text, '7')

      // The same for JavaScript.
      await assert.rejects(sbx.runCode('while (true) {}', { language: 'js', timeoutMs: 3000 }), TimeoutError)
      assert.equal((await ok(sbx, '1 + 1', { language: 'js', timeoutMs: 30_000 })).text, '2')
    })
  })

  it('JavaScript, TypeScript and Bash contexts keep state', { timeout: TEST_TIMEOUT }, async () => {
    await withSandbox(async (sbx) => {
      await ok(sbx, 'const a = 1', { language: 'js' })
      assert.equal((await ok(sbx, 'a + 1', { language: 'js' })).text, '2')
      assert.equal((await ok(sbx, 'let s = 0; for (let i = 1; i <= 10; i++) s += i; s', { language: 'javascript' })).text, '55')

      // Top-level await; the declared name survives into the next cell.
      let ex = await ok(sbx, 'const b = await new Promise((resolve) => setTimeout(() => resolve(40), 50))\nb + 1', { language: 'js' })
      assert.equal(ex.text, '41')
      assert.equal((await ok(sbx, 'b + 2', { language: 'js' })).text, '42')

      ex = await ok(sbx, "console.log('hello', 42); console.error('oops')", { language: 'js' })
      assert.equal(stdout(ex), 'hello 42\n')
      assert.equal(ex.logs.stderr.join(''), 'oops\n')
      assert.equal(ex.results.length, 0)

      ex = await sbx.runCode('null.x', { language: 'js' })
      assert.equal(ex.error?.name, 'TypeError')

      ex = await ok(sbx, 'const n: number = 21\nfunction twice(v: number): number { return v * 2 }\ntwice(n)', { language: 'ts' })
      assert.equal(ex.text, '42')

      await ok(sbx, 'cd /tmp\nMYVAR=persisted', { language: 'bash' })
      ex = await ok(sbx, 'pwd\necho "$MYVAR"', { language: 'bash' })
      assert.equal(stdout(ex), '/tmp\npersisted\n')
      assert.equal(ex.logs.stderr.join(''), '', 'a bash cell leaves nothing on stderr (its cell file is cleaned up quietly)')
      ex = await sbx.runCode('false', { language: 'bash' })
      assert.ok(ex.error, 'a failing bash command reports an error')
    })
  })

  it('JavaScript and TypeScript cells take ES module imports next to require and import()', { timeout: TEST_TIMEOUT }, async () => {
    await withSandbox(async (sbx) => {
      // Default JS context: builtins, default/named/namespace/side-effect imports.
      let ex = await ok(sbx, "import fs from 'node:fs'\nimport { join } from 'node:path'\nimport * as os from 'os'\nimport 'node:util'\nfs.existsSync(join('/', 'etc')) + ' ' + typeof os.cpus", { language: 'js' })
      assert.equal(ex.text, 'true function')
      // The imported bindings stay for the next cell; require works next to them.
      ex = await ok(sbx, "typeof fs.readFileSync + ' ' + join('a', 'b') + ' ' + require('node:path').sep", { language: 'js' })
      assert.equal(ex.text, 'function a/b /')
      // Top-level await and import() in the same context.
      ex = await ok(sbx, "const { cpus } = await import('node:os')\nArray.isArray(cpus())", { language: 'js' })
      assert.equal(ex.text, 'true')

      // Packages resolve from the context's cwd (the default's is /home/user):
      // an ESM-only package (no require condition) and a CommonJS one.
      await sbx.files.write([
        { path: '/home/user/node_modules/esm-only/package.json', data: JSON.stringify({ name: 'esm-only', type: 'module', exports: { '.': { import: './index.js' } } }) },
        { path: '/home/user/node_modules/esm-only/index.js', data: "export default 'hello'\nexport const shout = (s) => s.toUpperCase() + '!'\n" },
        { path: '/home/user/node_modules/cjs-pkg/package.json', data: JSON.stringify({ name: 'cjs-pkg', main: 'main.js' }) },
        { path: '/home/user/node_modules/cjs-pkg/main.js', data: 'exports.answer = 42\n' },
        { path: '/home/user/proj/node_modules/proj-only/package.json', data: JSON.stringify({ name: 'proj-only', type: 'module', exports: './index.js' }) },
        { path: '/home/user/proj/node_modules/proj-only/index.js', data: "export const where = 'proj'\n" }
      ])
      ex = await ok(sbx, "import greeting, { shout } from 'esm-only'\nshout(greeting)", { language: 'js' })
      assert.equal(ex.text, 'HELLO!')
      ex = await ok(sbx, "import { answer } from 'cjs-pkg'\nanswer + require('cjs-pkg').answer", { language: 'js' })
      assert.equal(ex.text, '84')
      ex = await ok(sbx, "shout('again') + ' ' + (await import('esm-only')).default", { language: 'js' })
      assert.equal(ex.text, 'AGAIN! hello')

      // Errors: a missing export, a missing package, a syntax error next to an import.
      ex = await sbx.runCode("import { nope } from 'esm-only'", { language: 'js' })
      assert.equal(ex.error?.name, 'SyntaxError', JSON.stringify(ex.error))
      assert.match(ex.error.value, /does not provide an export named 'nope'/)
      ex = await sbx.runCode("import x from 'not-installed'", { language: 'js' })
      assert.match(ex.error?.value ?? '', /Cannot find package 'not-installed'/, JSON.stringify(ex.error))
      ex = await sbx.runCode("import fs2 from 'node:fs'\nconst = 1", { language: 'js' })
      assert.equal(ex.error?.name, 'SyntaxError', JSON.stringify(ex.error))
      assert.equal((await ok(sbx, "shout('still here')", { language: 'js' })).text, 'STILL HERE!')

      // TypeScript in a context with its own cwd: its node_modules, then
      // those of the directories above; a type-only import is erased.
      // (One context more than the defaults: a TS kernel takes ~170 MB.)
      const ts = await sbx.createCodeContext({ cwd: '/home/user/proj', language: 'ts' })
      ex = await ok(sbx, "import { where } from 'proj-only'\nimport { shout } from 'esm-only'\nimport type { Stats } from 'node:fs'\nconst s: string = shout(where)\ns", { context: ts })
      assert.equal(ex.text, 'PROJ!')
      assert.equal((await ok(sbx, "const t: string = shout('next')\nt", { context: ts })).text, 'NEXT!')
    })
  })

  it('~50 MB of output does not break the agent', { timeout: TEST_TIMEOUT * 2 }, async () => {
    await withSandbox(async (sbx) => {
      const line = 'y'.repeat(1023) + '\n'
      const lines = 50 * 1024
      let bytes = 0
      let chunks = 0
      let biggest = 0
      const start = Date.now()
      let outcome
      try {
        await sbx.runCode(`import sys\nline = ${JSON.stringify(line)}\nfor _ in range(${lines}):\n    sys.stdout.write(line)\nprint('DONE')`, {
          timeoutMs: 300_000,
          onStdout: (m) => { bytes += m.line.length; chunks++; biggest = Math.max(biggest, m.line.length) }
        })
        outcome = 'completed'
      } catch (err) {
        assert.ok(err instanceof TimeoutError, `unexpected error: ${err}`)
        outcome = 'timed out'
      }
      const took = Date.now() - start
      console.log(`# 50 MB output: ${outcome} after ${took} ms, ${bytes} bytes in ${chunks} chunks, the biggest ${biggest}`)
      assert.ok(bytes <= lines * line.length + 16, `more output than printed: ${bytes}`)
      // Output in flight is bounded: no single message holds megabytes
      // (the kernel and the agent would hold all of it at once).
      assert.ok(biggest <= 1024 * 1024, `a single stdout message of ${biggest} characters`)
      if (outcome === 'completed') assert.ok(bytes > 0)
      const ex = await ok(sbx, '1+1', { timeoutMs: 60_000 })
      assert.equal(ex.text, '2')
      assert.equal((await ok(sbx, "print('after')")).logs.stdout.join(''), 'after\n')
    })
  })

  it('a cell printing without pause is interrupted cleanly; its output arrives in order and the next cell works', { timeout: TEST_TIMEOUT }, async () => {
    await withSandbox(async (sbx) => {
      let text = ''
      await assert.rejects(
        sbx.runCode("i = 0\nwhile True:\n    i += 1\n    print(f'{i:09d}' + 'z' * 990)", {
          timeoutMs: 3_000,
          onStdout: (m) => { text += m.line }
        }),
        (err) => err instanceof TimeoutError
      )
      const got = text.split('\n')
      got.pop() // what followed the last newline (the timeout may cut a line)
      assert.ok(got.length > 0, 'no output before the timeout')
      got.forEach((l, i) => {
        assert.equal(l.length, 999, `line ${i} is torn: ${l.slice(0, 40)}…`)
        assert.equal(Number(l.slice(0, 9)), i + 1, `line ${i} out of order`)
      })
      // The interrupt landed; state is kept and the next cells work.
      const next = await ok(sbx, 'i > 0', { timeoutMs: 60_000 })
      assert.equal(next.text, 'True')
      assert.equal((await ok(sbx, "print('after')")).logs.stdout.join(''), 'after\n')
    })
  })

  it('a crashing kernel reports ContextRestarting and the next cell works', { timeout: TEST_TIMEOUT }, async () => {
    await withSandbox(async (sbx) => {
      await ok(sbx, 'lost = 1')
      const ex = await sbx.runCode('import os; os._exit(1)', { timeoutMs: 60_000 })
      assert.equal(ex.error?.name, 'ContextRestarting', JSON.stringify(ex.error))
      const next = await ok(sbx, '1+1', { timeoutMs: 60_000 })
      assert.equal(next.text, '2')
      // A fresh kernel: the old state is gone.
      assert.equal((await sbx.runCode('lost')).error?.name, 'NameError')
    })
  })

  it('a cell that runs out of memory gets an OutOfMemoryError; the sandbox, other contexts and files live', { timeout: TEST_TIMEOUT }, async () => {
    await withSandbox(async (sbx) => {
      const js = await sbx.createCodeContext({ language: 'js' })
      await ok(sbx, 'let kept = 41', { context: js })
      await sbx.files.write('/home/user/keep.txt', 'kept')
      const ex = await sbx.runCode('b = []\nwhile True: b.append(bytearray(100 * 2**20))', { timeoutMs: 120_000 })
      assert.equal(ex.error?.name, 'OutOfMemoryError', JSON.stringify(ex.error))
      assert.match(ex.error.value, /out of memory/)
      assert.equal((await ok(sbx, '6 * 7', { timeoutMs: 60_000 })).text, '42')
      assert.equal((await ok(sbx, 'kept + 1', { context: js })).text, '42')
      assert.equal(await sbx.files.read('/home/user/keep.txt'), 'kept')
    })
  })

  it('display() of several objects yields several results via onResult', { timeout: TEST_TIMEOUT }, async () => {
    await withSandbox(async (sbx) => {
      const got = []
      const ex = await ok(sbx, [
        'from IPython.display import display, HTML, Markdown',
        'import pandas as pd',
        "display(HTML('<b>bold</b>'))",
        "display(Markdown('# title'))",
        "display(pd.DataFrame({'k': [1]}))",
        "'last'"
      ].join('\n'), { onResult: (r) => { got.push(r) } })
      assert.equal(got.length, 4, JSON.stringify(got.map((r) => r.formats())))
      assert.equal(ex.results.length, 4)
      assert.equal(got[0].html, '<b>bold</b>')
      assert.equal(got[0].isMainResult, false)
      assert.equal(got[1].markdown, '# title')
      assert.match(got[2].html, /<table/)
      assert.equal(got[3].isMainResult, true)
      assert.equal(got[3].text, 'last')
      assert.equal(ex.text, 'last')
    })
  })
})
