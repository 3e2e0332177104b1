// Notifications on both dataplanes, on the same data: checks every listed recipient's whole
// notification list (GetNotifications, with and without priority, every page) for equal
// content. The content sets (compare/content.mjs, `notifications` and `unread-count`) check
// first pages and unread counts against the data; this adds the pages after the first
// (Starling's cursors) and every recipient, by comparing the two systems with each other.
//
//   <node 22> compare/notifications.mjs --reference http://127.0.0.1:P --starling 127.0.0.1:Q < dids.json
//
// Compared per notification: record URI, reason, reason subject, timestamp (to the
// millisecond: the reference stores milliseconds) and priority; lists as sets in newest-first
// order of timestamps (ties may come in any order). Prints one JSON line (recipients, notified,
// notifications); exits 1 on the first difference, naming it.
import { fail, parseFlags } from './lib.mjs'
import { referenceClient, starlingClient } from './rpc.mjs'

process.noDeprecation = true

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
  const usage = 'usage: notifications.mjs --reference URL --starling ADDR < dids.json'
  const known = { reference: 'string', starling: 'string' }
  const flags = parseFlags(process.argv.slice(2), known, usage)
  if (!flags.reference || !flags.starling) fail(usage)
  let text = ''
  for await (const chunk of process.stdin) text += chunk
  const dids = JSON.parse(text)
  const { client: reference } = await referenceClient(flags.reference)
  const starling = await starlingClient(flags.starling)
  let nNotifications = 0
  let nNotified = 0
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
        if (want.length > 0) nNotified += 1
      }
    }
  }
  if (nNotified === 0) fail('nobody has notifications: the data exercises nothing')
  process.stdout.write(`${JSON.stringify({ recipients: dids.length, notified: nNotified, notifications: nNotifications })}\n`)
}

await main()
