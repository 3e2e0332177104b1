// Mints the service-auth JWT a viewer's PDS would send to the AppView:
// header {typ: "JWT", alg: "ES256K"}, payload {iat, iss, aud, exp, lxm, jti}, signed with the
// viewer's secp256k1 key as a 64-byte low-S r‖s signature, base64url throughout. The same
// bytes as createServiceJwt of @atproto/xrpc-server. The AppView checks it against the
// `atproto` key that the dataplane's GetIdentityByDid returns for `iss`.
//
// CLI:    node appview/jwt.mjs --iss DID --key HEX --lxm NSID [--aud DID] [--ttl SECS]
//         prints the token (no "Bearer "). --aud defaults to $BSKY_SERVER_DID, else the
//         default of start.mjs; --ttl (exp - iat) to 60.
// Module: import { serviceJwt } from './jwt.mjs'
//         await serviceJwt({ iss, privateKeyHex, lxm, aud?, ttlSecs?, iat?, jti? })
// Runs on Node 20 or 22; needs @atproto/crypto from scripts/setup-appview.sh.
import { randomBytes } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import { DEFAULT_SERVER_DID, fail, importInstalled, parseFlags } from './lib.mjs'

const USAGE = 'usage: node appview/jwt.mjs --iss DID --key HEX --lxm NSID [--aud DID] [--ttl SECS]'

export async function serviceJwt({
  iss,
  privateKeyHex,
  lxm,
  aud = process.env.BSKY_SERVER_DID || DEFAULT_SERVER_DID,
  ttlSecs = 60,
  iat = Math.floor(Date.now() / 1000),
  jti = randomBytes(16).toString('hex'),
}) {
  if (!iss?.startsWith('did:')) throw new Error(`iss must be a DID, got ${iss}`)
  if (!/^[0-9a-fA-F]{64}$/.test(privateKeyHex ?? '')) throw new Error('the key must be 64 hex characters')
  if (!lxm) throw new Error('lxm (the called NSID) is required')
  const { Secp256k1Keypair } = await importInstalled('@atproto/crypto')
  const keypair = await Secp256k1Keypair.import(privateKeyHex)
  const b64 = (json) => Buffer.from(JSON.stringify(json)).toString('base64url')
  const header = { typ: 'JWT', alg: keypair.jwtAlg } // ES256K
  const payload = { iat, iss, aud, exp: iat + Number(ttlSecs), lxm, jti }
  const signed = `${b64(header)}.${b64(payload)}`
  const sig = Buffer.from(await keypair.sign(Buffer.from(signed, 'utf8')))
  return `${signed}.${sig.toString('base64url')}`
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const f = parseFlags(
    process.argv.slice(2),
    { iss: 'string', key: 'string', lxm: 'string', aud: 'string', ttl: 'string' },
    USAGE,
  )
  if (!f.iss || !f.key || !f.lxm) fail(USAGE)
  try {
    const token = await serviceJwt({ iss: f.iss, privateKeyHex: f.key, lxm: f.lxm, aud: f.aud, ttlSecs: f.ttl ?? 60 })
    process.stdout.write(`${token}\n`)
  } catch (err) {
    fail(`jwt: ${err.message}`)
  }
}
