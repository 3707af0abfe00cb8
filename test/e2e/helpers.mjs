// Shared helpers for the end-to-end tests. The E2B SDK reads E2B_API_URL,
// E2B_SANDBOX_URL and E2B_API_KEY from the environment (scripts/test.sh sets
// them from the daemon's output).
import { randomBytes } from 'node:crypto'
import { Sandbox, CommandExitError } from 'e2b'

for (const name of ['E2B_API_URL', 'E2B_API_KEY']) {
  if (!process.env[name]) {
    throw new Error(`${name} is not set: start \`airlock serve\` and export its E2B_* lines (scripts/test.sh does this)`)
  }
}

/** Milliseconds for one test; gVisor creates take ~1 s, so be generous. */
export const TEST_TIMEOUT = 180_000

/** A short random hex string. */
export function uniq () {
  return randomBytes(6).toString('hex')
}

/** The daemon's TCP port, from E2B_API_URL. */
export function daemonPort () {
  const u = new URL(process.env.E2B_API_URL)
  return Number(u.port || (u.protocol === 'https:' ? 443 : 80))
}

/**
 * Tracks the sandboxes one test file creates. Every sandbox gets the metadata
 * key `e2e-suite` = a value unique to this tracker, so list assertions are
 * isolated from other files running concurrently.
 */
export function tracker (suite) {
  const tag = `${suite}-${uniq()}`
  const created = []
  return {
    tag,
    metadata: { 'e2e-suite': tag },
    async create (opts = {}) {
      const sbx = await Sandbox.create({
        timeoutMs: 300_000,
        ...opts,
        metadata: { 'e2e-suite': tag, ...(opts.metadata ?? {}) }
      })
      created.push(sbx.sandboxId)
      return sbx
    },
    async killAll () {
      await Promise.allSettled(created.map((id) => Sandbox.kill(id)))
    }
  }
}

/** Runs cmd and returns {exitCode, stdout, stderr} without throwing on a non-zero exit. */
export async function sh (sbx, cmd, opts = {}) {
  try {
    const r = await sbx.commands.run(cmd, opts)
    return { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr }
  } catch (err) {
    if (err instanceof CommandExitError) {
      return { exitCode: err.exitCode, stdout: err.stdout, stderr: err.stderr }
    }
    throw err
  }
}

/** Polls fn until it returns a truthy value or timeoutMs passes; returns the last value. */
export async function waitUntil (fn, timeoutMs, intervalMs = 200) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const v = await fn()
    if (v || Date.now() >= deadline) return v
    await sleep(intervalMs)
  }
}

export function sleep (ms) {
  return new Promise((resolve) => setTimeout(resolve, ms))
}
