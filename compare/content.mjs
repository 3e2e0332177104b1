// The content check of the request sets compare-requests writes with their expected answers
// (GetActorLikes, GetListMembers, GetFollowers, SearchActors, GetInteractionCounts,
// GetCountsForUsers): every request of each set is sent once to both dataplanes, and each
// answer is compared with what the generated file says it must be.
//
//   <node 22> compare/content.mjs --reference http://127.0.0.1:P --starling 127.0.0.1:Q \
//       --dir DIR --sets actor-likes,list-members,followers,search-actors,...
//
// DIR/SET.content.jsonl holds one line per request: {"method", "request", "expect"} (see
// crates/starling-bench/src/content.rs for how the expectations follow the reference's
// queries). An answer is right when:
// - a page (GetActorLikes, GetListMembers, GetFollowers) has the expected size, every entry is
//   an expected one (URI and subject: the liked record, the member DID, the follower), none
//   repeats, the entries come
//   newest `sortAt` first, and every expected entry newer than the page's last millisecond is
//   there (entries of that last millisecond may be any of the tied ones: the engines break
//   ties differently);
// - a search (SearchActors) holds the expected actor and min(matches, limit) actors (the
//   engines rank differently, so the order is not checked);
// - counts (GetInteractionCounts: likes, reposts, replies, quotes; GetCountsForUsers:
//   followers, following, posts) are each exactly the expected one, item by item.
// Prints one JSON line per set ({set, requests, starling, reference}: wrong answers on each)
// and the first mismatches on stderr; exits 1 if any answer was wrong or failed.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fail, parseFlags } from './lib.mjs'
import { referenceClient, starlingClient } from './rpc.mjs'

process.noDeprecation = true

// Requests in flight per dataplane: the check sends a few thousand and should not take long.
const IN_FLIGHT = 8
// Mismatches printed per set and system, and the characters of each request shown (a count
// request names 25 posts or actors; the mismatch names the one at fault).
const SHOWN = 5
const SHOWN_CHARS_MAX = 200

/** The entries of an answer as [uri, subject] pairs, by method. */
function entries(method, res) {
  if (method === 'getActorLikes') return res.likes.map((like) => [like.uri, like.subject])
  if (method === 'getListMembers') return res.listitems.map((item) => [item.uri, item.did])
  if (method === 'getFollowers') return res.followers.map((follow) => [follow.uri, follow.actorDid])
  throw new Error(`no page check for ${method}`)
}

/** Why a page is wrong, or null. */
function checkPage(method, res, expect) {
  const have = entries(method, res)
  const known = new Map([...expect.page, ...expect.tied].map(([uri, subject, ms]) => [uri, { subject, ms }]))
  if (have.length !== expect.page.length) return `${have.length} entries, expected ${expect.page.length}`
  const seen = new Set()
  let lastMs = Infinity
  for (const [uri, subject] of have) {
    const want = known.get(uri)
    if (!want) return `unexpected entry ${uri}`
    if (want.subject !== subject) return `${uri} names ${subject}, expected ${want.subject}`
    if (seen.has(uri)) return `${uri} twice`
    if (want.ms > lastMs) return `${uri} (sortAt ${want.ms}) after an older entry (${lastMs}): not newest first`
    seen.add(uri)
    lastMs = want.ms
  }
  const boundaryMs = Math.min(...expect.page.map(([, , ms]) => ms))
  const missing = expect.page.filter(([uri, , ms]) => ms > boundaryMs && !seen.has(uri))
  if (missing.length) return `missing ${missing.length} newer entries, e.g. ${missing[0][0]}`
  return null
}

/** Why a search answer is wrong, or null. */
function checkSearch(res, expect, request) {
  const want = Math.min(expect.matches, request.limit)
  if (!res.dids.includes(expect.did)) return `${expect.did} not in the ${res.dids.length} actors found`
  if (res.dids.length !== want) return `${res.dids.length} actors, expected ${want} (${expect.matches} handles match)`
  return null
}

/** Why an answer of counts is wrong, or null: every expected field, item by item. */
function checkCounts(res, expect, request) {
  const items = request.refs ? request.refs.map((ref) => ref.uri) : request.dids
  for (const [field, want] of Object.entries(expect)) {
    const have = res[field] ?? []
    if (have.length !== want.length) return `${have.length} ${field}, expected ${want.length}`
    const idx = want.findIndex((count, i) => Number(have[i]) !== count)
    if (idx >= 0) return `${field} of ${items[idx]}: ${have[idx]}, expected ${want[idx]}`
  }
  return null
}

async function checkOne(client, { method, request, expect }) {
  let res
  try {
    res = await client[method](request)
  } catch (err) {
    return `failed: ${err?.message ?? err}`
  }
  if (method === 'searchActors') return checkSearch(res, expect, request)
  if (method === 'getInteractionCounts' || method === 'getCountsForUsers') return checkCounts(res, expect, request)
  return checkPage(method, res, expect)
}

/** Checks every line on one client; returns [line index, why] per wrong answer. */
async function checkAll(client, lines) {
  const wrong = []
  let next = 0
  const worker = async () => {
    while (next < lines.length) {
      const idx = next++
      const why = await checkOne(client, lines[idx])
      if (why) wrong.push([idx, why])
    }
  }
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker))
  return wrong.sort((a, b) => a[0] - b[0])
}

async function main() {
  const usage = 'usage: content.mjs --reference URL --starling ADDR --dir DIR --sets SET[,SET...]'
  const known = { reference: 'string', starling: 'string', dir: 'string', sets: 'string' }
  const flags = parseFlags(process.argv.slice(2), known, usage)
  if (!flags.reference || !flags.starling || !flags.dir || !flags.sets) fail(usage)
  const sets = flags.sets.split(',')
  const systems = {
    starling: await starlingClient(flags.starling),
    reference: (await referenceClient(flags.reference)).client,
  }
  let nWrong = 0
  for (const set of sets) {
    const text = readFileSync(join(flags.dir, `${set}.content.jsonl`), 'utf8')
    const lines = text.split('\n').filter(Boolean).map((line) => JSON.parse(line))
    if (!lines.length) fail(`${set}: no requests to check`)
    const summary = { set, requests: lines.length }
    for (const [name, client] of Object.entries(systems)) {
      const wrong = await checkAll(client, lines)
      summary[name] = wrong.length
      nWrong += wrong.length
      for (const [idx, why] of wrong.slice(0, SHOWN)) {
        const request = JSON.stringify(lines[idx].request)
        const shown = request.length > SHOWN_CHARS_MAX ? `${request.slice(0, SHOWN_CHARS_MAX)}…` : request
        process.stderr.write(`content: ${set} ${name}: request ${idx} ${shown}: ${why}\n`)
      }
    }
    process.stdout.write(`${JSON.stringify(summary)}\n`)
  }
  process.exit(nWrong ? 1 : 0)
}

await main()
