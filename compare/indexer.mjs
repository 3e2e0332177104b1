// `reference.mjs load-indexer`: loads a Jetstream file through the reference's own indexing
// code, one event at a time, exactly as its firehose subscription (data-plane/server/
// subscription.js) handles each relay event:
// - commit create/update: indexRecord(uri, cid, record, action, time), and beside it
//   setCommitLastSeen(did, commit, rev) and indexHandle(did, time);
// - commit delete: deleteRecord(uri), with the same two beside it;
// - identity: indexHandle(did, time, force) after feeding the event's handle to the local
//   identity resolver (identity.mjs);
// - account: active=false with status `deleted` -> deleteActor (the local resolver says the repo
//   is no longer hosted, so the actor and its records are removed); otherwise
//   updateActorStatus(did, active, status), which throws on statuses it does not know
//   (desynchronized, throttled, or inactive without a status): those count as failures.
// The IndexingService is the one a never-started RepoSubscription builds, with its `background`
// queue (aggregate counts are computed there); the summary is printed after the queue drains.
//
// Differences forced by Jetstream: `time` is the event's time_us (the relay's commit time is
// not in Jetstream; identity events carry it and use it), and the commit CID is unknown, so
// actor_sync.commitCid is written as '' (GetLatestRev reads only repoRev).
import { importInstalled, log, timeUsToIso } from './lib.mjs'
import { LocalIdResolver } from './identity.mjs'
import { readEvents } from './jetstream.mjs'
import { migratedDatabase } from './server.mjs'

const FAILURES_SHOWN = 10

/** Counts per collection (or event kind) and the first failure reasons. */
export class Tally {
  constructor() {
    this.byKind = {}
    this.failures = []
    this.nFailed = 0
  }
  count(kind, what) {
    const row = (this.byKind[kind] ??= {})
    row[what] = (row[what] ?? 0) + 1
  }
  fail(kind, where, err) {
    this.count(kind, 'failed')
    this.nFailed++
    if (this.failures.length < FAILURES_SHOWN) {
      const reason = String(err?.message ?? err).split('\n')[0].slice(0, 300)
      this.failures.push({ kind, where, reason })
    }
  }
}

/** Runs `task(item)` for each item with at most `n` in flight, keeping the order of each key. */
class KeyedPool {
  constructor(n) {
    this.n = n
    this.running = 0
    this.waiters = []
    this.tails = new Map()
  }
  async push(key, task) {
    while (this.running >= this.n) await new Promise((resolve) => this.waiters.push(resolve))
    this.running++
    const prev = this.tails.get(key) ?? Promise.resolve()
    const tail = prev.then(task).finally(() => {
      this.running--
      this.waiters.shift()?.()
      if (this.tails.get(key) === tail) this.tails.delete(key)
    })
    this.tails.set(key, tail)
  }
  async drain() {
    while (this.tails.size) await Promise.allSettled([...this.tails.values()])
  }
}

/** Loads `file` through the reference indexer into `schema` at `url`; returns the summary. */
export async function loadIndexer({ file, url, schema, inFlight = 16, limit = Infinity, progressSeconds = 10, quiet = false }) {
  const { RepoSubscription } = await importInstalled('@atproto/bsky')
  const { jsonToLex, parseCid } = await importInstalled('@atproto/lex')
  const { AtUri } = await importInstalled('@atproto/syntax')
  const { WriteOpAction } = await importInstalled('@atproto/repo')

  const db = await migratedDatabase(url, schema, Math.max(10, inFlight * 3))
  const resolver = new LocalIdResolver()
  // Never started: it only builds the IndexingService and its background queue.
  const sub = new RepoSubscription({ service: 'ws://127.0.0.1:9', db, idResolver: resolver })
  const svc = sub.indexingSvc
  const tally = new Tally()

  // The queue catches and logs (only with LOG_ENABLED) a failed aggregate task; count it here.
  const addBackground = sub.background.add.bind(sub.background)
  sub.background.add = (task) =>
    addBackground(async (ctx, signal) => {
      try {
        await task(ctx, signal)
      } catch (err) {
        tally.fail('background', 'aggregate update', err)
        throw err
      }
    })

  const handle = async (lineNo, event) => {
    const { did, kind } = event
    if (kind === 'commit') {
      const { operation, collection, rkey, rev } = event.commit
      const where = `line ${lineNo}`
      const time = timeUsToIso(event.time_us)
      const indexing = (async () => {
        const uri = AtUri.make(did, collection, rkey)
        if (operation === 'delete') return svc.deleteRecord(uri)
        const action = operation === 'create' ? WriteOpAction.Create : WriteOpAction.Update
        return svc.indexRecord(uri, parseCid(event.commit.cid), jsonToLex(event.commit.record), action, time)
      })()
      const known = !!svc.findIndexerForCollection(collection)
      const [indexed, lastSeen, handled] = await Promise.allSettled([
        indexing,
        svc.setCommitLastSeen(did, '', rev),
        svc.indexHandle(did, time),
      ])
      if (indexed.status === 'rejected') tally.fail(collection, where, indexed.reason)
      else tally.count(collection, known ? operation : `${operation} (no indexer)`)
      if (lastSeen.status === 'rejected') tally.fail('actor_sync', where, lastSeen.reason)
      if (handled.status === 'rejected') tally.fail('indexHandle', where, handled.reason)
    } else if (kind === 'identity') {
      const identity = event.identity ?? {}
      resolver.setHandle(did, identity.handle)
      try {
        await svc.indexHandle(did, identity.time ?? timeUsToIso(event.time_us), true)
        tally.count('identity', 'indexed')
      } catch (err) {
        tally.fail('identity', `line ${lineNo}`, err)
      }
    } else if (kind === 'account') {
      const account = event.account ?? {}
      try {
        if (account.active === false && account.status === 'deleted') await svc.deleteActor(did)
        else await svc.updateActorStatus(did, account.active, account.status)
        tally.count('account', account.active ? 'active' : String(account.status ?? 'inactive'))
      } catch (err) {
        tally.fail('account', `line ${lineNo}`, err)
      }
    } else {
      tally.fail(String(kind), `line ${lineNo}`, `unknown event kind ${kind}`)
    }
  }

  const pool = new KeyedPool(inFlight)
  const started = performance.now()
  let nEvents = 0
  let lastProgress = started
  try {
    for await (const { lineNo, event, error } of readEvents(file)) {
      if (nEvents >= limit) break
      nEvents++
      if (error || typeof event?.did !== 'string') {
        tally.fail('malformed', `line ${lineNo}`, error ?? 'event has no did')
        continue
      }
      await pool.push(event.did, () => handle(lineNo, event))
      const now = performance.now()
      if (!quiet && progressSeconds > 0 && now - lastProgress > progressSeconds * 1000) {
        lastProgress = now
        const seconds = (now - started) / 1000
        log(`load-indexer: ${nEvents} events in ${seconds.toFixed(0)} s (${(nEvents / seconds).toFixed(0)}/s), ${tally.nFailed} failed`)
      }
    }
    await pool.drain()
    await sub.background.processAll()
  } finally {
    await sub.destroy()
    await db.close()
  }
  const seconds = (performance.now() - started) / 1000
  const summary = {
    ok: true,
    path: 'indexer',
    file,
    schema,
    inFlight,
    events: nEvents,
    seconds: Math.round(seconds * 100) / 100,
    eventsPerSecond: Math.round(nEvents / seconds),
    byKind: tally.byKind,
    failed: tally.nFailed,
    firstFailures: tally.failures,
  }
  if (tally.nFailed && !quiet) log(`load-indexer: WARNING ${tally.nFailed} events or parts of events failed; first: ${JSON.stringify(tally.failures.slice(0, 3))}`)
  return summary
}
