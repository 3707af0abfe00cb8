// Commands and PTY through the official E2B SDK.
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { CommandExitError, TimeoutError } from 'e2b'
import { tracker, uniq, sleep, waitUntil, TEST_TIMEOUT } from './helpers.mjs'

const t = tracker('commands')
let sbx
before(async () => { sbx = await t.create() }, { timeout: TEST_TIMEOUT })
after(() => t.killAll())

describe('commands', { timeout: TEST_TIMEOUT * 4 }, () => {
  it('runs echo', { timeout: TEST_TIMEOUT }, async () => {
    const r = await sbx.commands.run('echo hello world')
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'hello world\n')
    assert.equal(r.stderr, '')
  })

  it('non-zero exit throws CommandExitError with exitCode and output', { timeout: TEST_TIMEOUT }, async () => {
    await assert.rejects(sbx.commands.run('echo out; echo err >&2; exit 3'), (err) => {
      assert.ok(err instanceof CommandExitError, `got ${err?.name}: ${err?.message}`)
      assert.equal(err.exitCode, 3)
      assert.equal(err.stdout, 'out\n')
      assert.equal(err.stderr, 'err\n')
      return true
    })
  })

  it('captures stderr and streams callbacks', { timeout: TEST_TIMEOUT }, async () => {
    const out = []
    const errs = []
    const r = await sbx.commands.run('for i in 1 2 3; do echo o$i; echo e$i >&2; done', {
      onStdout: (d) => out.push(d),
      onStderr: (d) => errs.push(d)
    })
    assert.equal(r.stdout, 'o1\no2\no3\n')
    assert.equal(r.stderr, 'e1\ne2\ne3\n')
    assert.equal(out.join(''), r.stdout)
    assert.equal(errs.join(''), r.stderr)
  })

  it('default user, cwd and home; root on request; cwd option', { timeout: TEST_TIMEOUT }, async () => {
    let r = await sbx.commands.run('whoami; pwd; echo $HOME')
    assert.equal(r.stdout, 'user\n/home/user\n/home/user\n')
    r = await sbx.commands.run('whoami; id -u', { user: 'root' })
    assert.equal(r.stdout, 'root\n0\n')
    // The login shell's PATH is Debian's for each user, from bash (which
    // knows its EUID) and from a plain sh login shell alike.
    const userPath = '/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games'
    const rootPath = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
    r = await sbx.commands.run('echo "$PATH"; env -i HOME=/home/user sh -l -c \'echo "$PATH"\'')
    assert.equal(r.stdout, `${userPath}\n${userPath}\n`)
    r = await sbx.commands.run('echo "$PATH"; env -i HOME=/root sh -l -c \'echo "$PATH"\'', { user: 'root' })
    assert.equal(r.stdout, `${rootPath}\n${rootPath}\n`)
    await sbx.commands.run('mkdir -p /tmp/e2e-cwd')
    r = await sbx.commands.run('pwd', { cwd: '/tmp/e2e-cwd' })
    assert.equal(r.stdout, '/tmp/e2e-cwd\n')
    // Files created by the default user are owned by it with umask 022.
    r = await sbx.commands.run('touch ~/own && stat -c "%U %a" ~/own')
    assert.equal(r.stdout, 'user 644\n')
  })

  it('passwordless sudo for user (spec §7), with exit codes and -u', { timeout: TEST_TIMEOUT }, async () => {
    const r = await sbx.commands.run('whoami; sudo whoami; sudo -u nobody id -un; echo secret | sudo tee /root/airlock-sudo >/dev/null; sudo cat /root/airlock-sudo; sudo -n true && echo n-ok')
    assert.equal(r.stdout, 'user\nroot\nnobody\nsecret\nn-ok\n')
    await assert.rejects(sbx.commands.run('sudo sh -c "exit 7"'), (err) => err instanceof CommandExitError && err.exitCode === 7)
    // Without sudo, root's files stay closed to user.
    await assert.rejects(sbx.commands.run('cat /root/airlock-sudo'), (err) => err instanceof CommandExitError)
  })

  it('envs per command override nothing else', { timeout: TEST_TIMEOUT }, async () => {
    const v = uniq()
    const r = await sbx.commands.run('echo "$E2E_A-$E2E_B"', { envs: { E2E_A: v, E2E_B: 'two words' } })
    assert.equal(r.stdout, `${v}-two words\n`)
    const r2 = await sbx.commands.run('echo "[$E2E_A]"')
    assert.equal(r2.stdout, '[]\n', 'per-command env leaked into the next command')
  })

  it('background command: list, connect, kill', { timeout: TEST_TIMEOUT }, async () => {
    const tag = uniq()
    const h = await sbx.commands.run(`sleep 600 # ${tag}`, { background: true })
    assert.ok(h.pid > 0)
    const procs = await sbx.commands.list()
    const mine = procs.find((p) => p.pid === h.pid)
    assert.ok(mine, `pid ${h.pid} not in list ${JSON.stringify(procs.map((p) => p.pid))}`)
    assert.equal(mine.cmd, '/bin/bash')
    assert.ok(mine.args.join(' ').includes(tag))

    const attached = await sbx.commands.connect(h.pid)
    assert.equal(attached.pid, h.pid)

    assert.equal(await sbx.commands.kill(h.pid), true)
    await assert.rejects(h.wait(), CommandExitError)
    const attachedEnd = await Promise.race([
      attached.wait().then(() => 'resolved', (e) => (e instanceof CommandExitError ? 'exit-error' : `other: ${e}`)),
      sleep(15_000).then(() => 'hung')
    ])
    assert.equal(attachedEnd, 'exit-error', 'a handle from commands.connect did not see the kill')
    const gone = await waitUntil(async () => !(await sbx.commands.list()).some((p) => p.pid === h.pid), 10_000)
    assert.ok(gone, 'killed process still listed')
    assert.equal(await sbx.commands.kill(999_999), false)
  })

  it('stdin: sendStdin then closeStdin', { timeout: TEST_TIMEOUT }, async () => {
    const h = await sbx.commands.run('cat; echo done', { background: true, stdin: true })
    await sbx.commands.sendStdin(h.pid, 'hello ')
    await h.sendStdin(new TextEncoder().encode('stdin\n'))
    await sbx.commands.closeStdin(h.pid)
    const r = await h.wait()
    assert.equal(r.stdout, 'hello stdin\ndone\n')
  })

  it('stdin is closed by default (cat ends at once)', { timeout: TEST_TIMEOUT }, async () => {
    const r = await sbx.commands.run('cat; echo eof', { timeoutMs: 20_000 })
    assert.equal(r.stdout, 'eof\n')
  })

  it('pty: create, sendInput, onData, resize, kill', { timeout: TEST_TIMEOUT }, async () => {
    let out = ''
    const dec = new TextDecoder()
    const h = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d, { stream: true }) }, timeoutMs: 60_000 })
    assert.ok(h.pid > 0)
    await sbx.pty.sendInput(h.pid, new TextEncoder().encode('echo pty-$((40+2))\n'))
    assert.ok(await waitUntil(() => out.includes('pty-42'), 15_000), `no echo in pty output: ${JSON.stringify(out)}`)
    await sbx.pty.resize(h.pid, { cols: 120, rows: 40 })
    await sbx.pty.sendInput(h.pid, new TextEncoder().encode('stty size; tty\n'))
    // `tty` is a process of its own after `stty`: its line may come in a later chunk.
    assert.ok(await waitUntil(() => out.includes('40 120') && /\/dev\/pts\/\d+/.test(out), 15_000), `resize or tty not visible: ${JSON.stringify(out)}`)
    assert.match(out, /\/dev\/pts\/\d+/)
    await sbx.pty.sendInput(h.pid, new TextEncoder().encode('exit 0\n'))
    const r = await h.wait()
    assert.equal(r.exitCode, 0)
  })

  it('timeoutMs ends a long command with TimeoutError and kills it', { timeout: TEST_TIMEOUT }, async () => {
    const tag = uniq()
    const start = Date.now()
    await assert.rejects(sbx.commands.run(`sleep 30; echo ${tag}`, { timeoutMs: 2_000 }), TimeoutError)
    assert.ok(Date.now() - start < 10_000, 'timeout took too long')
    const gone = await waitUntil(async () => {
      const r = await sbx.commands.run(`grep -las "[s]leep 30; echo ${tag}" /proc/[0-9]*/cmdline | wc -l`)
      return r.stdout.trim() === '0'
    }, 10_000, 500)
    assert.ok(gone, 'process outlived its timeoutMs')
  })

  it('invalid UTF-8 output does not break the stream', { timeout: TEST_TIMEOUT }, async () => {
    const r = await sbx.commands.run("printf 'a\\xff\\xfeb\\n'; printf '\\xe2\\x82'; printf '\\xac ok\\n'")
    assert.equal(r.exitCode, 0)
    assert.ok(r.stdout.startsWith('a'), JSON.stringify(r.stdout))
    assert.ok(r.stdout.includes('b\n'))
    assert.ok(r.stdout.includes('€ ok\n'), `split code point not reassembled: ${JSON.stringify(r.stdout)}`)
  })

  it('large output arrives complete', { timeout: TEST_TIMEOUT }, async () => {
    const r = await sbx.commands.run('seq 1 200000')
    const lines = r.stdout.trimEnd().split('\n')
    assert.equal(lines.length, 200000)
    assert.equal(lines[199999], '200000')
  })

  it('a command killed mid-stream ends its handle', { timeout: TEST_TIMEOUT }, async () => {
    let got = ''
    const h = await sbx.commands.run('i=0; while true; do i=$((i+1)); echo line $i; sleep 0.01; done', {
      background: true,
      onStdout: (d) => { got += d }
    })
    assert.ok(await waitUntil(() => got.includes('line 20'), 20_000), 'no streamed output')
    assert.equal(await h.kill(), true)
    const settled = await Promise.race([
      h.wait().then(() => 'resolved', (e) => (e instanceof CommandExitError ? 'exit-error' : `other: ${e}`)),
      sleep(15_000).then(() => 'hung')
    ])
    assert.equal(settled, 'exit-error')
    // The sandbox still works afterwards.
    const r = await sbx.commands.run('echo still-alive')
    assert.equal(r.stdout, 'still-alive\n')
  })

  it('concurrent commands', { timeout: TEST_TIMEOUT }, async () => {
    const rs = await Promise.all(Array.from({ length: 8 }, (_, i) => sbx.commands.run(`echo ${i}`)))
    assert.deepEqual(rs.map((r) => r.stdout), Array.from({ length: 8 }, (_, i) => `${i}\n`))
  })
})
