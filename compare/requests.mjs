// Request sets for load generators, drawn from the follow graph of a Jetstream file, in the
// format of crates/starling-bench's `grpc-requests`: NAME.json (a JSON array, for ghz
// --data-file) and NAME.bin (each message as protobuf behind its little-endian u32 length, for
// grpc-load). Sets: `timeline` (GetTimeline, limit 50, viewers who follow someone) and
// `follows-following` (GetFollowsFollowing: a viewer and 25 distinct targets among the 500
// most-followed accounts).
//
//   <node 22> compare/requests.mjs FILE.jsonl[.zst] --out DIR [--requests 1000] [--seed 7]
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { readEvents } from './jetstream.mjs'
import { fail, importBsky } from './lib.mjs'

const { values, positionals } = parseArgs({
  options: { out: { type: 'string' }, requests: { type: 'string', default: '1000' }, seed: { type: 'string', default: '7' } },
  allowPositionals: true,
})
if (positionals.length !== 1 || !values.out) fail('usage: compare/requests.mjs FILE.jsonl[.zst] --out DIR [--requests N] [--seed N]')
const { GetTimelineRequest, GetFollowsFollowingRequest } = await importBsky('proto/bsky_pb.js')

// The live follows at the end of the file: follow URI -> [creator, subject].
const follows = new Map()
for await (const { event } of readEvents(positionals[0])) {
  const c = event?.commit
  if (c?.collection !== 'app.bsky.graph.follow') continue
  const uri = `${event.did}/${c.rkey}`
  if (c.operation === 'delete') follows.delete(uri)
  else if (typeof c.record?.subject === 'string') follows.set(uri, [event.did, c.record.subject])
}
const viewers = [...new Set([...follows.values()].map(([creator]) => creator))].sort()
const followers = new Map()
for (const [, subject] of follows.values()) followers.set(subject, (followers.get(subject) ?? 0) + 1)
const top = [...followers].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(0, 500).map(([did]) => did)
if (!viewers.length || top.length < 25) fail('requests: the file has too few follows')

let state = Number(values.seed) >>> 0
const rand = () => {
  state = (state + 0x6d2b79f5) >>> 0
  let t = Math.imul(state ^ (state >>> 15), state | 1)
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}
const pick = (arr) => arr[Math.floor(rand() * arr.length)]

const n = Number(values.requests)
const sets = {
  timeline: Array.from({ length: n }, () => new GetTimelineRequest({ actorDid: pick(viewers), limit: 50 })),
  'follows-following': Array.from({ length: n }, () => {
    const targets = new Set()
    while (targets.size < 25) targets.add(pick(top))
    return new GetFollowsFollowingRequest({ actorDid: pick(viewers), targetDids: [...targets] })
  }),
}
mkdirSync(values.out, { recursive: true })
for (const [name, messages] of Object.entries(sets)) {
  writeFileSync(join(values.out, `${name}.json`), `${JSON.stringify(messages.map((m) => m.toJson()))}\n`)
  const parts = messages.flatMap((m) => {
    const bytes = m.toBinary()
    const len = Buffer.alloc(4)
    len.writeUInt32LE(bytes.length)
    return [len, Buffer.from(bytes)]
  })
  writeFileSync(join(values.out, `${name}.bin`), Buffer.concat(parts))
}
process.stdout.write(`requests: ${n} per set in ${values.out} (${viewers.length} viewers, ${follows.size} follows)\n`)
