// Writes signed repositories with the reference implementation (@atproto/repo, @atproto/crypto)
// for Starling's backfill tests and benchmarks: `N.car` (a getRepo export) for each repository
// in OUT_DIR, and on stdout a JSON manifest of what each holds, counted here as written:
// [{did, key, records: [[collection/rkey, cid], ...]}].
//
// Usage: node appview/repos.mjs OUT_DIR N_REPOS RECORDS_PER_REPO
// A third of the repositories sign with P-256, the rest with secp256k1. Records: a profile,
// then posts, likes of earlier posts and follows of other repositories, in turn.
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { importInstalled } from './lib.mjs'

const repo = await importInstalled('@atproto/repo')
const crypto = await importInstalled('@atproto/crypto')
const [outDir, nReposText, perRepoText] = process.argv.slice(2)
const nRepos = Number(nReposText)
const perRepo = Number(perRepoText)
mkdirSync(outDir, { recursive: true })

const base32 = 'abcdefghijklmnopqrstuvwxyz234567'
const didOf = (idx) => {
  let suffix = ''
  let n = idx
  for (let pos = 0; pos < 24; pos++) {
    suffix = base32[n % 32] + suffix
    n = Math.floor(n / 32)
  }
  return `did:plc:${suffix}`
}

const createdAt = (idx, j) => new Date(Date.UTC(2026, 0, 1, 0, 0, 0) + idx * 1000 + j).toISOString()
const manifest = []
const recentPosts = []
for (let idx = 0; idx < nRepos; idx++) {
  const did = didOf(idx)
  const keypair = idx % 3 === 0 ? await crypto.P256Keypair.create() : await crypto.Secp256k1Keypair.create()
  const writes = [{
    action: repo.WriteOpAction.Create,
    collection: 'app.bsky.actor.profile',
    rkey: 'self',
    record: { $type: 'app.bsky.actor.profile', displayName: `Repo ${idx}`, description: 'made by @atproto/repo' },
  }]
  for (let j = 1; j < perRepo; j++) {
    const at = createdAt(idx, j)
    if (j % 3 === 1 || recentPosts.length === 0) {
      const rkey = `post${j}`
      const record = { $type: 'app.bsky.feed.post', text: `post ${j} of repo ${idx} & <friends>`, langs: ['en'], createdAt: at }
      writes.push({ action: repo.WriteOpAction.Create, collection: 'app.bsky.feed.post', rkey, record })
      const cid = await repo.cidForRecord(record)
      recentPosts.push({ uri: `at://${did}/app.bsky.feed.post/${rkey}`, cid: cid.toString() })
      if (recentPosts.length > 64) recentPosts.shift()
    } else if (j % 3 === 2) {
      const subject = recentPosts[(idx * 7 + j) % recentPosts.length]
      const record = { $type: 'app.bsky.feed.like', subject, createdAt: at }
      writes.push({ action: repo.WriteOpAction.Create, collection: 'app.bsky.feed.like', rkey: `like${j}`, record })
    } else {
      const record = { $type: 'app.bsky.graph.follow', subject: didOf((idx + j) % Math.max(nRepos, 2)), createdAt: at }
      writes.push({ action: repo.WriteOpAction.Create, collection: 'app.bsky.graph.follow', rkey: `follow${j}`, record })
    }
  }
  const storage = new repo.MemoryBlockstore()
  const created = await repo.Repo.create(storage, did, keypair, writes)
  const car = await repo.concatBytesAsync(repo.getFullRepo(storage, created.cid))
  writeFileSync(join(outDir, `${idx}.car`), car)
  const records = []
  for (const write of writes) {
    records.push([`${write.collection}/${write.rkey}`, (await repo.cidForRecord(write.record)).toString()])
  }
  manifest.push({ did, key: keypair.did(), rev: created.commit.rev, records })
}
process.stdout.write(JSON.stringify(manifest) + '\n')
