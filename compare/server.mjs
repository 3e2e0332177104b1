// `reference.mjs start`: a throwaway PostgreSQL cluster, the bsky migrations, and the reference
// DataPlaneServer on top, composed the way @atproto/dev-env's TestBsky does (Database,
// migrateToLatestOrThrow, DataPlaneServer), except that everything listens on 127.0.0.1 only.
import { chmodSync, existsSync, mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { checkSchema, importBsky, importInstalled, log } from './lib.mjs'
import { initdb, startPostgres } from './pg.mjs'

/** A free TCP port on 127.0.0.1 (bound and released; good enough for a test harness). */
export async function freePort() {
  const server = createServer()
  await new Promise((resolve, reject) => server.listen(0, '127.0.0.1', resolve).on('error', reject))
  const { port } = server.address()
  await new Promise((resolve) => server.close(resolve))
  return port
}

/** Opens bsky's Database on `schema` and runs its migrations (creating the schema). */
export async function migratedDatabase(url, schema, poolSize = 20) {
  const { Database } = await importInstalled('@atproto/bsky')
  const db = new Database({ url, schema: checkSchema(schema), poolSize })
  await db.migrateToLatestOrThrow()
  return db
}

/**
 * Starts the reference DataPlaneServer on 127.0.0.1:port. Same as DataPlaneServer.create
 * (express + connect-express middleware over node:http, so HTTP/1.1 only), which would listen
 * on every interface.
 */
export async function startDataplane(db, port, plcUrl) {
  const { DataPlaneServer } = await importInstalled('@atproto/bsky')
  const { IdResolver, MemoryCache } = await importInstalled('@atproto/identity')
  const { default: createRoutes } = await importBsky('data-plane/server/routes/index.js')
  const { expressConnectMiddleware } = await importInstalled('@connectrpc/connect-express')
  const { default: express } = await importInstalled('express')
  const idResolver = new IdResolver({ plcUrl, didCache: new MemoryCache() })
  const app = express()
  app.use(expressConnectMiddleware({ routes: createRoutes(db, idResolver) }))
  const server = app.listen(port, '127.0.0.1')
  await new Promise((resolve, reject) => server.once('listening', resolve).once('error', reject))
  return new DataPlaneServer(server, idResolver)
}

/**
 * The whole `start` command. Prints one JSON line on stdout when ready:
 * {"dataplane":"http://127.0.0.1:P","dataplanePort":P,"pgPort":Q,"db":URL,"schema":S,"dataDir":D}
 * and shuts everything down (dataplane, pool, postgres) on SIGTERM or SIGINT.
 */
export async function runStart(flags) {
  const schema = checkSchema(flags.schema ?? 'bsky')
  const ownDir = !flags.data
  const dataDir = flags.data ?? mkdtempSync(join(tmpdir(), 'starling-reference-'))
  // When root runs this, PostgreSQL runs as `postgres` and must be able to reach pgdata/.
  if (ownDir) chmodSync(dataDir, 0o755)
  const pgPort = Number(flags['pg-port'] ?? 0) || (await freePort())
  const port = Number(flags.port ?? 0) || (await freePort())
  const plcUrl = flags.plc ?? 'http://127.0.0.1:2582'
  const pgOptions = [].concat(flags['pg-option'] ?? [])

  // A directory given with `--data` may hold a cluster from an earlier run: used as
  // it is, with what was loaded into it.
  if (!existsSync(join(dataDir, 'pgdata', 'PG_VERSION'))) initdb(join(dataDir, 'pgdata'))
  const pg = await startPostgres(join(dataDir, 'pgdata'), pgPort, pgOptions)
  let db
  let dataplane
  const stop = async (code) => {
    try {
      await dataplane?.destroy()
      await db?.close()
    } finally {
      await pg.stop()
      if (ownDir && !flags.keep) rmSync(dataDir, { recursive: true, force: true })
    }
    process.exit(code)
  }
  try {
    db = await migratedDatabase(pg.url, schema)
    dataplane = await startDataplane(db, port, plcUrl)
  } catch (err) {
    log(`reference: failed to start: ${err?.stack ?? err}`)
    await stop(1)
  }
  let stopping = false
  pg.exited.then(({ code, signal }) => {
    if (stopping) return
    log(`reference: postgres exited unexpectedly (${code ?? signal})`)
    process.exit(1)
  })
  for (const signal of ['SIGTERM', 'SIGINT']) {
    process.on(signal, () => {
      if (stopping) return
      stopping = true
      setTimeout(() => {
        log('reference: shutdown timed out')
        process.exit(1)
      }, 20_000).unref()
      stop(0).catch((err) => {
        log(`reference: shutdown error: ${err?.stack ?? err}`)
        process.exit(1)
      })
    })
  }
  const line = { dataplane: `http://127.0.0.1:${port}`, dataplanePort: port, pgPort, db: pg.url, schema, dataDir, plc: plcUrl }
  process.stdout.write(`${JSON.stringify(line)}\n`)
}
