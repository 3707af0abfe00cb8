// Security review (issue 23), M6: a microVM build step's root disk is
// written by the guest, every byte of it, and the daemon used to loop-mount
// it on the host (mount -t ext4 -o loop) to read the step's layer: a crafted
// file system reached the host kernel's ext4 driver. Now the disk is read in
// user space by an unprivileged child. This file runs against the microVM
// daemon of scripts/test-microvm.sh.
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync, readdirSync, mkdtempSync, writeFileSync, rmSync } from 'node:fs'
import { spawn } from 'node:child_process'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { tracker, uniq, sh } from './helpers.mjs'

const T = 300_000

// Run in the guest: rewrites the ext4 superblock of the root device,
// setting s_mount_opts, with a valid metadata_csum checksum.
const SUPERBLOCK_PY = `# Rewrites the ext4 superblock of the root device from inside the guest:
# s_mount_opts (0x200) gets mount options, with a valid checksum.
import os, struct, sys

def crc32c_raw(data, crc=0xFFFFFFFF):
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc  # ext4 stores the state without the final inversion

dev, opts = sys.argv[1], sys.argv[2].encode()
fd = os.open(dev, os.O_RDWR)
sb = bytearray(os.pread(fd, 1024, 1024))
assert sb[0x38:0x3A] == b'\\x53\\xef', 'no ext4 superblock'
sb[0x200:0x240] = opts.ljust(64, b'\\0')
if struct.unpack_from('<I', sb, 0x64)[0] & 0x400:  # metadata_csum
    struct.pack_into('<I', sb, 0x3FC, crc32c_raw(bytes(sb[:0x3FC])))
os.pwrite(fd, bytes(sb), 1024)
os.fsync(fd)
print('superblock rewritten on', dev)
`
const t = tracker('microvm-m6')
after(() => t.killAll())

/** Runs the airlock CLI (it reads E2B_API_URL/E2B_API_KEY); resolves {code, stdout, stderr}. */
function airlock (args) {
  const bin = process.env.AIRLOCK_TEST_CLI ?? fileURLToPath(new URL('../../bin/airlock', import.meta.url))
  return new Promise((resolve, reject) => {
    const p = spawn(bin, args, { env: process.env })
    let stdout = ''
    let stderr = ''
    p.stdout.on('data', (d) => { stdout += d })
    p.stderr.on('data', (d) => { stderr += d })
    p.on('error', reject)
    p.on('close', (code) => resolve({ code, stdout, stderr }))
  })
}

/**
 * Polls, every few milliseconds until stopped, for a loop device backed by
 * a file of the microVM runtime (its images and sandbox dirs are under
 * <data>/microvm/) and for an ext4 mount of a build's layer work dir.
 */
function watchHostMounts () {
  const seen = new Set()
  const poll = () => {
    let loops = []
    try { loops = readdirSync('/sys/block').filter((d) => d.startsWith('loop')) } catch {}
    for (const l of loops) {
      try {
        const f = readFileSync(`/sys/block/${l}/loop/backing_file`, 'utf8').trim()
        if (f.includes('/microvm/')) seen.add(`loop device ${l} backed by ${f}`)
      } catch {} // not attached
    }
    for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
      if (line.includes(' - ext4 ') && line.includes('/layer-')) seen.add(`mount: ${line}`)
    }
  }
  const timer = setInterval(poll, 10)
  timer.unref()
  return () => { clearInterval(timer); poll(); return [...seen] }
}

describe('M6: a microVM build step\'s disk is never mounted by the host', { timeout: T * 3 }, () => {
  const ctxDir = mkdtempSync(join(tmpdir(), 'airlock-e2e-m6-'))
  const names = []
  after(async () => {
    for (const n of names) await airlock(['template', 'rm', n])
    rmSync(ctxDir, { recursive: true, force: true })
  })

  it('M6: a RUN step that writes its own superblock through the raw block device (default mount options the host kernel would parse) yields no host mount and the right layer or a clear refusal', { timeout: T * 2 }, async () => {
    const token = uniq()
    const name = `m6-${token}`
    names.push(name)
    // s_mount_opts (superblock offset 0x200): a string of mount options
    // the kernel parses whenever it mounts the file system, left alone by
    // e2fsck. The step rewrites its own superblock through the raw block
    // device, with a valid checksum (a bad one makes e2fsck fall back to
    // a backup superblock and the build fail before any mount).
    writeFileSync(join(ctxDir, 'm6.py'), SUPERBLOCK_PY)
    writeFileSync(join(ctxDir, 'Dockerfile'), [
      'FROM base',
      'COPY m6.py /tmp/m6.py',
      `RUN echo "m6-${token}" > /m6.txt && sync && ` +
        'for d in /dev/vda /dev/vdb /dev/vdc; do ' +
        '[ "$(dd if=$d bs=1 skip=1080 count=2 2>/dev/null | od -An -tx1 | tr -d " ")" = 53ef ] && dev=$d; done; ' +
        '[ -n "$dev" ] || { echo "M6-NO-ROOT-DEVICE"; exit 1; }; ' +
        `python3 /tmp/m6.py $dev nodelalloc,m6-${token} && sync && touch /m6-after && sync`,
      ''
    ].join('\n'))
    const stop = watchHostMounts()
    const b = await airlock(['template', 'build', '--name', name, ctxDir])
    const seen = stop()
    assert.deepEqual(seen, [], `the host mounted a guest-written disk during the build:\n${seen.join('\n')}`)
    if (b.code !== 0) {
      // Refused: with a message that says why, not an internal error.
      assert.match(b.stderr, /cannot be read|unsupported feature|e2fsck/,
        `the build failed without a clear reason:\n${b.stderr}`)
      assert.doesNotMatch(b.stderr, /panic|internal error/i, b.stderr)
      return
    }
    const sbx = await t.create({ template: name })
    const r = await sh(sbx, 'cat /m6.txt; ls /m6-after')
    assert.equal(r.stdout.trim(), `m6-${token}\n/m6-after`, 'the step\'s layer holds its files')
    await sbx.kill()
  })

  it('M6: an ordinary RUN step still yields its layer, with no host mount', { timeout: T * 2 }, async () => {
    const token = uniq()
    const name = `m6ok-${token}`
    names.push(name)
    writeFileSync(join(ctxDir, 'Dockerfile'), [
      'FROM base',
      `RUN echo "ok-${token}" > /m6ok.txt && ln -s m6ok.txt /m6link && rm /etc/issue.net && setfattr -n user.m6 -v yes /m6ok.txt 2>/dev/null; true`,
      ''
    ].join('\n'))
    const stop = watchHostMounts()
    const b = await airlock(['template', 'build', '--name', name, ctxDir])
    const seen = stop()
    assert.deepEqual(seen, [], `the host mounted a guest-written disk during the build:\n${seen.join('\n')}`)
    assert.equal(b.code, 0, `build failed:\n${b.stderr}`)
    const sbx = await t.create({ template: name })
    const r = await sh(sbx, 'cat /m6ok.txt; readlink /m6link; ls /etc/issue.net 2>&1')
    const [content, link, gone] = r.stdout.trim().split('\n')
    assert.equal(content, `ok-${token}`)
    assert.equal(link, 'm6ok.txt')
    assert.match(gone, /No such file/)
    await sbx.kill()
  })
})
