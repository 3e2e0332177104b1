// Calls one bsky.Service RPC on a dataplane that speaks HTTP/1.1 (the reference), with the
// generated client of the installed @atproto/bsky: gRPC over HTTP/1.1 (what the stock AppView
// uses with BSKY_DATAPLANE_HTTP_VERSION=1.1) or the Connect protocol (binary protobuf).
//
//   <node 22> compare/rpc.mjs --url http://127.0.0.1:PORT [--protocol grpc|connect] METHOD [JSON]
//   e.g. compare/rpc.mjs --url http://127.0.0.1:PORT GetTimeline '{"actorDid":"did:plc:…","limit":5}'
//
// JSON is the request in protobuf's JSON form (camelCase field names); the response is printed
// the same way on stdout. Exits 1 with the error code and message on a failed call.
import { parseArgs } from 'node:util'
import { fail, importBsky, importInstalled } from './lib.mjs'

process.noDeprecation = true

/** A client of bsky.Service at `url`, over HTTP/1.1. */
export async function referenceClient(url, protocol = 'grpc') {
  const { createClient } = await importInstalled('@connectrpc/connect')
  const { createGrpcTransport, createConnectTransport } = await importInstalled('@connectrpc/connect-node')
  const { Service } = await importBsky('proto/bsky_connect.js')
  const make = protocol === 'connect' ? createConnectTransport : createGrpcTransport
  const transport = make({ baseUrl: url, httpVersion: '1.1', useBinaryFormat: true })
  return { client: createClient(Service, transport), Service }
}

/** A client of bsky.Service at `addr` (host:port), gRPC over h2c: how Starling is called. */
export async function starlingClient(addr) {
  const { createClient } = await importInstalled('@connectrpc/connect')
  const { createGrpcTransport } = await importInstalled('@connectrpc/connect-node')
  const { Service } = await importBsky('proto/bsky_connect.js')
  const transport = createGrpcTransport({ baseUrl: `http://${addr}`, httpVersion: '2', useBinaryFormat: true })
  return createClient(Service, transport)
}

async function main() {
  const { values, positionals } = parseArgs({
    options: { url: { type: 'string' }, protocol: { type: 'string', default: 'grpc' } },
    allowPositionals: true,
  })
  const usage = 'usage: compare/rpc.mjs --url http://127.0.0.1:PORT [--protocol grpc|connect] METHOD [JSON]'
  if (!values.url || positionals.length < 1 || positionals.length > 2) fail(usage)
  const [method, json = '{}'] = positionals
  const { client, Service } = await referenceClient(values.url, values.protocol)
  const name = method[0].toLowerCase() + method.slice(1)
  const info = Service.methods[name]
  if (!info) fail(`no RPC ${method} in bsky.Service`)
  try {
    const res = await client[name](info.I.fromJsonString(json))
    process.stdout.write(`${res.toJsonString()}\n`)
  } catch (err) {
    process.stderr.write(`rpc: ${method} failed: ${err?.message ?? err}\n`)
    process.exit(1)
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await main()
