// Checks the harness itself, without Starling: a stub dataplane (gRPC over h2c, as Starling
// serves it) implements GetIdentityByDid, GetTimeline (empty) and GetLatestRev and answers
// every other RPC UNIMPLEMENTED; start.mjs runs the real AppView against it; tokens from
// jwt.mjs for a key from keys.mjs must pass the AppView's service-auth checks, and bad ones
// must fail the way the AppView's service-auth rules say. Ends with `N passed, N failed`; exit 1 on a failure.
//
// Usage: <node 22> appview/selftest.mjs
import { spawn } from 'node:child_process'
import http2 from 'node:http2'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { serviceJwt } from './jwt.mjs'
import { makeKeys } from './keys.mjs'
import { DEFAULT_ADMIN_PASSWORD, importInstalledFile } from './lib.mjs'

const { connectNodeAdapter } = await importInstalledFile('@connectrpc/connect-node/dist/esm/index.js')
const { Code, ConnectError } = await importInstalledFile('@connectrpc/connect/dist/esm/index.js')
const { Service } = await importInstalledFile('@atproto/bsky/dist/proto/bsky_connect.js')

const VIEWER = 'did:plc:selftestviewer'
const viewer = await makeKeys({ did: VIEWER })
const other = await makeKeys()

const stub = http2.createServer(
  connectNodeAdapter({
    grpc: true,
    connect: false,
    grpcWeb: false,
    routes: (router) =>
      router.service(Service, {
        async getIdentityByDid(req) {
          if (req.did !== VIEWER) throw new ConnectError('identity not found', Code.NotFound)
          return { did: VIEWER, handle: 'viewer.test', keys: Buffer.from(viewer.identityKeys), services: Buffer.from('{}') }
        },
        async getTimeline() {
          return { items: [] }
        },
        async getLatestRev() {
          return {}
        },
      }),
  }),
)
await new Promise((resolve) => stub.listen(0, '127.0.0.1', resolve))

const start = fileURLToPath(new URL('./start.mjs', import.meta.url))
const appview = spawn(
  process.execPath,
  [start, '--dataplane', `http://127.0.0.1:${stub.address().port}`, '--trace-rpcs'],
  { stdio: ['ignore', 'pipe', 'pipe'] },
)
const rpcs = []
createInterface({ input: appview.stderr }).on('line', (line) => {
  try {
    rpcs.push(JSON.parse(line))
  } catch {
    process.stderr.write(`appview stderr: ${line}\n`)
  }
})
const exited = new Promise((resolve) => appview.on('exit', (code, signal) => resolve({ code, signal })))
const base = await new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error('no ready line within 60 s')), 60_000)
  createInterface({ input: appview.stdout }).on('line', (line) => {
    const m = /^appview: listening on (http:\/\/127\.0\.0\.1:\d+)$/.exec(line)
    if (m) {
      clearTimeout(timer)
      resolve(m[1])
    } else reject(new Error(`unexpected stdout line: ${line}`))
  })
  exited.then(({ code }) => reject(new Error(`start.mjs exited with ${code} before it was ready`)))
})

let passed = 0
let failed = 0
function check(name, ok, detail) {
  if (ok) passed++
  else failed++
  process.stdout.write(`${ok ? 'ok  ' : 'FAIL'} ${name}${ok ? '' : `: ${detail}`}\n`)
}
async function xrpc(nsid, headers = {}, query = '') {
  const res = await fetch(`${base}/xrpc/${nsid}${query}`, { headers })
  return { status: res.status, body: await res.json().catch(() => null) }
}
const bearer = async (opts) => ({
  authorization: `Bearer ${await serviceJwt({ iss: VIEWER, privateKeyHex: viewer.privateKeyHex, lxm: 'app.bsky.feed.getTimeline', ...opts })}`,
})
const admin = { authorization: `Basic ${Buffer.from(`admin:${DEFAULT_ADMIN_PASSWORD}`).toString('base64')}` }
const TL = 'app.bsky.feed.getTimeline'

async function expect(name, res, status, error) {
  const r = await res
  const ok = r.status === status && (error === undefined || r.body?.error === error)
  check(name, ok, `HTTP ${r.status} ${JSON.stringify(r.body)}, wanted ${status} ${error ?? ''}`)
  return r
}

try {
  const before = rpcs.length
  const good = await expect('valid JWT is accepted', xrpc(TL, await bearer()), 200)
  check('empty timeline renders', JSON.stringify(good.body) === '{"feed":[]}', JSON.stringify(good.body))
  await new Promise((r) => setTimeout(r, 100)) // let the trace lines arrive
  const seen = rpcs.slice(before).map((r) => r.rpc).join(',')
  check('RPC trace of getTimeline', seen === 'GetIdentityByDid,GetTimeline,GetLatestRev', seen)
  await expect('JWT signed by another key', xrpc(TL, await bearer({ privateKeyHex: other.privateKeyHex })), 401, 'BadJwtSignature')
  await expect('JWT with another lxm', xrpc(TL, await bearer({ lxm: 'app.bsky.actor.getProfile' })), 401, 'BadJwtLexiconMethod')
  await expect('JWT with another aud', xrpc(TL, await bearer({ aud: 'did:web:elsewhere.test' })), 401, 'BadJwtAudience')
  await expect('JWT expired', xrpc(TL, await bearer({ ttlSecs: -10 })), 401, 'JwtExpired')
  await expect(
    'JWT of an unknown DID',
    xrpc(TL, { authorization: `Bearer ${await serviceJwt({ iss: 'did:plc:nobody', privateKeyHex: viewer.privateKeyHex, lxm: TL })}` }),
    401,
    'AuthenticationRequired',
  )
  await expect('no auth on getTimeline', xrpc(TL), 401, 'AuthMissing')
  await expect('admin back door (appview-as-did)', xrpc(TL, { ...admin, 'appview-as-did': VIEWER }), 200)
  await expect('unimplemented RPC gives 500', xrpc('app.bsky.actor.getProfile', {}, `?actor=${VIEWER}`), 500, 'InternalServerError')
  const health = await fetch(`${base}/xrpc/_health`)
  check('_health is 503 while Ping is unimplemented', health.status === 503, `HTTP ${health.status}`)
} catch (err) {
  check('requests', false, err?.stack ?? err)
}

appview.kill('SIGTERM')
const exit = await Promise.race([exited, new Promise((r) => setTimeout(() => r({ code: 'timeout' }), 15_000))])
check('exits 0 on SIGTERM', exit.code === 0, JSON.stringify(exit))
if (exit.code === 'timeout') appview.kill('SIGKILL')
stub.close()
process.stdout.write(`${passed} passed, ${failed} failed\n`)
process.exit(failed ? 1 : 0)
