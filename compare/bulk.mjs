// `reference.mjs load-bulk`: fills the reference's tables in bulk (COPY) from a Jetstream file.
//
// The final rows are computed in memory by replaying the file, in order, through a model of
// the reference indexer's own rules (data-plane/server/indexing/processor.js and plugins/*.js
// of @atproto/bsky@0.0.280, and subscription.js for identity and account events): the same
// validation (the plugins' own lexicon schemas), the same unique keys and "on conflict do
// nothing" outcomes, duplicate records and their promotion when the original is deleted, the
// aggregate rows (post_agg, profile_agg) with the values the indexer's recount queries would
// leave, feed items, embeds, quotes, OP-thread replies, handles with contention, actor status
// and account deletion. test/bulk-equals-indexer.mjs checks the result row by row against the
// indexer path.
//
// Modelled collections: post, like, repost, follow, block, profile, list, list item. Records
// of the other collections the reference indexes (list blocks, threadgates, postgates, feed
// generators, starter packs, labelers, ...) are counted as `unmodelled` in the summary and
// not loaded. Notifications are written as the plugins' notifsForInsert / notifsForDelete make
// them (like, repost, follow, post, profile), including their quirks: a like's notifications
// stay when a duplicate is promoted in its place, a post's are made again on update, a
// profile's starter-pack join only on its first version; thread mutes, thread gates and post
// gates are not modelled (there are none in the files loaded), so none holds one back.
//
// Memory: every live row is held until the COPY (roughly 1 KB per record, mostly its JSON).
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { importBsky, importCompareDep, importInstalled, log, timeUsToIso } from './lib.mjs'
import { LocalIdResolver } from './identity.mjs'
import { Tally } from './indexer.mjs'
import { readEvents } from './jetstream.mjs'
import { migratedDatabase } from './server.mjs'

const HOUR = 3600_000
const DAY = 24 * HOUR

/** A Map split in shards, past V8's limit of 2^24 entries per Map. */
class BigMap {
  constructor() {
    this.shards = Array.from({ length: 64 }, () => new Map())
  }
  shard(key) {
    let h = 0
    for (let i = Math.max(0, key.length - 6); i < key.length; i++) h = (h * 31 + key.charCodeAt(i)) | 0
    return this.shards[h & 63]
  }
  get(key) {
    return this.shard(key).get(key)
  }
  has(key) {
    return this.shard(key).has(key)
  }
  set(key, value) {
    this.shard(key).set(key, value)
    return this
  }
  delete(key) {
    return this.shard(key).delete(key)
  }
  get size() {
    return this.shards.reduce((n, m) => n + m.size, 0)
  }
  *values() {
    for (const m of this.shards) yield* m.values()
  }
  *entries() {
    for (const m of this.shards) yield* m.entries()
  }
}

/** A multimap key -> Set of values. */
class SetIndex {
  constructor() {
    this.map = new BigMap()
  }
  add(key, value) {
    let set = this.map.get(key)
    if (!set) this.map.set(key, (set = new Set()))
    set.add(value)
  }
  remove(key, value) {
    const set = this.map.get(key)
    if (!set) return
    set.delete(value)
    if (!set.size) this.map.delete(key)
  }
  get(key) {
    return this.map.get(key) ?? new Set()
  }
}

/** Counts per key (the COUNT(*) queries of the aggregate updates, kept incrementally). */
class Counter {
  constructor() {
    this.map = new BigMap()
  }
  add(key, delta) {
    if (key == null) return
    const n = (this.map.get(key) ?? 0) + delta
    if (n) this.map.set(key, n)
    else this.map.delete(key)
  }
  get(key) {
    return this.map.get(key) ?? 0
  }
}

const EMBED_TABLES = ['post_embed_image', 'post_embed_external', 'post_embed_record', 'post_embed_video', 'post_embed_gallery_image']

const didOf = (uri) => uri.slice('at://'.length).split('/')[0]
/** A post's embeds as the reference separates them: a record with media is two. */
const embedsOf = (app, embed) =>
  !embed ? [] : app.bsky.embed.recordWithMedia.$matches(embed) ? [app.bsky.embed.record.$build(embed.record), embed.media] : [embed]
const collectionOf = (uri) => uri.slice('at://'.length).split('/')[1]
const rkeyOf = (uri) => uri.slice('at://'.length).split('/')[2]

/**
 * A table with a primary key and optional unique keys; insert() mirrors
 * `insert ... on conflict do nothing returning *`.
 */
class Table {
  constructor(pk, uniques = []) {
    this.pk = pk
    this.uniques = uniques.map((fn) => ({ fn, index: new BigMap() }))
    this.rows = new BigMap()
    this.onInsert = []
    this.onDelete = []
  }
  conflicts(row) {
    if (this.rows.has(this.pk(row))) return true
    return this.uniques.some(({ fn, index }) => index.has(fn(row)))
  }
  insert(row) {
    if (this.conflicts(row)) return null
    this.rows.set(this.pk(row), row)
    for (const { fn, index } of this.uniques) index.set(fn(row), row)
    for (const hook of this.onInsert) hook(row)
    return row
  }
  get(key) {
    return this.rows.get(key)
  }
  byUnique(i, key) {
    return this.uniques[i].index.get(key)
  }
  delete(key) {
    const row = this.rows.get(key)
    if (!row) return null
    this.rows.delete(key)
    for (const { fn, index } of this.uniques) index.delete(fn(row))
    for (const hook of this.onDelete) hook(row)
    return row
  }
}

/** The model of the reference indexer: apply() events in order, then rows(). */
export class ReferenceModel {
  static async create() {
    const { IndexingService } = await importBsky('data-plane/server/indexing/index.js')
    const { app } = await importBsky('lexicons/index.js')
    const lex = await importInstalled('@atproto/lex')
    const syntax = await importInstalled('@atproto/syntax')
    // An IndexingService on no database: only its plugins' schemas are used (validation and
    // the set of collections the reference indexes), so both paths accept the same records.
    const indexing = new IndexingService({}, null, null)
    return new ReferenceModel({ indexing, app, lex, syntax })
  }

  constructor({ indexing, app, lex, syntax }) {
    this.indexing = indexing
    this.app = app
    this.lex = lex
    this.normalizeDatetimeAlways = syntax.normalizeDatetimeAlways
    this.resolver = new LocalIdResolver()
    this.tally = new Tally()
    this.unmodelled = {}
    const t = (this.t = {
      actor: new Table((r) => r.did),
      actor_sync: new Table((r) => r.did),
      record: new Table((r) => r.uri),
      duplicate_record: new Table((r) => r.uri),
      post: new Table((r) => r.uri),
      feed_item: new Table((r) => r.uri),
      post_embed_image: new Table((r) => `${r.postUri} ${r.position}`),
      post_embed_external: new Table((r) => r.postUri),
      post_embed_record: new Table((r) => `${r.postUri} ${r.embedUri}`),
      post_embed_video: new Table((r) => r.postUri),
      post_embed_gallery_image: new Table((r) => `${r.postUri} ${r.position}`),
      quote: new Table((r) => r.uri),
      op_thread_reply: new Table((r) => `${r.rootUri} ${r.uri}`),
      like: new Table((r) => r.uri, [(r) => `${r.subject} ${r.creator}`]),
      repost: new Table((r) => r.uri, [(r) => `${r.creator} ${r.subject}`]),
      follow: new Table((r) => r.uri, [(r) => `${r.creator} ${r.subjectDid}`]),
      actor_block: new Table((r) => r.uri, [(r) => `${r.creator} ${r.subjectDid}`]),
      profile: new Table((r) => r.uri),
      list: new Table((r) => r.uri),
      // list_item_unique_subject_in_list: an actor is in a list once.
      list_item: new Table((r) => r.uri, [(r) => `${r.listUri} ${r.subjectDid}`]),
      post_agg: new Table((r) => r.uri),
      profile_agg: new Table((r) => r.did),
    })
    // Secondary indexes and counts, kept in step with the tables.
    this.actorByHandle = new Map()
    this.feedItemsByPost = new SetIndex()
    t.feed_item.onInsert.push((r) => this.feedItemsByPost.add(r.postUri, r.uri))
    t.feed_item.onDelete.push((r) => this.feedItemsByPost.remove(r.postUri, r.uri))
    this.quotesBySubject = new SetIndex()
    this.quotesBySubjectCid = new Counter()
    t.quote.onInsert.push((r) => (this.quotesBySubject.add(r.subject, r.uri), this.quotesBySubjectCid.add(r.subjectCid, 1)))
    t.quote.onDelete.push((r) => (this.quotesBySubject.remove(r.subject, r.uri), this.quotesBySubjectCid.add(r.subjectCid, -1)))
    this.duplicatesOf = new SetIndex()
    t.duplicate_record.onInsert.push((r) => this.duplicatesOf.add(r.duplicateOf, r.uri))
    t.duplicate_record.onDelete.push((r) => this.duplicatesOf.remove(r.duplicateOf, r.uri))
    this.opReplyKeyByUri = new BigMap()
    t.op_thread_reply.onInsert.push((r) => this.opReplyKeyByUri.set(r.uri, `${r.rootUri} ${r.uri}`))
    this.embedsByPost = {}
    for (const table of EMBED_TABLES) {
      const index = (this.embedsByPost[table] = new SetIndex())
      t[table].onInsert.push((r) => index.add(r.postUri, t[table].pk(r)))
      t[table].onDelete.push((r) => index.remove(r.postUri, t[table].pk(r)))
    }
    this.likesBySubject = new Counter()
    t.like.onInsert.push((r) => this.likesBySubject.add(r.subject, 1))
    t.like.onDelete.push((r) => this.likesBySubject.add(r.subject, -1))
    this.repostsBySubject = new Counter()
    t.repost.onInsert.push((r) => this.repostsBySubject.add(r.subject, 1))
    t.repost.onDelete.push((r) => this.repostsBySubject.add(r.subject, -1))
    this.followers = new Counter()
    this.follows = new Counter()
    t.follow.onInsert.push((r) => (this.followers.add(r.subjectDid, 1), this.follows.add(r.creator, 1)))
    t.follow.onDelete.push((r) => (this.followers.add(r.subjectDid, -1), this.follows.add(r.creator, -1)))
    this.postsByCreator = new Counter()
    this.repliesByParent = new Counter()
    const countsAsReply = (r) => r.replyParent && !r.violatesThreadGate
    t.post.onInsert.push((r) => (this.postsByCreator.add(r.creator, 1), countsAsReply(r) && this.repliesByParent.add(r.replyParent, 1)))
    t.post.onDelete.push((r) => (this.postsByCreator.add(r.creator, -1), countsAsReply(r) && this.repliesByParent.add(r.replyParent, -1)))
    // Notifications by the record that made them (the reference deletes them by recordUri).
    this.notifs = new BigMap()
    this.plugins = this.makePlugins()
  }

  // --- Notifications (processor.js handleNotifs) -----------------------------------------

  addNotifs(notifs) {
    for (const n of notifs) {
      const list = this.notifs.get(n.recordUri)
      if (list) list.push(n)
      else this.notifs.set(n.recordUri, [n])
    }
  }

  /** handleNotifs: a delete's rules (given what replaced the record) or an insert's. */
  handleNotifs(plugin, { deleted, inserted, obj }) {
    if (deleted) {
      const { notifs, toDelete } = plugin.notifsForDelete(deleted, inserted ?? null, obj)
      for (const uri of toDelete) this.notifs.delete(uri)
      this.addNotifs(notifs)
    } else if (inserted) {
      this.addNotifs(plugin.notifsForInsert(inserted, obj))
    }
  }

  // --- Events (subscription.js) ---------------------------------------------------------

  apply(lineNo, event) {
    const { did, kind } = event
    const where = `line ${lineNo}`
    if (kind === 'commit') {
      const { operation, collection, rkey, rev } = event.commit
      const time = timeUsToIso(event.time_us)
      this.now = time
      const indexer = this.indexing.findIndexerForCollection(collection)
      try {
        const uri = `at://${did}/${collection}/${rkey}`
        if (indexer && !this.plugins[collection]) {
          this.unmodelled[collection] = (this.unmodelled[collection] ?? 0) + 1
          this.tally.count(collection, `${operation} (unmodelled, skipped)`)
        } else if (operation === 'delete') {
          if (indexer) this.deleteRecord(uri)
        } else {
          const cid = this.lex.parseCid(event.commit.cid).toString()
          const record = this.lex.jsonToLex(event.commit.record)
          if (indexer) {
            if (operation === 'create') this.insertRecord(uri, cid, record, time)
            else this.updateRecord(uri, cid, record, time)
          }
        }
        if (!indexer || this.plugins[collection]) this.tally.count(collection, indexer ? operation : `${operation} (no indexer)`)
      } catch (err) {
        this.tally.fail(collection, where, err)
      }
      this.setCommitLastSeen(did, rev)
      this.indexHandle(did, time, false)
    } else if (kind === 'identity') {
      const identity = event.identity ?? {}
      this.resolver.setHandle(did, identity.handle)
      this.indexHandle(did, identity.time ?? timeUsToIso(event.time_us), true)
      this.tally.count('identity', 'indexed')
    } else if (kind === 'account') {
      const account = event.account ?? {}
      try {
        if (account.active === false && account.status === 'deleted') this.deleteActor(did)
        else this.updateActorStatus(did, account.active, account.status)
        this.tally.count('account', account.active ? 'active' : String(account.status ?? 'inactive'))
      } catch (err) {
        this.tally.fail('account', where, err)
      }
    } else {
      this.tally.fail(String(kind), where, `unknown event kind ${kind}`)
    }
  }

  setCommitLastSeen(did, rev) {
    this.t.actor_sync.delete(did)
    this.t.actor_sync.insert({ did, commitCid: '', repoRev: rev ?? null })
  }

  indexHandle(did, timestamp, force) {
    const actor = this.t.actor.get(did)
    if (!force && actor) {
      const timeDiff = new Date(timestamp).getTime() - new Date(actor.indexedAt).getTime()
      if (!(timeDiff > DAY) && !(actor.handle === null && timeDiff > HOUR)) return
    }
    const claimed = this.resolver.handleOf(did)
    const handle = this.resolver.ownerOf(claimed) === did ? claimed.toLowerCase() : null
    if (handle) {
      const holder = this.actorByHandle.get(handle)
      if (holder && holder !== did) this.setActorHandle(this.t.actor.get(holder), null)
    }
    if (actor) {
      this.setActorHandle(actor, handle)
      actor.indexedAt = timestamp
    } else {
      const row = { did, handle: null, indexedAt: timestamp, upstreamStatus: null }
      this.t.actor.insert(row)
      this.setActorHandle(row, handle)
    }
  }

  setActorHandle(actor, handle) {
    if (actor.handle && this.actorByHandle.get(actor.handle) === actor.did) this.actorByHandle.delete(actor.handle)
    actor.handle = handle
    if (handle) this.actorByHandle.set(handle, actor.did)
  }

  updateActorStatus(did, active, status = '') {
    let upstreamStatus
    if (active) upstreamStatus = null
    else if (['deactivated', 'suspended', 'takendown'].includes(status)) upstreamStatus = status
    else throw new Error(`Unrecognized account status: ${status}`)
    const actor = this.t.actor.get(did)
    if (actor) actor.upstreamStatus = upstreamStatus
  }

  /** deleteActor + unindexActor (index.js): not hosted, so everything by the actor goes. */
  deleteActor(did) {
    const t = this.t
    const actor = t.actor.get(did)
    if (actor) {
      this.setActorHandle(actor, null)
      t.actor.delete(did)
    }
    const byCreator = (table) => {
      for (const row of [...table.rows.values()]) if (row.creator === did) table.delete(table.pk(row))
    }
    for (const table of [t.profile, t.follow, t.repost, t.like, t.list_item, t.list, t.actor_block]) byCreator(table)
    const posts = [...t.post.rows.values()].filter((row) => row.creator === did).map((row) => row.uri)
    for (const table of EMBED_TABLES) {
      for (const uri of posts) for (const key of [...this.embedsByPost[table].get(uri)]) t[table].delete(key)
    }
    for (const uri of posts) t.post.delete(uri)
    const records = [...t.record.rows.values()].filter((row) => row.did === did).map((row) => row.uri)
    for (const uri of records) {
      for (const dup of [...this.duplicatesOf.get(uri)]) t.duplicate_record.delete(dup)
    }
    for (const uri of records) t.record.delete(uri)
    for (const [recordUri, list] of [...this.notifs.entries()]) {
      // By the actor, and (deleteActor, after unindexActor) to the actor.
      const kept = list.filter((n) => n.author !== did && n.did !== did)
      if (kept.length === list.length) continue
      if (kept.length) this.notifs.set(recordUri, kept)
      else this.notifs.delete(recordUri)
    }
  }

  // --- Records (processor.js) ------------------------------------------------------------

  insertRecord(uri, cid, obj, timestamp) {
    const plugin = this.plugins[collectionOf(uri)]
    plugin.check(obj)
    // A plugin's insertFn that throws rolls the whole event back (indexRecord's transaction).
    plugin.precheck?.(uri, obj)
    this.t.record.insert({ uri, cid, did: didOf(uri), json: this.lex.lexStringify(obj), indexedAt: timestamp })
    const inserted = plugin.insert(uri, cid, obj, timestamp)
    if (inserted) {
      plugin.aggregate?.(inserted)
      this.handleNotifs(plugin, { inserted, obj })
      return
    }
    const found = plugin.findDuplicate(uri, obj)
    if (found && found !== uri) {
      this.t.duplicate_record.insert({ uri, cid, duplicateOf: found, indexedAt: timestamp })
    }
  }

  updateRecord(uri, cid, obj, timestamp) {
    const plugin = this.plugins[collectionOf(uri)]
    plugin.check(obj)
    plugin.precheck?.(uri, obj)
    // The reference rolls the whole update back when the new version cannot be inserted
    // (another of the actor's records holds its unique key): check that first.
    if (plugin.uniqueConflict?.(uri, obj)) throw new Error('Record update failed: removed from index but could not be replaced')
    const record = this.t.record.get(uri)
    if (record) Object.assign(record, { cid, json: this.lex.lexStringify(obj), indexedAt: timestamp })
    const dupe = plugin.findDuplicate(uri, obj)
    if (dupe) {
      const row = this.t.duplicate_record.get(uri)
      if (row) {
        this.t.duplicate_record.delete(uri)
        this.t.duplicate_record.insert({ ...row, cid, duplicateOf: dupe, indexedAt: timestamp })
      }
    } else {
      this.t.duplicate_record.delete(uri)
    }
    const deleted = plugin.remove(uri, timestamp)
    if (!deleted) return this.insertRecord(uri, cid, obj, timestamp)
    plugin.aggregate?.(deleted)
    const inserted = plugin.insert(uri, cid, obj, timestamp)
    if (!inserted) throw new Error('Record update failed: removed from index but could not be replaced')
    plugin.aggregate?.(inserted)
    this.handleNotifs(plugin, { deleted, inserted, obj })
  }

  deleteRecord(uri) {
    const plugin = this.plugins[collectionOf(uri)]
    const timestamp = this.now
    this.t.record.delete(uri)
    this.t.duplicate_record.delete(uri)
    const deleted = plugin.remove(uri, timestamp)
    if (!deleted) return
    plugin.aggregate?.(deleted)
    if (!plugin.promotes) return this.handleNotifs(plugin, { deleted })
    // The oldest duplicate whose record still exists is indexed in its place (its
    // duplicate_record row stays, as in the reference).
    let found = null
    for (const dupUri of this.duplicatesOf.get(uri)) {
      const dup = this.t.duplicate_record.get(dupUri)
      const rec = this.t.record.get(dupUri)
      if (rec && (!found || dup.indexedAt < found.dup.indexedAt)) found = { dup, rec }
    }
    if (!found) return this.handleNotifs(plugin, { deleted })
    const record = this.lex.lexParse(found.rec.json)
    if (!plugin.matches(record)) return this.handleNotifs(plugin, { deleted })
    const inserted = plugin.insert(found.rec.uri, found.rec.cid, record, found.rec.indexedAt)
    if (inserted) plugin.aggregate?.(inserted)
    this.handleNotifs(plugin, { deleted, inserted, obj: record })
  }

  // --- Plugins (plugins/*.js) -------------------------------------------------------------

  makePlugins() {
    const t = this.t
    const schemaOf = (collection) => this.indexing.findIndexerForCollection(collection).options.schema
    const base = (collection) => {
      const schema = schemaOf(collection)
      return { check: (obj) => schema.check(obj), matches: (obj) => schema.matches(obj), promotes: true }
    }
    const postAgg = (uri, field, value) => {
      const row = t.post_agg.get(uri) ?? t.post_agg.insert({ uri, likeCount: 0, replyCount: 0, repostCount: 0, quoteCount: 0 })
      row[field] = value
    }
    const profileAgg = (did, field, value) => {
      const row = t.profile_agg.get(did) ?? t.profile_agg.insert({ did, followersCount: 0, followsCount: 0, postsCount: 0 })
      row[field] = value
    }
    const norm = (s) => this.normalizeDatetimeAlways(s)
    const sortAt = (indexedAt, createdAt) => (indexedAt < createdAt ? indexedAt : createdAt)
    const subjectPlugin = (collection, table, fields, uniqueKey) => ({
      ...base(collection),
      uniqueConflict: (uri, obj) => {
        const holder = table.byUnique(0, uniqueKey(didOf(uri), obj))
        return holder && holder.uri !== uri
      },
      findDuplicate: (uri, obj) => table.byUnique(0, uniqueKey(didOf(uri), obj))?.uri ?? null,
      insertRow: (uri, cid, obj, timestamp) =>
        table.insert({ uri, cid, creator: didOf(uri), ...fields(obj), createdAt: norm(obj.createdAt), indexedAt: timestamp }),
      remove: (uri) => table.delete(uri),
      notifsForInsert: () => [],
      notifsForDelete: (deleted, replacedBy) => ({ notifs: [], toDelete: replacedBy ? [] : [deleted.uri] }),
    })
    // A like's or repost's: the subject's author and the via repost's, never the actor.
    const interactionNotifs = (reason) => (row) => {
      if (didOf(row.subject) === row.creator) return []
      const notif = (did, reason, reasonSubject) => ({ did, author: row.creator, recordUri: row.uri, recordCid: row.cid, reason, reasonSubject, sortAt: sortAt(row.indexedAt, row.createdAt) })
      const notifs = [notif(didOf(row.subject), reason, row.subject)]
      if (row.via && didOf(row.via) !== row.creator) notifs.push(notif(didOf(row.via), `${reason}-via-repost`, row.via))
      return notifs
    }

    const like = subjectPlugin(
      'app.bsky.feed.like',
      t.like,
      (obj) => ({ subject: obj.subject.uri, subjectCid: obj.subject.cid.toString(), via: obj.via?.uri ?? null, viaCid: obj.via?.cid?.toString() ?? null }),
      (creator, obj) => `${obj.subject.uri} ${creator}`,
    )
    like.insert = like.insertRow
    like.notifsForInsert = interactionNotifs('like')
    like.aggregate = (row) => postAgg(row.subject, 'likeCount', this.likesBySubject.get(row.subject))

    const repost = subjectPlugin(
      'app.bsky.feed.repost',
      t.repost,
      (obj) => ({ subject: obj.subject.uri, subjectCid: obj.subject.cid.toString(), via: obj.via?.uri ?? null, viaCid: obj.via?.cid?.toString() ?? null }),
      (creator, obj) => `${creator} ${obj.subject.uri}`,
    )
    repost.insert = (uri, cid, obj, timestamp) => {
      const inserted = repost.insertRow(uri, cid, obj, timestamp)
      const createdAt = norm(obj.createdAt)
      t.feed_item.insert({ uri, cid, type: 'repost', postUri: obj.subject.uri, originatorDid: didOf(uri), sortAt: sortAt(timestamp, createdAt) })
      return inserted
    }
    repost.remove = (uri) => {
      const deleted = t.repost.delete(uri)
      t.feed_item.delete(uri)
      return deleted
    }
    repost.aggregate = (row) => postAgg(row.subject, 'repostCount', this.repostsBySubject.get(row.subject))
    repost.notifsForInsert = interactionNotifs('repost')

    const follow = subjectPlugin('app.bsky.graph.follow', t.follow, (obj) => ({ subjectDid: obj.subject }), (creator, obj) => `${creator} ${obj.subject}`)
    follow.insert = follow.insertRow
    // No self check, as in the reference.
    follow.notifsForInsert = (row) => [
      { did: row.subjectDid, author: row.creator, recordUri: row.uri, recordCid: row.cid, reason: 'follow', reasonSubject: null, sortAt: sortAt(row.indexedAt, row.createdAt) },
    ]
    follow.aggregate = (row) => {
      profileAgg(row.subjectDid, 'followersCount', this.followers.get(row.subjectDid))
      profileAgg(row.creator, 'followsCount', this.follows.get(row.creator))
    }

    const block = subjectPlugin('app.bsky.graph.block', t.actor_block, (obj) => ({ subjectDid: obj.subject }), (creator, obj) => `${creator} ${obj.subject}`)
    block.insert = block.insertRow
    block.notifsForDelete = () => ({ notifs: [], toDelete: [] })

    const profile = {
      ...base('app.bsky.actor.profile'),
      findDuplicate: () => null,
      insert: (uri, cid, obj, timestamp) => {
        if (rkeyOf(uri) !== 'self') return null
        return t.profile.insert({
          uri,
          cid,
          creator: didOf(uri),
          displayName: obj.displayName ?? null,
          description: obj.description ?? null,
          avatarCid: this.lex.getBlobCidString(obj.avatar) ?? null,
          bannerCid: this.lex.getBlobCidString(obj.banner) ?? null,
          joinedViaStarterPackUri: obj.joinedViaStarterPack?.uri ?? null,
          // The reference uses the wall clock when createdAt is missing; the event time here.
          createdAt: obj.createdAt ?? timestamp,
          indexedAt: timestamp,
        })
      },
      remove: (uri) => t.profile.delete(uri),
      notifsForInsert: (row) =>
        row.joinedViaStarterPackUri
          ? [
              {
                did: didOf(row.joinedViaStarterPackUri),
                author: row.creator,
                recordUri: row.uri,
                recordCid: row.cid,
                reason: 'starterpack-joined',
                reasonSubject: row.joinedViaStarterPackUri,
                sortAt: row.indexedAt,
              },
            ]
          : [],
      notifsForDelete: () => ({ notifs: [], toDelete: [] }),
    }

    // plugins/list.js: no duplicates, no notifications, no aggregates.
    const list = {
      ...base('app.bsky.graph.list'),
      findDuplicate: () => null,
      insert: (uri, cid, obj, timestamp) =>
        t.list.insert({
          uri,
          cid,
          creator: didOf(uri),
          name: obj.name,
          purpose: obj.purpose,
          description: obj.description ?? null,
          descriptionFacets: obj.descriptionFacets ? JSON.stringify(obj.descriptionFacets) : null,
          avatarCid: this.lex.getBlobCidString(obj.avatar) ?? null,
          createdAt: norm(obj.createdAt),
          indexedAt: timestamp,
        }),
      remove: (uri) => t.list.delete(uri),
      notifsForInsert: () => [],
      notifsForDelete: () => ({ notifs: [], toDelete: [] }),
    }

    // plugins/list-item.js: a duplicate is another item of the same subject in the same list;
    // only the list's own creator may add to it (insertFn throws otherwise).
    const listItem = subjectPlugin(
      'app.bsky.graph.listitem',
      t.list_item,
      (obj) => ({ subjectDid: obj.subject, listUri: obj.list }),
      (_creator, obj) => `${obj.list} ${obj.subject}`,
    )
    listItem.precheck = (uri, obj) => {
      if (didOf(obj.list) !== didOf(uri)) throw new Error('Creator of listitem does not match creator of list')
    }
    listItem.insert = listItem.insertRow
    listItem.notifsForDelete = () => ({ notifs: [], toDelete: [] })

    const post = {
      ...base('app.bsky.feed.post'),
      findDuplicate: () => null,
      insert: (uri, cid, obj, timestamp) => this.insertPost(uri, cid, obj, timestamp),
      remove: (uri, timestamp) => this.removePost(uri, timestamp),
      notifsForInsert: (row, obj) => this.postNotifs(row, obj),
      notifsForDelete: (deleted, replacedBy, obj) => ({ notifs: replacedBy ? this.postNotifs(replacedBy, obj) : [], toDelete: [deleted.uri] }),
      aggregate: (row) => {
        if (row.replyParent) postAgg(row.replyParent, 'replyCount', this.repliesByParent.get(row.replyParent))
        profileAgg(row.creator, 'postsCount', this.postsByCreator.get(row.creator))
      },
    }
    this.postAgg = postAgg
    return {
      'app.bsky.feed.like': like,
      'app.bsky.feed.repost': repost,
      'app.bsky.graph.follow': follow,
      'app.bsky.graph.block': block,
      'app.bsky.actor.profile': profile,
      'app.bsky.feed.post': post,
      'app.bsky.graph.list': list,
      'app.bsky.graph.listitem': listItem,
    }
  }

  insertPost(uri, cid, obj, timestamp) {
    const { t, app, lex } = this
    const creator = didOf(uri)
    const createdAt = this.normalizeDatetimeAlways(obj.createdAt)
    const row = {
      uri,
      cid,
      creator,
      text: obj.text,
      createdAt,
      replyRoot: obj.reply?.root?.uri || null,
      replyRootCid: obj.reply?.root?.cid?.toString() || null,
      replyParent: obj.reply?.parent?.uri || null,
      replyParentCid: obj.reply?.parent?.cid?.toString() || null,
      langs: obj.langs?.length ? JSON.stringify(obj.langs) : null,
      tags: obj.tags?.length ? JSON.stringify(obj.tags) : null,
      indexedAt: timestamp,
      invalidReplyRoot: null,
      violatesThreadGate: null,
      violatesEmbeddingRules: null,
    }
    const exists = t.post.get(uri)
    t.feed_item.insert({ uri, cid, type: 'post', postUri: uri, originatorDid: creator, sortAt: timestamp < createdAt ? timestamp : createdAt })
    if (exists) return null
    if (obj.reply) {
      // validateReply: the parent must be an indexed record whose own reply points at the same
      // root. No threadgates are modelled, so a reply never violates one.
      const parentRecord = t.record.get(obj.reply.parent.uri)
      let invalidReplyRoot
      if (!parentRecord) invalidReplyRoot = true
      else if (t.post.get(obj.reply.parent.uri)?.invalidReplyRoot) invalidReplyRoot = true
      else {
        const parent = lex.lexParse(parentRecord.json)
        invalidReplyRoot = obj.reply.parent.uri === obj.reply.root.uri ? !!parent.reply : parent.reply?.root.uri !== obj.reply.root.uri
      }
      if (invalidReplyRoot) Object.assign(row, { invalidReplyRoot: true, violatesThreadGate: false })
    }
    t.post.insert(row)
    if (obj.reply?.parent.uri && creator === didOf(obj.reply.root.uri)) {
      t.op_thread_reply.insert({ rootUri: obj.reply.root.uri, parentUri: obj.reply.parent.uri, uri, deletedAt: null })
    }
    for (const e of embedsOf(app, obj.embed)) {
      if (app.bsky.embed.images.$matches(e)) {
        e.images.forEach((img, i) => t.post_embed_image.insert({ postUri: uri, position: String(i), imageCid: lex.getBlobCidString(img.image), alt: img.alt }))
      } else if (app.bsky.embed.external.$matches(e)) {
        const { external } = e
        t.post_embed_external.insert({
          postUri: uri,
          uri: external.uri,
          title: external.title,
          description: external.description,
          thumbCid: lex.getBlobCidString(external.thumb) || null,
        })
      } else if (app.bsky.embed.record.$matches(e)) {
        const { record } = e
        t.post_embed_record.insert({ postUri: uri, embedUri: record.uri, embedCid: record.cid.toString() })
        if (collectionOf(record.uri) === 'app.bsky.feed.post') {
          t.quote.insert({ uri, cid, subject: record.uri, subjectCid: record.cid.toString(), createdAt, indexedAt: timestamp })
          this.postAgg(record.uri, 'quoteCount', this.quotesBySubjectCid.get(record.cid.toString()))
          // No postgates are modelled, so an embed never violates embedding rules.
        }
      } else if (app.bsky.embed.video.$matches(e)) {
        t.post_embed_video.insert({ postUri: uri, videoCid: lex.getBlobCidString(e.video), alt: e.alt ?? null })
      } else if (app.bsky.embed.gallery?.$matches(e)) {
        e.items.forEach((item, i) => {
          if (app.bsky.embed.gallery.image.$matches(item)) {
            t.post_embed_gallery_image.insert({ postUri: uri, position: String(i), imageCid: lex.getBlobCidString(item.image), alt: item.alt })
          }
        })
      }
    }
    return row
  }

  /**
   * A post's notifications (plugins/post.js notifsForInsert), worked out right after its insert:
   * mentions, the quoted post's author, then the authors of its indexed ancestors below
   * REPLY_NOTIF_DEPTH = 5 levels; each account once, never the author. Replies indexed before
   * their parent (the descendents rule) add nobody without thread gates: their ancestors are
   * the ones just notified.
   */
  postNotifs(row, obj) {
    const { app } = this
    const notifs = []
    const notified = new Set([row.creator])
    const maybeNotify = (did, reason, reasonSubject = null) => {
      if (notified.has(did)) return
      notified.add(did)
      const at = row.indexedAt < row.createdAt ? row.indexedAt : row.createdAt
      notifs.push({ did, author: row.creator, recordUri: row.uri, recordCid: row.cid, reason, reasonSubject, sortAt: at })
    }
    for (const feature of (obj.facets ?? []).flatMap((facet) => facet.features)) {
      if (app.bsky.richtext.facet.mention.$matches(feature)) maybeNotify(feature.did, 'mention')
    }
    for (const e of embedsOf(app, obj.embed)) {
      if (app.bsky.embed.record.$matches(e) && collectionOf(e.record.uri) === 'app.bsky.feed.post') {
        maybeNotify(didOf(e.record.uri), 'quote', e.record.uri)
      }
    }
    let ancestor = this.t.post.get(row.uri)
    for (let height = 1; height < 5 && ancestor?.replyParent; height++) {
      ancestor = this.t.post.get(ancestor.replyParent)
      if (!ancestor) break
      if (ancestor.uri !== row.uri) maybeNotify(didOf(ancestor.uri), 'reply', ancestor.uri)
    }
    return notifs
  }

  removePost(uri, timestamp) {
    const t = this.t
    let deletedEmbed = null
    const deleted = t.post.delete(uri)
    for (const item of [...this.feedItemsByPost.get(uri)]) t.feed_item.delete(item)
    const opKey = this.opReplyKeyByUri.get(uri)
    // The reference stamps the wall clock here; the event time is used instead.
    if (opKey && t.op_thread_reply.get(opKey)) t.op_thread_reply.get(opKey).deletedAt = timestamp
    for (const quote of [...this.quotesBySubject.get(uri)]) t.quote.delete(quote)
    for (const table of EMBED_TABLES) {
      for (const key of [...this.embedsByPost[table].get(uri)]) {
        const row = t[table].delete(key)
        if (table === 'post_embed_record') deletedEmbed ??= row
      }
    }
    // deleteFn looks at the first deleted embed-record row (there is at most one per post).
    if (deletedEmbed && collectionOf(deletedEmbed.embedUri) === 'app.bsky.feed.post') {
      t.quote.delete(uri)
      this.postAgg(deletedEmbed.embedUri, 'quoteCount', this.quotesBySubjectCid.get(deletedEmbed.embedCid))
    }
    return deleted
  }

  /** The final rows, table by table, in the column order of COLUMNS. */
  *rows(table) {
    if (table === 'notification') {
      for (const list of this.notifs.values()) yield* list
      return
    }
    yield* this.t[table].rows.values()
  }
}

/** The columns written per table (the rest keep their defaults, as with the indexer). */
export const COLUMNS = {
  actor: ['did', 'handle', 'indexedAt', 'upstreamStatus'],
  actor_sync: ['did', 'commitCid', 'repoRev'],
  record: ['uri', 'cid', 'did', 'json', 'indexedAt'],
  duplicate_record: ['uri', 'cid', 'duplicateOf', 'indexedAt'],
  post: ['uri', 'cid', 'creator', 'text', 'replyRoot', 'replyRootCid', 'replyParent', 'replyParentCid', 'createdAt', 'indexedAt', 'langs', 'tags', 'invalidReplyRoot', 'violatesThreadGate', 'violatesEmbeddingRules'],
  feed_item: ['uri', 'cid', 'type', 'postUri', 'originatorDid', 'sortAt'],
  post_embed_image: ['postUri', 'position', 'imageCid', 'alt'],
  post_embed_external: ['postUri', 'uri', 'title', 'description', 'thumbCid'],
  post_embed_record: ['postUri', 'embedUri', 'embedCid'],
  post_embed_video: ['postUri', 'videoCid', 'alt'],
  post_embed_gallery_image: ['postUri', 'position', 'imageCid', 'alt'],
  quote: ['uri', 'cid', 'subject', 'subjectCid', 'createdAt', 'indexedAt'],
  op_thread_reply: ['rootUri', 'parentUri', 'uri', 'deletedAt'],
  like: ['uri', 'cid', 'creator', 'subject', 'subjectCid', 'via', 'viaCid', 'createdAt', 'indexedAt'],
  repost: ['uri', 'cid', 'creator', 'subject', 'subjectCid', 'via', 'viaCid', 'createdAt', 'indexedAt'],
  follow: ['uri', 'cid', 'creator', 'subjectDid', 'createdAt', 'indexedAt'],
  actor_block: ['uri', 'cid', 'creator', 'subjectDid', 'createdAt', 'indexedAt'],
  profile: ['uri', 'cid', 'creator', 'displayName', 'description', 'avatarCid', 'bannerCid', 'joinedViaStarterPackUri', 'createdAt', 'indexedAt'],
  list: ['uri', 'cid', 'creator', 'name', 'purpose', 'description', 'descriptionFacets', 'avatarCid', 'createdAt', 'indexedAt'],
  list_item: ['uri', 'cid', 'creator', 'subjectDid', 'listUri', 'createdAt', 'indexedAt'],
  post_agg: ['uri', 'likeCount', 'replyCount', 'repostCount', 'quoteCount'],
  profile_agg: ['did', 'followersCount', 'followsCount', 'postsCount'],
  notification: ['did', 'recordUri', 'recordCid', 'author', 'reason', 'reasonSubject', 'sortAt'],
}

/** A value in COPY's text format. */
function copyValue(value) {
  if (value === null || value === undefined) return '\\N'
  if (typeof value === 'boolean') return value ? 't' : 'f'
  return String(value).replace(/[\\\t\n\r]/g, (c) => ({ '\\': '\\\\', '\t': '\\t', '\n': '\\n', '\r': '\\r' })[c])
}

/**
 * COPYs every table of `model` into `schema` over `pool` (one COPY per table, into the tables
 * and indexes the migrations made), then ANALYZE; returns rows per table and the seconds each
 * step took.
 */
export async function copyModel(model, pool, schema) {
  const { from: copyFrom } = await importCompareDep('pg-copy-streams')
  const client = await pool.connect()
  const counts = {}
  let copySeconds = 0
  let analyzeSeconds = 0
  try {
    await client.query(`SET search_path TO "${schema}",public`)
    for (const [table, columns] of Object.entries(COLUMNS)) {
      const nonEmpty = await client.query(`SELECT 1 FROM "${table}" LIMIT 1`)
      if (nonEmpty.rowCount) throw new Error(`table ${schema}.${table} is not empty: load-bulk needs a fresh schema`)
      let n = 0
      const lines = (function* () {
        let chunk = ''
        for (const row of model.rows(table)) {
          chunk += `${columns.map((c) => copyValue(row[c])).join('\t')}\n`
          n++
          if (chunk.length > 1 << 16) {
            yield chunk
            chunk = ''
          }
        }
        if (chunk) yield chunk
      })()
      const list = columns.map((c) => `"${c}"`).join(', ')
      const started = performance.now()
      await pipeline(Readable.from(lines), client.query(copyFrom(`COPY "${table}" (${list}) FROM STDIN`)))
      copySeconds += (performance.now() - started) / 1000
      counts[table] = n
    }
    const started = performance.now()
    await client.query('ANALYZE')
    analyzeSeconds = (performance.now() - started) / 1000
  } finally {
    client.release()
  }
  return { counts, copySeconds, analyzeSeconds }
}

/** The whole `load-bulk` command; returns the summary. */
export async function loadBulk({ file, url, schema, limit = Infinity, quiet = false }) {
  const started = performance.now()
  const model = await ReferenceModel.create()
  let nEvents = 0
  for await (const { lineNo, event, error } of readEvents(file)) {
    if (nEvents >= limit) break
    nEvents++
    if (error || typeof event?.did !== 'string') {
      model.tally.fail('malformed', `line ${lineNo}`, error ?? 'event has no did')
      continue
    }
    model.apply(lineNo, event)
  }
  const modelled = performance.now()
  const db = await migratedDatabase(url, schema, 4)
  let copied
  try {
    copied = await copyModel(model, db.pool, schema)
  } finally {
    await db.close()
  }
  const done = performance.now()
  const rows = copied.counts
  const nRows = Object.values(rows).reduce((a, b) => a + b, 0)
  const { copySeconds } = copied
  if (!quiet && model.tally.nFailed) log(`load-bulk: WARNING ${model.tally.nFailed} events failed (as they do in the indexer); first: ${JSON.stringify(model.tally.failures.slice(0, 3))}`)
  if (!quiet && Object.keys(model.unmodelled).length) log(`load-bulk: WARNING records of collections this loader does not model were skipped: ${JSON.stringify(model.unmodelled)}`)
  return {
    ok: true,
    path: 'bulk',
    file,
    schema,
    events: nEvents,
    modelSeconds: Math.round(modelled - started) / 1000,
    copySeconds: Math.round(copySeconds * 100) / 100,
    analyzeSeconds: Math.round(copied.analyzeSeconds * 100) / 100,
    seconds: Math.round(done - started) / 1000,
    rows: nRows,
    rowsPerSecond: Math.round(nRows / copySeconds),
    rowsByTable: rows,
    byKind: model.tally.byKind,
    unmodelled: model.unmodelled,
    failed: model.tally.nFailed,
    firstFailures: model.tally.failures,
  }
}
