// Checks that the bulk path (load-bulk) leaves the same rows as the reference's own indexer
// (load-indexer) for a small synthetic file with every kind of event the bulk model handles:
// gen-fixture.mjs's deletes, unfollows, duplicates, replies (valid and not), quotes, embeds,
// reposts, likes, blocks, profile updates, handle changes and takeovers, account events, an
// invalid record, an unindexed collection, and lists with their items (duplicates, deletes, an
// item in another's list). Both load into one throwaway PostgreSQL, into
// schemas `indexer_path` and `bulk_path`; then every table the bulk path writes is compared
// row by row (all columns but notification.id, a serial number; order-independent), and every
// other table must be empty in both. The one value compared loosely is
// op_thread_reply.deletedAt: the indexer stamps it with the wall clock, so only whether it is
// set is compared. The per-collection counts of both loads (indexed,
// failed) must match too, and on the fixture the tables in MUST_HAVE_ROWS must not be empty
// (else the comparison would pass on nothing). Exits 1 and prints the first differing rows on any difference.
//
//   <node 22> compare/test/bulk-equals-indexer.mjs [--actors 100] [--seed 1] [--in-flight 1] [--keep]
//                                                  [--file FILE.jsonl[.zst]]
// --file compares on a given file (e.g. `starling gen` output) instead of the fixture.
// The indexer runs one event at a time by default: with several in flight, events of different
// repos race (a reply indexed before its parent commits), and the reference's result then
// depends on timing.
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { COLUMNS, loadBulk } from '../bulk.mjs'
import { generate } from '../gen-fixture.mjs'
import { loadIndexer } from '../indexer.mjs'
import { importCompareDep } from '../lib.mjs'
import { initdb, startPostgres } from '../pg.mjs'
import { freePort } from '../server.mjs'

process.noDeprecation = true
const { values } = parseArgs({
  options: {
    actors: { type: 'string', default: '100' },
    seed: { type: 'string', default: '1' },
    'in-flight': { type: 'string', default: '1' },
    keep: { type: 'boolean' },
    file: { type: 'string' },
  },
})
const SHOWN = 5
// Tables the fixture must fill, so that their comparison compares something.
const MUST_HAVE_ROWS = ['post', 'like', 'follow', 'duplicate_record', 'list', 'list_item']
const dir = mkdtempSync(join(tmpdir(), 'starling-bulk-test-'))
chmodSync(dir, 0o755)
const file = values.file ?? join(dir, 'fixture.jsonl')
if (!values.file) {
  let lines = ''
  for (const events of generate({ actors: Number(values.actors), seed: Number(values.seed) })) {
    for (const event of events) lines += `${JSON.stringify(event)}\n`
  }
  writeFileSync(file, lines)
}

initdb(join(dir, 'pgdata'))
const pg = await startPostgres(join(dir, 'pgdata'), await freePort())
let failures = 0
try {
  const indexer = await loadIndexer({ file, url: pg.url, schema: 'indexer_path', inFlight: Number(values['in-flight']), quiet: true })
  const bulk = await loadBulk({ file, url: pg.url, schema: 'bulk_path', quiet: true })
  console.log(`events: ${indexer.events}; indexer ${indexer.seconds} s (${indexer.failed} failed), bulk ${bulk.seconds} s (${bulk.failed} failed)`)

  const sameKinds = JSON.stringify(sortKeys(indexer.byKind)) === JSON.stringify(sortKeys(bulk.byKind))
  if (!sameKinds) {
    failures++
    console.log(`FAIL counts per kind differ:\n  indexer ${JSON.stringify(sortKeys(indexer.byKind))}\n  bulk    ${JSON.stringify(sortKeys(bulk.byKind))}`)
  }
  if (Object.keys(bulk.unmodelled).length) {
    failures++
    console.log(`FAIL the fixture has collections the bulk path does not model: ${JSON.stringify(bulk.unmodelled)}`)
  }

  const pgLib = await importCompareDep('pg')
  const client = new pgLib.Client({ connectionString: pg.url })
  await client.connect()
  try {
    const tables = (
      await client.query(`SELECT table_name FROM information_schema.tables WHERE table_schema = 'indexer_path' AND table_type = 'BASE TABLE' ORDER BY 1`)
    ).rows.map((r) => r.table_name)
    for (const table of tables) {
      if (table.startsWith('kysely_migration')) continue
      const [a, b] = await Promise.all(['indexer_path', 'bulk_path'].map((schema) => tableRows(client, schema, table)))
      const counts = new Map()
      for (const row of a) counts.set(row, (counts.get(row) ?? 0) + 1)
      for (const row of b) counts.set(row, (counts.get(row) ?? 0) - 1)
      const onlyIndexer = [...counts].filter(([, n]) => n > 0).map(([row]) => row)
      const onlyBulk = [...counts].filter(([, n]) => n < 0).map(([row]) => row)
      if (!values.file && MUST_HAVE_ROWS.includes(table) && !a.length) {
        failures++
        console.log(`FAIL ${table}: no rows in either path; the fixture does not exercise it`)
      }
      if (!onlyIndexer.length && !onlyBulk.length) {
        if (a.length || table in COLUMNS) console.log(`ok   ${table}: ${a.length} rows`)
        continue
      }
      failures++
      console.log(`FAIL ${table}: indexer ${a.length} rows, bulk ${b.length}; ${onlyIndexer.length} only in indexer, ${onlyBulk.length} only in bulk`)
      for (const row of onlyIndexer.sort().slice(0, SHOWN)) console.log(`  indexer only: ${row}`)
      for (const row of onlyBulk.sort().slice(0, SHOWN)) console.log(`  bulk only:    ${row}`)
    }
  } finally {
    await client.end()
  }
} finally {
  await pg.stop()
  if (!values.keep) rmSync(dir, { recursive: true, force: true })
  else console.log(`kept ${dir}`)
}
console.log(failures ? `bulk-equals-indexer: FAILED (${failures} differences)` : 'bulk-equals-indexer: passed')
process.exit(failures ? 1 : 0)

/** Every row of schema.table as a canonical JSON string (keys sorted). */
async function tableRows(client, schema, table) {
  const { rows } = await client.query(`SELECT * FROM "${schema}"."${table}"`)
  return rows.map((row) => {
    // Wall clock in the indexer (plugins/post.js deleteFn): compare only whether it is set.
    if (table === 'op_thread_reply') row.deletedAt = row.deletedAt !== null
    // A serial number, in the order each path inserted.
    if (table === 'notification') delete row.id
    return JSON.stringify(sortKeys(row))
  })
}

function sortKeys(obj) {
  if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) return obj
  return Object.fromEntries(Object.keys(obj).sort().map((k) => [k, sortKeys(obj[k])]))
}
