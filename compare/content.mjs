// The content check of the request sets compare-requests writes with their expected answers
// (GetActorLikes, GetListMembers, GetFollowers, GetTimeline, GetAuthorFeed,
// GetFollowsFollowing, SearchActors, GetInteractionCounts, GetCountsForUsers, GetNotifications,
// GetUnreadNotificationCount): every request of each set is sent once to both dataplanes, and
// each answer is compared with what the generated file says it must be.
//
//   <node 22> compare/content.mjs --reference http://127.0.0.1:P --starling 127.0.0.1:Q \
//       --dir DIR --sets actor-likes,list-members,followers,search-actors,...
//   <node 22> compare/content.mjs --starling 127.0.0.1:Q --as cassandra --dir DIR --sets timeline
//
// DIR/SET.content.jsonl holds one line per request: {"method", "request", "expect"} (see
// crates/starling-bench/src/content.rs and content/ for how the expectations follow the
// reference's queries). An answer is right when:
// - a page (GetActorLikes, GetListMembers, GetFollowers, GetTimeline, GetAuthorFeed,
//   GetNotifications) has the expected size, every entry is an expected one (URI and subject:
//   the liked record, the member DID, the follower; a feed item's URI is the repost's for a
//   repost, else the post's, and its subject the post; a notification's URI is its record's,
//   and its subject `REASON REASON-SUBJECT PRIORITY MS`, `-` for no reason subject, MS its
//   timestamp cut to the millisecond), none repeats, the entries come newest `sortAt` first, and
//   every expected entry newer than the page's last millisecond is there (entries of that last
//   millisecond may be any of the tied ones: the engines break ties differently);
// - known followers (GetFollowsFollowing, one target) are the expected target and exactly the
//   expected accounts, in any order (the reference's query has no order);
// - a search (SearchActors) holds the expected actor and min(matches, limit) actors (the
//   engines rank differently, so the order is not checked);
// - counts (GetInteractionCounts: likes, reposts, replies, quotes; GetCountsForUsers:
//   followers, following, posts) are each exactly the expected one, item by item, and an
//   unread count (GetUnreadNotificationCount) is exactly `expect.count`.
// Each request is sent as the exact bytes of message i of DIR/SET.bin (what grpc-load sends),
// the way grpc-load sends it (gRPC over h2c to Starling, Connect over HTTP/1.1 to the
// reference), twice: the two answers must be the same bytes (every field of these answers is a
// function of the store: no clock, no random order), and the first is decoded and checked.
// For the load runs it writes DIR/SET.SYSTEM.answers, line i the hex SHA-256 of the bytes of
// the answer to message i when that answer was checked right, else `-`
// (`grpc-load -answers`: every answer under load must be those bytes, and every answer to a
// `-` message counts as wrong). Per system, because each engine breaks ties in its own order.
// One answer is not byte-deterministic: the reference's known followers (GetFollowsFollowing)
// come in whatever order PostgreSQL's plan of the moment yields (its query has no ORDER BY; in
// a smoke run a few answers changed order between the check and the load). Its line is
// `unordered HEX`, the digest of the canonical form: the fields of each element of the
// answer's field 1 sorted by their bytes (grpc-load's wire.Canonical does the same).
// Prints one JSON line per set ({set, requests, and per system its wrong answers})
// and the first mismatches on stderr; exits 1 if any answer was wrong or failed.
import { createHash } from 'node:crypto'
import { readFileSync, writeFileSync } from 'node:fs'
import http2 from 'node:http2'
import { join } from 'node:path'
import { fail, importBsky, parseFlags } from './lib.mjs'

process.noDeprecation = true

// Requests in flight per dataplane: the check sends a few thousand and should not take long.
const IN_FLIGHT = 8
// Mismatches printed per set and system, and the characters of each request shown (a count
// request names 25 posts or actors; the mismatch names the one at fault).
const SHOWN = 5
const SHOWN_CHARS_MAX = 200

// The methods whose answers are compared in canonical form (see above).
const UNORDERED_METHODS = new Set(['getFollowsFollowing'])

/** A protobuf message's top-level fields, each as its encoded bytes (key, length, value) and
 * where in them its value starts. */
function fieldSpans(msg) {
  const res = []
  const varint = (at) => {
    let value = 0n
    for (let shift = 0n; at < msg.length; shift += 7n) {
      const byte = msg[at++]
      value |= BigInt(byte & 0x7f) << shift
      if (byte < 0x80) return [value, at]
    }
    throw new Error('truncated varint')
  }
  for (let at = 0; at < msg.length; ) {
    const [key, afterKey] = varint(at)
    let end
    let valueAt = afterKey
    const wireType = Number(key & 7n)
    if (wireType === 0) end = varint(afterKey)[1]
    else if (wireType === 1) end = afterKey + 8
    else if (wireType === 5) end = afterKey + 4
    else if (wireType === 2) {
      const [length, afterLength] = varint(afterKey)
      valueAt = afterLength
      end = afterLength + Number(length)
    } else throw new Error(`wire type ${wireType}`)
    if (end > msg.length) throw new Error('field runs past the end')
    res.push({ key, valueAt: valueAt - at, bytes: msg.subarray(at, end) })
    at = end
  }
  return res
}

/** An answer with the fields of each element of its field 1 sorted by their bytes. */
function canonical(answer) {
  return Buffer.concat(fieldSpans(answer).flatMap(({ key, valueAt, bytes }) => {
    if (key !== 0x0an) return [bytes]
    const inner = fieldSpans(bytes.subarray(valueAt)).map((field) => field.bytes).sort(Buffer.compare)
    return [bytes.subarray(0, valueAt), ...inner]
  }))
}

/** The answers file's line for a right answer of `method`. */
function answerLine(method, bytes) {
  const sha256 = (b) => createHash('sha256').update(b).digest('hex')
  return UNORDERED_METHODS.has(method) ? `unordered ${sha256(canonical(bytes))}` : sha256(bytes)
}

/** The messages of a file of length-prefixed messages (u32 little-endian length, bytes). */
function readMessages(path) {
  const data = readFileSync(path)
  const res = []
  for (let at = 0; at < data.length; ) {
    const n = data.readUInt32LE(at)
    res.push(data.subarray(at + 4, at + 4 + n))
    at += 4 + n
  }
  return res
}

/** Calls Starling as grpc-load does: gRPC over h2c, one HTTP/2 connection; returns the bytes. */
function grpcCaller(addr) {
  // The session stays open until main() exits the process.
  const session = http2.connect(`http://${addr}`)
  return (name, message) => new Promise((resolve, reject) => {
    const headers = { ':method': 'POST', ':path': `/bsky.Service/${name}`, 'content-type': 'application/grpc', te: 'trailers' }
    const req = session.request(headers)
    const chunks = []
    let grpcStatus = null
    let grpcMessage = ''
    const status = (h) => {
      if (h['grpc-status'] !== undefined) [grpcStatus, grpcMessage] = [h['grpc-status'], h['grpc-message'] ?? '']
    }
    req.on('response', status)
    req.on('trailers', status)
    req.on('data', (chunk) => chunks.push(chunk))
    req.on('error', reject)
    req.on('end', () => {
      const body = Buffer.concat(chunks)
      if (grpcStatus !== '0') return reject(new Error(`grpc-status ${grpcStatus}: ${decodeURIComponent(grpcMessage)}`))
      const n = body.length >= 5 ? body.readUInt32BE(1) : -1
      if (body[0] !== 0 || body.length !== 5 + n) return reject(new Error(`not one uncompressed message (${body.length} bytes)`))
      resolve(body.subarray(5))
    })
    const frame = Buffer.alloc(5 + message.length)
    frame.writeUInt32BE(message.length, 1)
    frame.set(message, 5)
    req.end(frame)
  })
}

/** Calls the reference as grpc-load -http1 does: Connect over HTTP/1.1; returns the bytes. */
function connectCaller(url) {
  return async (name, message) => {
    const res = await fetch(`${url}/bsky.Service/${name}`, {
      method: 'POST',
      headers: { 'content-type': 'application/proto', 'connect-protocol-version': '1' },
      body: message,
    })
    const body = Buffer.from(await res.arrayBuffer())
    if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${body.toString().slice(0, SHOWN_CHARS_MAX)}`)
    return body
  }
}

/** The entries of an answer as [uri, subject] pairs, by method. */
function entries(method, res) {
  if (method === 'getActorLikes') return res.likes.map((like) => [like.uri, like.subject])
  if (method === 'getListMembers') return res.listitems.map((item) => [item.uri, item.did])
  if (method === 'getFollowers') return res.followers.map((follow) => [follow.uri, follow.actorDid])
  if (method === 'getTimeline' || method === 'getAuthorFeed') return res.items.map((item) => [item.repost || item.uri, item.uri])
  if (method === 'getNotifications') return res.notifications.map((n) => [n.uri, notificationSubject(n)])
  throw new Error(`no page check for ${method}`)
}

/** A notification's fields but its URI, as one string (see the header). */
function notificationSubject(n) {
  const ms = n.timestamp ? Number(n.timestamp.seconds) * 1000 + Math.floor(n.timestamp.nanos / 1e6) : 'none'
  return `${n.reason} ${n.reasonSubject || '-'} ${n.priority} ${ms}`
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

/** Why known followers are wrong, or null: the targets in the request's order, and for each
 * the expected accounts as a set. */
function checkKnownFollowers(res, expect) {
  const want = expect.results
  if (res.results.length !== want.length) return `${res.results.length} results, expected ${want.length}`
  for (const [i, { targetDid, dids }] of res.results.entries()) {
    if (targetDid !== want[i].targetDid) return `result ${i} for ${targetDid}, expected ${want[i].targetDid}`
    const have = [...dids].sort()
    if (new Set(have).size !== have.length) return `an account twice in ${have.join(',')}`
    const extra = have.filter((did) => !want[i].dids.includes(did))
    const missing = want[i].dids.filter((did) => !have.includes(did))
    if (extra.length) return `${targetDid}: ${extra.length} unexpected known followers, e.g. ${extra[0]}`
    if (missing.length) return `${targetDid}: ${missing.length} known followers missing, e.g. ${missing[0]}`
  }
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

/** Sends one message twice; returns why its answer is wrong (or null) and its answers line. */
async function checkOne(call, info, { method, request, expect }, message) {
  let bytes, again, res
  try {
    bytes = await call(info.name, message)
    again = await call(info.name, message)
    res = info.O.fromBinary(bytes)
  } catch (err) {
    return { why: `failed: ${err?.message ?? err}` }
  }
  if (answerLine(method, bytes) !== answerLine(method, again)) {
    return { why: `two answers differ (${bytes.length} and ${again.length} bytes): not deterministic` }
  }
  return { why: checkAnswer(res, method, request, expect), line: answerLine(method, bytes) }
}

/** Why a decoded answer is wrong, or null. */
function checkAnswer(res, method, request, expect) {
  if (method === 'searchActors') return checkSearch(res, expect, request)
  if (method === 'getFollowsFollowing') return checkKnownFollowers(res, expect)
  if (method === 'getInteractionCounts' || method === 'getCountsForUsers') return checkCounts(res, expect, request)
  if (method === 'getUnreadNotificationCount') return res.count === expect.count ? null : `${res.count} unread, expected ${expect.count}`
  return checkPage(method, res, expect)
}

/** Checks every line on one system; returns [line index, why] per wrong answer, and the
 * answers file's lines (the digest of each right answer, `-` for the others). */
async function checkAll(call, info, lines, messages) {
  const wrong = []
  const digests = new Array(lines.length).fill('-')
  let next = 0
  const worker = async () => {
    while (next < lines.length) {
      const idx = next++
      const { why, line } = await checkOne(call, info, lines[idx], messages[idx])
      if (why) wrong.push([idx, why])
      else digests[idx] = line
    }
  }
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker))
  return { wrong: wrong.sort((a, b) => a[0] - b[0]), digests }
}

/** The method of a set (every line names the same one), checked against the messages: message i
 * must be line i's request, so that answers file line i is message i's answer. */
function methodOf(Service, set, lines, messages) {
  if (messages.length !== lines.length) fail(`${set}: ${messages.length} messages for ${lines.length} requests`)
  const info = Service.methods[lines[0].method]
  if (!info) fail(`${set}: no RPC ${lines[0].method} in bsky.Service`)
  lines.forEach((line, idx) => {
    if (line.method !== lines[0].method) fail(`${set}: request ${idx} is ${line.method}, not ${lines[0].method}`)
    if (!info.I.fromBinary(messages[idx]).equals(new info.I(line.request))) fail(`${set}: message ${idx} is not request ${idx}`)
  })
  return info
}

async function main() {
  const usage = 'usage: content.mjs [--reference URL] --starling ADDR [--as NAME] --dir DIR --sets SET[,SET...]'
  const known = { reference: 'string', starling: 'string', as: 'string', dir: 'string', sets: 'string' }
  const flags = parseFlags(process.argv.slice(2), known, usage)
  if (!flags.starling || !flags.dir || !flags.sets) fail(usage)
  const sets = flags.sets.split(',')
  const { Service } = await importBsky('proto/bsky_connect.js')
  // Starling alone (--as names it in the output and the answers files: one store backend of
  // several) or beside the reference.
  const systems = { [flags.as ?? 'starling']: grpcCaller(flags.starling) }
  if (flags.reference) systems.reference = connectCaller(flags.reference)
  let nWrong = 0
  for (const set of sets) {
    const text = readFileSync(join(flags.dir, `${set}.content.jsonl`), 'utf8')
    const lines = text.split('\n').filter(Boolean).map((line) => JSON.parse(line))
    if (!lines.length) fail(`${set}: no requests to check`)
    const messages = readMessages(join(flags.dir, `${set}.bin`))
    const info = methodOf(Service, set, lines, messages)
    const summary = { set, requests: lines.length }
    for (const [name, call] of Object.entries(systems)) {
      const { wrong, digests } = await checkAll(call, info, lines, messages)
      writeFileSync(join(flags.dir, `${set}.${name}.answers`), `${digests.join('\n')}\n`)
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
