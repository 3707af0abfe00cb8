// The stand-in internet's servers that the egress tests run in their test
// namespaces (test/e2e and test/cluster). dnsServer and socksServer are
// stringified into the namespace's node process (`${fn.toString()}`), so
// they must stay self-contained: require(), no imports, no outer names.

/**
 * A tiny authoritative DNS server on UDP port 53 of addr. names maps a
 * name or "*.suffix" to an IPv4 address, or to { cname: 'other.name' } (a
 * CNAME, followed by other.name's A record in the same answer); A queries
 * get it, other types an empty answer (a CNAME's only), unknown names
 * NXDOMAIN.
 */
export function dnsServer (addr, names) {
  const sock = require('dgram').createSocket('udp4')
  const lookup = (name) => {
    if (names[name]) return names[name]
    for (const [k, v] of Object.entries(names)) {
      if (k.startsWith('*.') && name.endsWith(k.slice(1))) return v
    }
    return undefined
  }
  sock.on('message', (q, rinfo) => {
    if (q.length < 12) return
    let off = 12
    const labels = []
    while (off < q.length && q[off] !== 0) {
      labels.push(q.subarray(off + 1, off + 1 + q[off]).toString())
      off += q[off] + 1
    }
    const qEnd = off + 5
    if (qEnd > q.length) return
    const qtype = q.readUInt16BE(off + 1)
    let ip = lookup(labels.join('.').toLowerCase())
    const rrs = []
    const rr = (nameField, type, data) => {
      const h = Buffer.alloc(10)
      h.writeUInt16BE(type, 0)
      h.writeUInt16BE(1, 2) // IN
      h.writeUInt32BE(60, 4) // TTL
      h.writeUInt16BE(data.length, 8)
      return Buffer.concat([nameField, h, data])
    }
    let owner = Buffer.from([0xc0, 0x0c]) // the question's name
    if (ip && typeof ip === 'object') { // a CNAME, then its target's A record
      const target = Buffer.concat([...ip.cname.split('.').map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l)])), Buffer.from([0])])
      rrs.push(rr(owner, 5, target))
      owner = target
      ip = lookup(ip.cname)
    }
    if (ip && qtype === 1) rrs.push(rr(owner, 1, Buffer.from(ip.split('.').map(Number))))
    const head = Buffer.alloc(12)
    q.copy(head, 0, 0, 2) // id
    head.writeUInt16BE(0x8180 | (ip || rrs.length ? 0 : 3), 2) // response, RD, RA; NXDOMAIN when unknown
    head.writeUInt16BE(1, 4)
    head.writeUInt16BE(rrs.length, 6)
    const parts = [head, q.subarray(12, qEnd), ...rrs]
    sock.send(Buffer.concat(parts), rinfo.port, rinfo.address)
  })
  sock.bind(53, addr)
}

/**
 * A SOCKS5 server (RFC 1928 CONNECT, RFC 1929 auth) on addr:1080 that
 * dials from addr, resolving the names of hosts itself (others as given).
 * Each CONNECT target is listed at http://addr:1081/ and logged as a JSON
 * line {"target": "host:port"} on stdout.
 */
export function socksServer (addr, user, pass, hosts = {}) {
  const net = require('net')
  const targets = []
  require('http').createServer((q, s) => s.end(JSON.stringify(targets))).listen(1081, addr)
  net.createServer((c) => {
    let buf = Buffer.alloc(0)
    let step = 'greet'
    c.on('error', () => {})
    const onData = (d) => {
      buf = Buffer.concat([buf, d])
      if (step === 'greet') {
        if (buf.length < 2 || buf.length < 2 + buf[1]) return
        const methods = [...buf.subarray(2, 2 + buf[1])]
        buf = buf.subarray(2 + buf[1])
        if (!methods.includes(2)) { c.end(Buffer.from([5, 0xff])); return }
        c.write(Buffer.from([5, 2]))
        step = 'auth'
      }
      if (step === 'auth') {
        if (buf.length < 2 || buf.length < 3 + buf[1] || buf.length < 3 + buf[1] + buf[2 + buf[1]]) return
        const u = buf.subarray(2, 2 + buf[1]).toString()
        const p = buf.subarray(3 + buf[1], 3 + buf[1] + buf[2 + buf[1]]).toString()
        buf = buf.subarray(3 + buf[1] + buf[2 + buf[1]])
        if (u !== user || p !== pass) { c.end(Buffer.from([1, 1])); return }
        c.write(Buffer.from([1, 0]))
        step = 'connect'
      }
      if (step === 'connect') {
        if (buf.length < 5) return
        let host, off
        if (buf[3] === 1) { if (buf.length < 10) return; host = [...buf.subarray(4, 8)].join('.'); off = 8 }
        else if (buf[3] === 3) { if (buf.length < 7 + buf[4]) return; host = buf.subarray(5, 5 + buf[4]).toString(); off = 5 + buf[4] }
        else { c.end(Buffer.from([5, 8, 0, 1, 0, 0, 0, 0, 0, 0])); return }
        const port = buf.readUInt16BE(off)
        const rest = buf.subarray(off + 2)
        step = 'relay'
        c.off('data', onData)
        targets.push(`${host}:${port}`)
        console.log(JSON.stringify({ target: `${host}:${port}` }))
        const up = net.connect({ host: hosts[host] ?? host, port, localAddress: addr }, () => {
          c.write(Buffer.from([5, 0, 0, 1, 0, 0, 0, 0, 0, 0]))
          if (rest.length) up.write(rest)
          c.pipe(up)
          up.pipe(c)
        })
        up.on('error', () => c.end(Buffer.from([5, 5, 0, 1, 0, 0, 0, 0, 0, 0])))
      }
    }
    c.on('data', onData)
  }).listen(1080, addr)
}

/** Asks server (UDP 53) for name's A record from the host; the address or undefined (a CNAME's target's address). */
export async function resolveA (server, name) {
  const { Resolver } = await import('node:dns/promises')
  const r = new Resolver({ timeout: 1000, tries: 1 })
  r.setServers([server])
  try { return (await r.resolve4(name))[0] } catch { return undefined }
}
