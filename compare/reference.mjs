// The reference dataplane (@atproto/bsky@0.0.280's own, on PostgreSQL) for side-by-side
// benchmarks with Starling: start it, and load Jetstream files into it two ways.
//
//   node compare/reference.mjs start [--data DIR] [--port N] [--pg-port N] [--plc URL]
//                                    [--schema NAME] [--pg-option NAME=VALUE ...] [--keep]
//   node compare/reference.mjs load-indexer FILE.jsonl[.zst] --db URL [--schema NAME]
//                                    [--in-flight N] [--limit N] [--progress S]
//   node compare/reference.mjs load-bulk FILE.jsonl[.zst] --db URL [--schema NAME]
//
// Run with the Node 22 of scripts/setup-appview.sh (scripts/setup-reference.sh installs the rest).
// `start` with `--data DIR` uses DIR/pgdata as it is when it already holds a cluster (and never
// removes DIR); without it, a throwaway directory is made and removed unless `--keep`.
// `start` prints one JSON line ({"dataplane","dataplanePort","pgPort","db","schema","dataDir",
// "plc"}) once the dataplane accepts requests, and stops the dataplane and PostgreSQL on SIGTERM.
// The loaders print one JSON summary line on stdout and progress on stderr; README.md has more.
import { parseArgs } from 'node:util'
import { fail } from './lib.mjs'

// bsky's Database issues its SET search_path while a pool client is busy; pg 8 warns about it.
process.noDeprecation = true

const USAGE = `usage: node compare/reference.mjs start [--data DIR] [--port N] [--pg-port N] [--plc URL] [--schema NAME] [--pg-option K=V]... [--keep]
       node compare/reference.mjs load-indexer FILE --db URL [--schema NAME] [--in-flight N] [--limit N] [--progress SECONDS]
       node compare/reference.mjs load-bulk FILE --db URL [--schema NAME] [--limit N]`

const OPTIONS = {
  start: {
    data: { type: 'string' },
    port: { type: 'string' },
    'pg-port': { type: 'string' },
    plc: { type: 'string' },
    schema: { type: 'string' },
    'pg-option': { type: 'string', multiple: true },
    keep: { type: 'boolean' },
  },
  'load-indexer': {
    db: { type: 'string' },
    schema: { type: 'string' },
    'in-flight': { type: 'string' },
    limit: { type: 'string' },
    progress: { type: 'string' },
  },
  'load-bulk': {
    db: { type: 'string' },
    schema: { type: 'string' },
    limit: { type: 'string' },
  },
}

const [command, ...rest] = process.argv.slice(2)
if (!OPTIONS[command]) fail(USAGE)
if (Number(process.versions.node.split('.')[0]) < 22) fail(`reference: @atproto/bsky needs Node >= 22, this is ${process.version}`)
let parsed
try {
  parsed = parseArgs({ args: rest, options: OPTIONS[command], allowPositionals: true, strict: true })
} catch (err) {
  fail(`${err.message}\n${USAGE}`)
}
const { values: flags, positionals } = parsed

if (command === 'start') {
  if (positionals.length) fail(USAGE)
  const { runStart } = await import('./server.mjs')
  await runStart(flags)
} else {
  if (positionals.length !== 1 || !flags.db) fail(USAGE)
  const opts = {
    file: positionals[0],
    url: flags.db,
    schema: flags.schema ?? 'bsky',
    limit: flags.limit === undefined ? Infinity : Number(flags.limit),
  }
  let summary
  if (command === 'load-indexer') {
    const { loadIndexer } = await import('./indexer.mjs')
    summary = await loadIndexer({
      ...opts,
      inFlight: Number(flags['in-flight'] ?? 16),
      progressSeconds: Number(flags.progress ?? 10),
    })
  } else {
    const { loadBulk } = await import('./bulk.mjs')
    summary = await loadBulk(opts)
  }
  process.stdout.write(`${JSON.stringify(summary)}\n`)
  process.exit(summary.ok ? 0 : 1)
}
