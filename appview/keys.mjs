// Makes a secp256k1 keypair for a synthetic user and prints it as one JSON object:
//   privateKeyHex       64 hex chars, for appview/jwt.mjs --key
//   publicKeyMultibase  multikey (z + base58btc of 0xe7 0x01 + compressed point), the
//                       `publicKeyMultibase` of a `Multikey` verification method
//   didKey              did:key:<publicKeyMultibase>
//   identityKeys        the `keys` JSON (as a string) that GetIdentityByDid returns for it:
//                       {"atproto":{"Type":"Multikey","PublicKeyMultibase":...}}
//   didDocument         only with --did: a DID document with that key as #atproto
//                       (plus alsoKnownAs at://HANDLE with --handle, a #atproto_pds service with --pds)
//
// CLI:    node appview/keys.mjs [--private-key HEX] [--did DID] [--handle H] [--pds URL]
//         --private-key derives the rest from a fixed key (deterministic tests) instead of a
//         random one.
// Module: import { makeKeys } from './keys.mjs'; await makeKeys({ privateKeyHex?, did?, ... })
// Runs on Node 20 or 22; needs @atproto/crypto from scripts/setup-appview.sh.
import { fileURLToPath } from 'node:url'
import { fail, importInstalled, parseFlags } from './lib.mjs'

const USAGE = 'usage: node appview/keys.mjs [--private-key HEX] [--did DID] [--handle H] [--pds URL]'

export async function makeKeys({ privateKeyHex, did, handle, pds } = {}) {
  const { Secp256k1Keypair } = await importInstalled('@atproto/crypto')
  if (privateKeyHex !== undefined && !/^[0-9a-fA-F]{64}$/.test(privateKeyHex)) {
    throw new Error('--private-key must be 64 hex characters')
  }
  const keypair = privateKeyHex
    ? await Secp256k1Keypair.import(privateKeyHex, { exportable: true })
    : await Secp256k1Keypair.create({ exportable: true })
  const hex = Buffer.from(await keypair.export()).toString('hex')
  const didKey = keypair.did()
  const publicKeyMultibase = didKey.slice('did:key:'.length)
  const out = {
    privateKeyHex: hex,
    publicKeyMultibase,
    didKey,
    identityKeys: JSON.stringify({ atproto: { Type: 'Multikey', PublicKeyMultibase: publicKeyMultibase } }),
  }
  if (did) {
    out.didDocument = {
      '@context': [
        'https://www.w3.org/ns/did/v1',
        'https://w3id.org/security/multikey/v1',
        'https://w3id.org/security/suites/secp256k1-2019/v1',
      ],
      id: did,
      ...(handle ? { alsoKnownAs: [`at://${handle}`] } : {}),
      verificationMethod: [{ id: `${did}#atproto`, type: 'Multikey', controller: did, publicKeyMultibase }],
      ...(pds ? { service: [{ id: '#atproto_pds', type: 'AtprotoPersonalDataServer', serviceEndpoint: pds }] } : {}),
    }
  }
  return out
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const f = parseFlags(
    process.argv.slice(2),
    { 'private-key': 'string', did: 'string', handle: 'string', pds: 'string' },
    USAGE,
  )
  try {
    const keys = await makeKeys({ privateKeyHex: f['private-key'], did: f.did, handle: f.handle, pds: f.pds })
    process.stdout.write(`${JSON.stringify(keys)}\n`)
  } catch (err) {
    fail(`keys: ${err.message}`)
  }
}
