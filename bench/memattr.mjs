#!/usr/bin/env node
// Attributes a running code-interpreter sandbox's memory (issue 24), with
// bench/density/breakdown.sh read before and after:
//   node bench/memattr.mjs <sandbox-id> trim      gc.collect() + malloc_trim(0)
//                                                 in the default Python kernel
//   node bench/memattr.mjs <sandbox-id> killnode  SIGKILL every node process
// Environment: E2B_API_URL/E2B_API_KEY (or AIRLOCK_URL/AIRLOCK_API_KEY).
import { daemon, loadSDK } from './sdk.mjs'
daemon('memattr')
const { Sandbox } = await loadSDK('@e2b/code-interpreter')
const sbx = await Sandbox.connect(process.argv[2])
const what = process.argv[3]
if (what === 'trim') {
  console.log('ctypes loaded before trim:', (await sbx.runCode('"ctypes" in __import__("sys").modules')).text)
  const r = await sbx.runCode('try:\n    __import__("gc").collect()\n    __import__("ctypes").CDLL(None).malloc_trim(0)\nexcept Exception:\n    pass\n__import__("sys").modules.get("ctypes") is not None')
  console.log('trim ->', r.text, r.error ? JSON.stringify(r.error) : '')
} else if (what === 'killnode') {
  const r = await sbx.commands.run('for d in /proc/[0-9]*; do [ "$(cat $d/comm 2>/dev/null)" = node ] && kill -9 ${d#/proc/}; done; true', { user: 'root' })
  console.log('killnode ->', r.exitCode)
} else {
  console.error('usage: memattr.mjs <sandbox-id> trim|killnode')
  process.exit(2)
}
