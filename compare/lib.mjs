// Shared by the compare/ scripts: where the packages live, flag parsing, small helpers.
// The reference dataplane is the stock @atproto/bsky installed by scripts/setup-appview.sh;
// compare/'s own npm dependencies (pg, pg-copy-streams) are installed by
// scripts/setup-reference.sh into STARLING_COMPARE_DIR.
import { createRequire } from 'node:module'
import { homedir } from 'node:os'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'

export { appviewDir, appviewNode, fail, importInstalled, importInstalledFile, parseFlags } from '../appview/lib.mjs'
import { importInstalledFile } from '../appview/lib.mjs'

/** The install directory of compare/'s npm dependencies (scripts/setup-reference.sh). */
export function compareDir() {
  return process.env.STARLING_COMPARE_DIR || join(homedir(), '.cache', 'starling', 'compare')
}

/** Imports one of compare/'s own dependencies from compareDir(). */
export async function importCompareDep(name) {
  const dir = compareDir()
  let path
  try {
    path = createRequire(join(dir, 'package.json')).resolve(name)
  } catch (err) {
    throw new Error(`${name} is not installed in ${dir}: run scripts/setup-reference.sh (${err.message})`)
  }
  const mod = await import(pathToFileURL(path).href)
  return mod.default ?? mod
}

/** Imports a module of the installed @atproto/bsky by its path under dist/. */
export function importBsky(relPath) {
  return importInstalledFile(join('@atproto', 'bsky', 'dist', relPath))
}

/** Jetstream `time_us` (microseconds) as the ISO timestamp the indexer stores (milliseconds). */
export function timeUsToIso(timeUs) {
  return new Date(Math.floor(Number(timeUs) / 1000)).toISOString()
}

/** Checks a Postgres schema name the way bsky's Database does. */
export function checkSchema(schema) {
  if (!/^[a-z_]+$/i.test(schema)) throw new Error(`schema \`${schema}\` must match [A-Za-z_]+ (bsky's Database rejects others)`)
  return schema
}

export function log(message) {
  process.stderr.write(`${message}\n`)
}
