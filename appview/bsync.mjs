// Starts a real bsync (@atproto/bsync, installed by scripts/setup-appview.sh beside the AppView)
// on a throwaway PostgreSQL cluster (compare/pg.mjs), for the end-to-end tests: the AppView
// writes each user's private state to it (mutes, bookmarks, activity subscriptions, seen
// times) and Starling's bsync consumer reads it back.
//
// Usage: <node 22> appview/bsync.mjs --pg-dir DIR --api-key KEY [--dataplane URL] [--port N]
//                                     [--host ADDR]
//
// Prints exactly one line on stdout, `bsync: listening on http://HOST:PORT`, once bsync accepts
// requests (its schema migrated); errors go to stderr. On SIGTERM or SIGINT it stops bsync and
// PostgreSQL and exits 0.
//
// --pg-dir     a directory that does not exist or is empty: the cluster's data directory.
// --api-key    the key bsync accepts (BSYNC_API_KEYS), from the AppView and from Starling.
// --dataplane  Starling's gRPC URL: bsync's FanoutNotificationSeen (the AppView's updateSeen)
//              calls UpdateNotificationSeen there.
// --port       where bsync listens; default 0, an ephemeral port.
import { createServer } from 'node:net'
import { fileURLToPath } from 'node:url'
import { dirname, join } from 'node:path'
import { fail, importInstalled, parseFlags } from './lib.mjs'

const USAGE =
  'usage: node appview/bsync.mjs --pg-dir DIR --api-key KEY [--dataplane URL] [--port N] [--host ADDR]'
const flags = parseFlags(
  process.argv.slice(2),
  { 'pg-dir': 'string', 'api-key': 'string', dataplane: 'string', port: 'string', host: 'string' },
  USAGE,
)
if (!flags['pg-dir'] || !flags['api-key']) fail(USAGE)
const host = flags.host ?? '127.0.0.1'

/** A free TCP port on the loopback address (PostgreSQL needs a number before it starts). */
async function freePort() {
  const server = createServer()
  await new Promise((resolve) => server.listen(0, host, resolve))
  const { port } = server.address()
  await new Promise((resolve) => server.close(resolve))
  return port
}

let pg
let bsync
try {
  const here = dirname(fileURLToPath(import.meta.url))
  const { initdb, startPostgres } = await import(join(here, '..', 'compare', 'pg.mjs'))
  initdb(flags['pg-dir'])
  pg = await startPostgres(flags['pg-dir'], await freePort())
  const { BsyncService, envToCfg } = await importInstalled('@atproto/bsync')
  const cfg = envToCfg({
    port: Number(flags.port ?? 0),
    dbUrl: pg.url,
    // Empty scans are held open this long; Starling's consumer waits for them.
    longPollTimeoutMs: 10_000,
    apiKeys: [flags['api-key']],
    dataplaneUrls: flags.dataplane ? [flags.dataplane] : [],
    dataplaneAuthToken: flags.dataplane ? flags['api-key'] : undefined,
  })
  bsync = await BsyncService.create(cfg)
  await bsync.ctx.db.migrateToLatestOrThrow()
  // start() listens on every interface; only loopback is wanted.
  const listen = bsync.server.listen.bind(bsync.server)
  bsync.server.listen = (port, ...rest) => listen(port, host, ...rest)
  const server = await bsync.start()
  process.stdout.write(`bsync: listening on http://${host}:${server.address().port}\n`)
} catch (err) {
  process.stderr.write(`bsync: failed to start: ${err?.stack ?? err}\n`)
  await pg?.stop()
  process.exit(1)
}

let stopping = false
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, async () => {
    if (stopping) return
    stopping = true
    setTimeout(() => {
      process.stderr.write('bsync: shutdown timed out\n')
      process.exit(1)
    }, 10_000).unref()
    try {
      await bsync.destroy()
      await pg.stop()
    } catch (err) {
      process.stderr.write(`bsync: shutdown error: ${err?.stack ?? err}\n`)
      process.exit(1)
    }
    process.exit(0)
  })
}
