// What every bench script starts with: the daemon it talks to and the E2B
// SDK it loads, from the repository's own npm installs (no package of its
// own in bench/).
import { createRequire } from 'node:module'
import { join, dirname } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')

// daemon returns { apiURL, apiKey } from E2B_API_URL/E2B_API_KEY (or
// AIRLOCK_URL/AIRLOCK_API_KEY); when either is missing it says so, naming
// the bench, and exits with status 2. Options:
//   exportEnv (default true)  set E2B_API_URL and E2B_API_KEY, which the SDKs read
//   sandboxURL (default true) with exportEnv, also E2B_SANDBOX_URL (the API URL
//                             unless it is set)
//   trimSlash (default false) strip a trailing slash from the URL
export function daemon (bench, { exportEnv = true, sandboxURL = true, trimSlash = false } = {}) {
  let apiURL = process.env.E2B_API_URL || process.env.AIRLOCK_URL
  const apiKey = process.env.E2B_API_KEY || process.env.AIRLOCK_API_KEY
  if (trimSlash) apiURL = (apiURL || '').replace(/\/$/, '')
  if (!apiURL || !apiKey) {
    console.error(`${bench} bench: set E2B_API_URL and E2B_API_KEY (or AIRLOCK_URL and AIRLOCK_API_KEY)`)
    process.exit(2)
  }
  if (exportEnv) {
    process.env.E2B_API_URL = apiURL
    process.env.E2B_API_KEY = apiKey
    if (sandboxURL) process.env.E2B_SANDBOX_URL ||= apiURL
  }
  return { apiURL, apiKey }
}

// loadSDK imports the npm package pkg as installed in dir, relative to the
// repository: test/e2e by default (`npm ci` there; bench/run.sh does it),
// web/console for the SDK the console bundles (scripts/setup.sh installs it).
export async function loadSDK (pkg, dir = join('test', 'e2e')) {
  const req = createRequire(join(root, dir, 'package.json'))
  return import(pathToFileURL(req.resolve(pkg)).href)
}

// pct is the p-th percentile (nearest rank) of xs.
export function pct (xs, p) {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]
}

// timed runs fn and returns [its duration in ms, its result].
export async function timed (fn) {
  const t = performance.now()
  const r = await fn()
  return [performance.now() - t, r]
}
