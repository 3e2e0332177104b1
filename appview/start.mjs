// Starts the stock AppView (@atproto/bsky, installed by scripts/setup-appview.sh) against an
// external dataplane such as Starling, the way its own entry point services/bsky/api.ts does:
// ServerConfig.readEnv(), Secp256k1Keypair.import(signing key), BskyAppView.create(), start().
//
// Usage: <node 22> appview/start.mjs --dataplane http://127.0.0.1:PORT[,URL...]
//                                     [--port N] [--host ADDR] [--trace-rpcs]
//
// Prints exactly one line on stdout, `appview: listening on http://HOST:PORT`, once the server
// accepts requests; errors go to stderr. Exits 0 after SIGTERM or SIGINT.
//
// --dataplane  sets BSKY_DATAPLANE_URLS (else the env var must be set).
// --port       sets BSKY_PORT; default 0, an ephemeral port.
// --host       listen address; default 127.0.0.1 (the stock start() would bind every interface).
// --trace-rpcs (or STARLING_APPVIEW_TRACE_RPCS=1) writes one JSON line per dataplane RPC to
//              stderr: {"rpc":"GetTimeline","code":"ok"|"unimplemented"|...,"ms":1.2,"req":N,
//              "xrpc":PATH,"msg":ERROR}, where req numbers the HTTP requests and xrpc is the caller's path.
//
// Every other setting is a BSKY_* variable read by ServerConfig.readEnv(); start.mjs fills in
// test values for those the AppView needs and leaves any that are already set (see DEFAULTS).
import { AsyncLocalStorage } from 'node:async_hooks'
import {
  DEFAULT_ADMIN_PASSWORD,
  DEFAULT_SERVER_DID,
  appviewNode,
  fail,
  importInstalled,
  parseFlags,
} from './lib.mjs'

const USAGE =
  'usage: node appview/start.mjs --dataplane URL[,URL...] [--port N] [--host ADDR] [--trace-rpcs]'

const DEFAULTS = {
  // Required by the AppView; never contacted by the eight endpoints Starling serves.
  BSKY_BSYNC_URL: 'http://127.0.0.1:9',
  MOD_SERVICE_DID: 'did:example:mod',
  // Only used to build image and video URL strings; a constant keeps responses comparable
  // across runs (the real port changes from run to run).
  BSKY_PUBLIC_URL: 'http://appview.test',
  // The `aud` that service JWTs must carry (appview/jwt.mjs uses the same default).
  BSKY_SERVER_DID: DEFAULT_SERVER_DID,
  // `Basic admin:<pw>`: role auth, and with `appview-as-did: DID` the test back door.
  BSKY_ADMIN_PASSWORDS: DEFAULT_ADMIN_PASSWORD,
  // The AppView's own secp256k1 key (hex); signs nothing the tests look at. A fixed test key.
  BSKY_SERVICE_SIGNING_KEY: '6172329640b638501b331ac54263b43f8aab056364ff09b305f4b248e0e9bb84',
  // `development` turns on debugMode: every XRPC response is validated against the lexicons,
  // so malformed data from the dataplane fails loudly. Use NODE_ENV=production for benchmarks.
  // (`test` is avoided: it makes the config invent a GrowthBook client key.)
  NODE_ENV: 'development',
  // Requests with `x-bsky-search-v2-override: starling-test` take the AppView's second search
  // path (SearchActorsTypeahead, SearchPostsV2, ...); the others keep the first.
  BSKY_SEARCH_V2_OVERRIDE_HEADER: 'starling-test',
}
// The AppView logs nothing unless LOG_ENABLED=true; then pino writes JSON lines to stdout, or
// to the file LOG_DESTINATION (not /dev/stderr: opening it fails when stderr is a socket).

const flags = parseFlags(
  process.argv.slice(2),
  { dataplane: 'string', port: 'string', host: 'string', 'trace-rpcs': 'bool' },
  USAGE,
)
if (Number(process.versions.node.split('.')[0]) < 22) {
  fail(`appview: @atproto/bsky needs Node >= 22, this is ${process.version}; run ${appviewNode()}`)
}
if (flags.dataplane) process.env.BSKY_DATAPLANE_URLS = flags.dataplane
if (!process.env.BSKY_DATAPLANE_URLS) fail(`appview: no dataplane: pass --dataplane or set BSKY_DATAPLANE_URLS\n${USAGE}`)
if (flags.port !== undefined) process.env.BSKY_PORT = flags.port
process.env.BSKY_PORT ??= '0'
for (const [name, value] of Object.entries(DEFAULTS)) process.env[name] ??= value
const host = flags.host ?? '127.0.0.1'
const trace = flags['trace-rpcs'] || /^(1|true)$/i.test(process.env.STARLING_APPVIEW_TRACE_RPCS ?? '')

let bsky
try {
  // Imported only now: the AppView's loggers read LOG_* when their module loads.
  const { BskyAppView, ServerConfig } = await importInstalled('@atproto/bsky')
  const { Secp256k1Keypair } = await importInstalled('@atproto/crypto')
  const config = ServerConfig.readEnv()
  const signingKey = await Secp256k1Keypair.import(process.env.BSKY_SERVICE_SIGNING_KEY)
  bsky = BskyAppView.create({ config, signingKey })

  // start() calls app.listen(port); pass the host along so that only loopback is bound.
  const listen = bsky.app.listen.bind(bsky.app)
  bsky.app.listen = (port, ...rest) => listen(port, host, ...rest)
  if (trace) traceRpcs(bsky)

  const server = await bsky.start()
  const { port } = server.address()
  const shown = host.includes(':') ? `[${host}]` : host
  process.stdout.write(`appview: listening on http://${shown}:${port}\n`)
} catch (err) {
  process.stderr.write(`appview: failed to start: ${err?.stack ?? err}\n`)
  process.exit(1)
}

let stopping = false
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, async () => {
    if (stopping) return
    stopping = true
    // destroy() ends open connections gracefully; don't let a stuck one hold the exit forever.
    setTimeout(() => {
      process.stderr.write('appview: shutdown timed out\n')
      process.exit(1)
    }, 10_000).unref()
    try {
      await bsky.destroy()
    } catch (err) {
      process.stderr.write(`appview: shutdown error: ${err?.stack ?? err}\n`)
      process.exit(1)
    }
    // The dataplane client keeps its HTTP/2 sessions open; they are not worth waiting for.
    process.exit(0)
  })
}

// Wraps every method of the AppView's dataplane client (one object, shared by the hydrator,
// the auth verifier and the routes) to log each RPC with the XRPC request that caused it.
function traceRpcs(bsky) {
  const requests = new AsyncLocalStorage()
  let seq = 0
  const handle = bsky.app.handle.bind(bsky.app)
  bsky.app.handle = (req, res, next) =>
    requests.run({ req: ++seq, xrpc: req.url.split('?')[0] }, () => handle(req, res, next))
  const dataplane = bsky.ctx.dataplane
  for (const name of Object.keys(dataplane)) {
    const call = dataplane[name]
    if (typeof call !== 'function') continue
    const rpc = name[0].toUpperCase() + name.slice(1)
    dataplane[name] = async (...args) => {
      const start = performance.now()
      let code = 'ok'
      let msg
      try {
        return await call(...args)
      } catch (err) {
        // ConnectError: numeric code and `[code_name] message`; anything else by name.
        code = /^\[([a-z_]+)\]/.exec(err?.message ?? '')?.[1] ?? err?.name ?? 'error'
        msg = String(err?.message ?? err).slice(0, 300)
        throw err
      } finally {
        const ms = Math.round((performance.now() - start) * 100) / 100
        const { req = null, xrpc = null } = requests.getStore() ?? {}
        process.stderr.write(`${JSON.stringify({ rpc, code, ms, req, xrpc, msg })}\n`)
      }
    }
  }
}
