// A minimal POSIX ustar writer for the build context (regular files only).
const te = new TextEncoder()

function field (buf, off, len, str) {
  const b = te.encode(str)
  buf.set(b.subarray(0, len), off)
}

function octal (n, len) {
  return n.toString(8).padStart(len - 1, '0') + '\0'
}

/** files: [{name, data: Uint8Array|string}] → Uint8Array tar archive. */
export function tar (files) {
  const parts = []
  for (const f of files) {
    const data = typeof f.data === 'string' ? te.encode(f.data) : f.data
    if (te.encode(f.name).length > 100) throw new Error(`file name too long for tar: ${f.name}`)
    const h = new Uint8Array(512)
    field(h, 0, 100, f.name)
    field(h, 100, 8, octal(0o644, 8))
    field(h, 108, 8, octal(0, 8))
    field(h, 116, 8, octal(0, 8))
    field(h, 124, 12, octal(data.length, 12))
    field(h, 136, 12, octal(Math.floor(Date.now() / 1000), 12))
    field(h, 148, 8, '        ') // checksum placeholder (spaces)
    h[156] = 0x30 // '0' regular file
    field(h, 257, 6, 'ustar\0')
    field(h, 263, 2, '00')
    let sum = 0
    for (const b of h) sum += b
    field(h, 148, 8, sum.toString(8).padStart(6, '0') + '\0 ')
    parts.push(h, data)
    const pad = (512 - (data.length % 512)) % 512
    if (pad) parts.push(new Uint8Array(pad))
  }
  parts.push(new Uint8Array(1024))
  const out = new Uint8Array(parts.reduce((a, p) => a + p.length, 0))
  let off = 0
  for (const p of parts) { out.set(p, off); off += p.length }
  return out
}
