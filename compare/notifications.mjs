// Notifications on both dataplanes, on the same data: checks every listed recipient's whole
// notification list (GetNotifications, with and without priority) and unread
// count (GetUnreadNotificationCount) for equal content, then writes the request sets the load
// runs use, with each GetNotifications answer's expected size taken from the checked answers.
//
//   <node 22> compare/notifications.mjs --reference http://127.0.0.1:P --starling 127.0.0.1:Q \
//       --out DIR --requests N --limit L < dids.json
//
// Compared per notification: record URI, reason, reason subject, timestamp (to the
// millisecond: the reference stores milliseconds) and priority; lists as sets in newest-first
// order of timestamps (ties may come in any order). An unread count is compared with
// Starling's bound (10,000) applied to the reference's. Prints one JSON line (recipients,
// notifications, unread); exits 1 on the first difference, naming it.
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fail, parseFlags } from './lib.mjs'
import { referenceClient, starlingClient } from './rpc.mjs'

process.noDeprecation = true

const UNREAD_COUNT_MAX = 10_000
const PAGE = 50

async function all(client, actorDid, priority, limit) {
  const res = []
  let cursor = ''
  for (let page = 0; page < 10_000; page++) {
    const out = await client.getNotifications({ actorDid, limit, cursor, priority })
    for (const n of out.notifications) {
      const ms = Number(n.timestamp.seconds) * 1000 + Math.floor(n.timestamp.nanos / 1e6)
      res.push([ms, n.uri, n.reason, n.reasonSubject, n.priority])
    }
    if (!out.cursor || out.notifications.length === 0) return res
    cursor = out.cursor
  }
  throw new Error(`${actorDid}: the pages never end`)
}

const key = (n) => JSON.stringify(n)
function same(a, b) {
  if (a.length !== b.length) return false
  if (a.some((n, i) => n[0] !== b[i][0])) return false
  const sa = a.map(key).sort()
  const sb = b.map(key).sort()
  return sa.every((n, i) => n === sb[i])
}

async function main() {
  const usage = 'usage: notifications.mjs --reference URL --starling ADDR --out DIR [--requests N] [--limit L] < dids.json'
  const known = { reference: 'string', starling: 'string', out: 'string', requests: 'string', limit: 'string' }
  const flags = { requests: '100', limit: '50', ...parseFlags(process.argv.slice(2), known, usage) }
  if (!flags.reference || !flags.starling || !flags.out) fail(usage)
  let text = ''
  for await (const chunk of process.stdin) text += chunk
  const dids = JSON.parse(text)
  const { client: reference, Service } = await referenceClient(flags.reference)
  const starling = await starlingClient(flags.starling)
  let nNotifications = 0
  let nUnread = 0
  const sizes = []
  for (const did of dids) {
    for (const priority of [false, true]) {
      // The reference's cursor is a millisecond timestamp, and its next page starts below it:
      // notifications sharing the last one's millisecond would be skipped, so it is read in
      // one page. Starling is read in pages of 50.
      const want = await all(reference, did, priority, 100_000)
      const have = await all(starling, did, priority, PAGE)
      if (!same(have, want)) {
        const wantKeys = new Set(want.map(key))
        const haveKeys = new Set(have.map(key))
        const onlyHave = have.filter((n) => !wantKeys.has(key(n))).slice(0, 5)
        const onlyWant = want.filter((n) => !haveKeys.has(key(n))).slice(0, 5)
        fail(`${did}${priority ? ' (priority)' : ''}: starling lists ${have.length} notifications, the reference ${want.length}\n` +
          `only starling:  ${JSON.stringify(onlyHave)}\nonly reference: ${JSON.stringify(onlyWant)}`)
      }
      if (!priority) {
        nNotifications += want.length
        if (want.length > 0) sizes.push([did, want.length])
      }
    }
    const wantCount = Math.min((await reference.getUnreadNotificationCount({ actorDid: did })).count, UNREAD_COUNT_MAX)
    const haveCount = (await starling.getUnreadNotificationCount({ actorDid: did })).count
    if (haveCount !== wantCount) fail(`${did}: starling counts ${haveCount} unread, the reference ${wantCount}`)
    nUnread += wantCount
  }
  if (sizes.length === 0) fail('nobody has notifications: the data exercises nothing')
  const limit = Number(flags.limit)
  const n = Number(flags.requests)
  const write = (name, method, make, expect) => {
    const info = Service.methods[method]
    const frames = []
    const json = []
    let expectText = ''
    for (let i = 0; i < n; i++) {
      const [did, size] = sizes[i % sizes.length]
      const request = make(did)
      json.push(JSON.stringify(request))
      const bytes = info.I.fromJson(request).toBinary()
      const len = Buffer.alloc(4)
      len.writeUInt32LE(bytes.length)
      frames.push(len, Buffer.from(bytes))
      if (expect) expectText += `1 m ${Math.min(size, limit)}\n`
    }
    writeFileSync(join(flags.out, `${name}.bin`), Buffer.concat(frames))
    writeFileSync(join(flags.out, `${name}.json`), `[\n${json.join(',\n')}\n]\n`)
    if (expect) writeFileSync(join(flags.out, `${name}.expect`), expectText)
  }
  write('notifications', 'getNotifications', (did) => ({ actorDid: did, limit }), true)
  write('unread-count', 'getUnreadNotificationCount', (did) => ({ actorDid: did }), false)
  process.stdout.write(`${JSON.stringify({ recipients: dids.length, notified: sizes.length, notifications: nNotifications, unread: nUnread })}\n`)
}

await main()
