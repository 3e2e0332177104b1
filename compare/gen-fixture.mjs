// A deterministic synthetic Jetstream v1 file with valid lexicon records and real CIDs, for
// the bulk-vs-indexer test and for timing the reference indexer when no other generator is at
// hand. It exercises what the reference indexer treats specially: profile creates and updates,
// follows and unfollows, duplicate follows/likes/reposts (duplicate_record, promoted when the
// original is deleted), replies (valid and with a wrong root), quotes, image / external /
// record-with-media embeds, post deletes of quoted, replied-to and reposted posts, blocks and
// unblocks, handle changes and a handle taken over by another account, account events
// (deactivated, reactivated, takendown, deleted, and an unknown status the reference rejects),
// an invalid record, a record of a collection the reference does not index, and lists with
// their items at the end (see `lists` below).
//
//   node compare/gen-fixture.mjs --out FILE.jsonl[.zst] [--actors 200] [--follows 30]
//        [--posts 10] [--likes 20] [--reposts 3] [--seed 1]
// (--follows, --posts, --likes, --reposts are per actor, on average.)
import { spawn } from 'node:child_process'
import { createHash } from 'node:crypto'
import { createWriteStream } from 'node:fs'
import { parseArgs } from 'node:util'

const B32 = 'abcdefghijklmnopqrstuvwxyz234567'
function base32(bytes) {
  let out = ''
  let bits = 0
  let value = 0
  for (const byte of bytes) {
    value = (value << 8) | byte
    bits += 8
    while (bits >= 5) {
      out += B32[(value >>> (bits - 5)) & 31]
      bits -= 5
    }
  }
  if (bits > 0) out += B32[(value << (5 - bits)) & 31]
  return out
}

/** A CIDv1 (sha2-256) of `text`: dag-cbor codec for records, raw for blobs. */
export function cidOf(text, codec = 0x71) {
  const digest = createHash('sha256').update(text).digest()
  return `b${base32(Buffer.concat([Buffer.from([0x01, codec, 0x12, 0x20]), digest]))}`
}

/** mulberry32: a small deterministic PRNG. */
function prng(seed) {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** Generates the events in file order, yielding them in small arrays. */
export function* generate({ actors = 200, follows = 30, posts = 10, likes = 20, reposts = 3, seed = 1 }) {
  const batch = []
  const emit = (event) => batch.push(event)
  const rand = prng(seed)
  const pick = (arr) => arr[Math.floor(rand() * arr.length)]
  const chance = (p) => rand() < p
  let timeUs = 1725148800000000 // 2024-09-01T00:00:00Z
  const tick = () => (timeUs += 1000 + Math.floor(rand() * 2000)) // >= 1 ms apart: distinct indexedAt
  const iso = () => new Date(Math.floor(timeUs / 1000)).toISOString()
  let tidCounter = 0
  const tid = () => {
    // 13 base32-sortable chars from a counter: unique, and valid TIDs.
    const S32 = '234567abcdefghijklmnopqrstuvwxyz'
    let n = BigInt(timeUs) * 1024n + BigInt(tidCounter++ % 1024)
    let s = ''
    for (let i = 0; i < 13; i++) {
      s = S32[Number(n & 31n)] + s
      n >>= 5n
    }
    return s
  }
  const dids = Array.from({ length: actors }, (_, i) => `did:plc:${base32(createHash('sha256').update(`actor${seed}:${i}`).digest()).slice(0, 24)}`)
  const handleOf = new Map(dids.map((did, i) => [did, `user${i}.fixture.test`]))
  const live = { posts: [], follows: new Map(), followKeys: [], likes: [], reposts: [], blocks: [] }
  const blob = (i) => ({ $type: 'blob', ref: { $link: cidOf(`blob${i}`, 0x55) }, mimeType: 'image/jpeg', size: 1000 + i })

  const commit = (did, operation, collection, rkey, record) => {
    tick()
    const c = { rev: tid(), operation, collection, rkey }
    if (record) {
      c.record = record
      c.cid = cidOf(JSON.stringify(record))
    }
    emit({ did, time_us: timeUs, kind: 'commit', commit: c })
    return c.cid ? { uri: `at://${did}/${collection}/${rkey}`, cid: c.cid } : null
  }
  const identity = (did, handle) => {
    tick()
    const ev = { did, time_us: timeUs, kind: 'identity', identity: { did, seq: timeUs, time: iso() } }
    if (handle) ev.identity.handle = handle
    emit(ev)
  }
  const account = (did, active, status) => {
    tick()
    const ev = { did, time_us: timeUs, kind: 'account', account: { active, did, seq: timeUs, time: iso() } }
    if (status) ev.account.status = status
    emit(ev)
  }
  const profile = (did, i, operation, extra = {}) =>
    commit(did, operation, 'app.bsky.actor.profile', 'self', {
      $type: 'app.bsky.actor.profile',
      displayName: `Fixture user ${i}`,
      description: `Account number ${i}`,
      createdAt: iso(),
      ...extra,
    })
  const post = (did, text, extra = {}) => {
    const ref = commit(did, 'create', 'app.bsky.feed.post', tid(), {
      $type: 'app.bsky.feed.post',
      text,
      langs: ['en'],
      createdAt: new Date(Math.floor(timeUs / 1000) - Math.floor(rand() * 5000)).toISOString(),
      ...extra,
    })
    live.posts.push({ ...ref, did, reply: extra.reply })
    return ref
  }
  const strongRef = (p) => ({ uri: p.uri, cid: p.cid })

  // Accounts: identity, then a profile (some with an avatar).
  dids.forEach((did, i) => {
    identity(did, handleOf.get(did))
    profile(did, i, 'create', i % 7 === 0 ? { avatar: blob(i) } : {})
  })
  yield batch.splice(0)

  const nSteps = actors * (follows + posts + likes + reposts)
  for (let step = 0; step < nSteps; step++) {
    const did = pick(dids)
    const r = rand() * (follows + posts + likes + reposts)
    if (r < follows) {
      const subject = pick(dids)
      if (subject === did) continue
      const ref = commit(did, 'create', 'app.bsky.graph.follow', tid(), { $type: 'app.bsky.graph.follow', subject, createdAt: iso() })
      const key = `${did} ${subject}`
      if (!live.follows.has(key)) {
        live.follows.set(key, [])
        live.followKeys.push(key)
      }
      live.follows.get(key).push(ref.uri)
    } else if (r < follows + posts || live.posts.length < 5) {
      const kind = rand()
      const target = live.posts.length ? pick(live.posts) : null
      if (target && kind < 0.25) {
        // A reply: usually well formed; sometimes with a root that is not the parent's root.
        const root = target.reply?.root ?? strongRef(target)
        const wrongRoot = chance(0.1) && live.posts.length > 1 ? strongRef(pick(live.posts)) : root
        post(did, `reply ${step}`, { reply: { root: wrongRoot, parent: strongRef(target) } })
      } else if (target && kind < 0.35) {
        post(did, `quote ${step}`, { embed: { $type: 'app.bsky.embed.record', record: strongRef(target) } })
      } else if (target && kind < 0.4) {
        post(did, `quote with media ${step}`, {
          embed: {
            $type: 'app.bsky.embed.recordWithMedia',
            record: { $type: 'app.bsky.embed.record', record: strongRef(target) },
            media: { $type: 'app.bsky.embed.images', images: [{ alt: 'a picture', image: blob(step) }] },
          },
        })
      } else if (kind < 0.5) {
        post(did, `pictures ${step}`, {
          embed: { $type: 'app.bsky.embed.images', images: [{ alt: 'one', image: blob(step) }, { alt: 'two', image: blob(step + 1) }] },
        })
      } else if (kind < 0.55) {
        post(did, `link ${step}`, {
          embed: { $type: 'app.bsky.embed.external', external: { uri: `https://example.com/${step}`, title: `Page ${step}`, description: 'A page' } },
        })
      } else {
        post(did, `post ${step} with a mention`, {
          facets: [{ index: { byteStart: 0, byteEnd: 4 }, features: [{ $type: 'app.bsky.richtext.facet#mention', did: pick(dids) }] }],
        })
      }
    } else if (r < follows + posts + likes) {
      const subject = pick(live.posts)
      const ref = commit(did, 'create', 'app.bsky.feed.like', tid(), { $type: 'app.bsky.feed.like', subject: strongRef(subject), createdAt: iso() })
      live.likes.push({ ...ref, did, subject: strongRef(subject) })
    } else {
      const subject = pick(live.posts)
      const ref = commit(did, 'create', 'app.bsky.feed.repost', tid(), { $type: 'app.bsky.feed.repost', subject: strongRef(subject), createdAt: iso() })
      live.reposts.push({ ...ref, did, subject: strongRef(subject) })
    }

    // Occasional special events, in proportion to the file's size.
    const every = (n) => step % n === n - 1
    if (every(97)) {
      // Unfollow: the original of a duplicated pair when there is one (promotes the duplicate).
      const key = live.followKeys.length ? pick(live.followKeys) : null
      const uris = key ? live.follows.get(key) : []
      if (uris.length) {
        const [author] = key.split(' ')
        commit(author, 'delete', 'app.bsky.graph.follow', uris.shift().split('/').pop())
      }
    }
    if (every(89) && live.likes.length) {
      // An unlike (of the original, if the like was duplicated: the duplicate is promoted).
      const [victim] = live.likes.splice(Math.floor(rand() * live.likes.length), 1)
      commit(victim.did, 'delete', 'app.bsky.feed.like', victim.uri.split('/').pop())
    }
    if (every(83) && live.posts.length > 10) {
      // A post delete (it may be quoted, replied to, reposted or liked).
      const idx = Math.floor(rand() * live.posts.length)
      const [victim] = live.posts.splice(idx, 1)
      commit(victim.did, 'delete', 'app.bsky.feed.post', victim.uri.split('/').pop())
    }
    if (every(79) && live.reposts.length) {
      const idx = Math.floor(rand() * live.reposts.length)
      const [victim] = live.reposts.splice(idx, 1)
      commit(victim.did, 'delete', 'app.bsky.feed.repost', victim.uri.split('/').pop())
    }
    if (every(101)) {
      const subject = pick(dids)
      if (subject !== did) {
        const ref = commit(did, 'create', 'app.bsky.graph.block', tid(), { $type: 'app.bsky.graph.block', subject, createdAt: iso() })
        live.blocks.push({ ...ref, did })
      }
    }
    if (every(307) && live.blocks.length) {
      const [victim] = live.blocks.splice(Math.floor(rand() * live.blocks.length), 1)
      commit(victim.did, 'delete', 'app.bsky.graph.block', victim.uri.split('/').pop())
    }
    if (every(211)) {
      // A profile update.
      const i = dids.indexOf(did)
      profile(did, i, 'update', { displayName: `Renamed ${i} at ${step}`, banner: blob(step) })
    }
    if (every(401)) {
      // Duplicates: the same actor follows, likes and reposts the same subjects again.
      const dupKey = live.followKeys.length ? pick(live.followKeys) : null
      const dupFollow = dupKey && live.follows.get(dupKey).length === 1 ? [dupKey, live.follows.get(dupKey)] : null
      if (dupFollow) {
        const [author, subject] = dupFollow[0].split(' ')
        const ref = commit(author, 'create', 'app.bsky.graph.follow', tid(), { $type: 'app.bsky.graph.follow', subject, createdAt: iso() })
        dupFollow[1].push(ref.uri)
      }
      for (const [list, collection] of [
        [live.likes, 'app.bsky.feed.like'],
        [live.reposts, 'app.bsky.feed.repost'],
      ]) {
        if (!list.length) continue
        const original = pick(list)
        const ref = commit(original.did, 'create', collection, tid(), { $type: collection, subject: original.subject, createdAt: iso() })
        list.push({ ...ref, did: original.did, subject: original.subject })
      }
    }
    if (every(503)) {
      // A handle change; every other time, this account takes over another one's handle.
      const i = dids.indexOf(did)
      const other = pick(dids)
      const handle = every(1006) && other !== did ? handleOf.get(other) : `renamed${i}-${step}.fixture.test`
      handleOf.set(did, handle)
      identity(did, handle)
    }
    if (every(1009)) {
      // Account status changes.
      const victim = pick(dids)
      account(victim, false, 'deactivated')
      account(victim, true)
      account(pick(dids), false, 'takendown')
      account(pick(dids), false, 'desynchronized') // unknown to the reference: fails
    }
    if (every(2003)) account(pick(dids), false, 'deleted')
    if (every(1201)) {
      // A record the lexicon rejects, and one of a collection nobody indexes.
      commit(did, 'create', 'app.bsky.feed.post', tid(), { $type: 'app.bsky.feed.post', createdAt: iso() })
      commit(did, 'create', 'com.example.fixture.thing', tid(), { $type: 'com.example.fixture.thing', createdAt: iso() })
    }
    if (every(5000)) timeUs += 2 * 3600 * 1_000_000 // Two hours pass: null handles get rechecked.
    if (batch.length) yield batch.splice(0)
  }
  yield* lists({ dids, commit, pick, rand, iso, tid, blob, batch })
}

/**
 * Lists after everything else (so the events before them are what they were before lists were
 * added): curation and moderation lists, one with an avatar and a description facet, items
 * (an actor listed twice in one list is a duplicate, promoted when the first is deleted; an
 * item naming another's list is rejected), item deletes and one list delete (its items stay,
 * as the reference does not cascade).
 */
function* lists({ dids, commit, pick, rand, iso, tid, blob, batch }) {
  const nLists = Math.max(3, Math.floor(dids.length / 10))
  for (let i = 0; i < nLists; i++) {
    const owner = pick(dids)
    const record = {
      $type: 'app.bsky.graph.list',
      purpose: i % 3 === 2 ? 'app.bsky.graph.defs#modlist' : 'app.bsky.graph.defs#curatelist',
      name: `Fixture list ${i}`,
      createdAt: iso(),
    }
    if (i === 0) {
      record.avatar = blob(i)
      record.description = `Listed by ${owner}`
      record.descriptionFacets = [{ index: { byteStart: 10, byteEnd: 20 }, features: [{ $type: 'app.bsky.richtext.facet#mention', did: owner }] }]
    }
    const list = commit(owner, 'create', 'app.bsky.graph.list', tid(), record)
    const items = []
    const size = 1 + Math.floor(rand() * rand() * 30)
    for (let k = 0; k < size; k++) {
      const subject = k === 2 ? items[0].subject : pick(dids)
      const item = commit(owner, 'create', 'app.bsky.graph.listitem', tid(), { $type: 'app.bsky.graph.listitem', subject, list: list.uri, createdAt: iso() })
      items.push({ ...item, subject })
    }
    if (i === 1) {
      // Someone else adds to this list: the reference rejects it.
      commit(pick(dids), 'create', 'app.bsky.graph.listitem', tid(), { $type: 'app.bsky.graph.listitem', subject: owner, list: list.uri, createdAt: iso() })
    }
    for (const item of items.filter((_, k) => k === 0 || rand() < 0.1)) {
      commit(owner, 'delete', 'app.bsky.graph.listitem', item.uri.split('/').pop())
    }
    if (i === nLists - 1) commit(owner, 'delete', 'app.bsky.graph.list', list.uri.split('/').pop())
    yield batch.splice(0)
  }
}

async function main() {
  const { values } = parseArgs({
    options: {
      out: { type: 'string' },
      actors: { type: 'string', default: '200' },
      follows: { type: 'string', default: '30' },
      posts: { type: 'string', default: '10' },
      likes: { type: 'string', default: '20' },
      reposts: { type: 'string', default: '3' },
      seed: { type: 'string', default: '1' },
    },
  })
  if (!values.out) {
    process.stderr.write('usage: node compare/gen-fixture.mjs --out FILE.jsonl[.zst] [--actors N] [--follows N] [--posts N] [--likes N] [--reposts N] [--seed N]\n')
    process.exit(2)
  }
  const opts = Object.fromEntries(Object.entries(values).filter(([k]) => k !== 'out').map(([k, v]) => [k, Number(v)]))
  let sink
  let done
  if (values.out.endsWith('.zst')) {
    const child = spawn('zstd', ['-q', '-f', '-3', '-o', values.out], { stdio: ['pipe', 'inherit', 'inherit'] })
    sink = child.stdin
    done = new Promise((resolve, reject) => child.on('exit', (code) => (code ? reject(new Error(`zstd failed (${code})`)) : resolve())))
  } else {
    sink = createWriteStream(values.out)
    done = new Promise((resolve) => sink.on('finish', resolve))
  }
  let buffer = ''
  let n = 0
  for (const events of generate(opts)) {
    for (const event of events) buffer += `${JSON.stringify(event)}\n`
    n += events.length
    if (buffer.length > 1 << 20) {
      if (!sink.write(buffer)) await new Promise((resolve) => sink.once('drain', resolve))
      buffer = ''
    }
  }
  sink.write(buffer)
  sink.end()
  await done
  process.stderr.write(`gen-fixture: ${n} events to ${values.out}\n`)
}

if (import.meta.url === `file://${process.argv[1]}`) await main()
