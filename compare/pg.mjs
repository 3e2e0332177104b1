// A throwaway PostgreSQL cluster: initdb into a directory (trust auth, loopback TCP only),
// start it on a port, stop it. PostgreSQL refuses to run as root, so when this process is root
// the server runs as the `postgres` system user (created by Debian's package or by
// scripts/setup-reference.sh) and the data directory is handed to that user.
import { execFileSync, spawn } from 'node:child_process'
import { chownSync, existsSync, mkdirSync, readdirSync } from 'node:fs'
import { join } from 'node:path'

/** Debian's PostgreSQL server binaries: the newest /usr/lib/postgresql/<major>/bin, or PG_BINDIR. */
export function pgBindir() {
  if (process.env.PG_BINDIR) return process.env.PG_BINDIR
  const base = '/usr/lib/postgresql'
  const majors = existsSync(base)
    ? readdirSync(base).filter((v) => existsSync(join(base, v, 'bin', 'postgres'))).sort((a, b) => Number(a) - Number(b))
    : []
  if (!majors.length) throw new Error(`no PostgreSQL server under ${base}/*/bin: run scripts/setup-reference.sh (or set PG_BINDIR)`)
  return join(base, majors.at(-1), 'bin')
}

/** The uid/gid to run the server as: ourselves, or the `postgres` user when we are root. */
function serverUser() {
  if (process.getuid?.() !== 0) return {}
  const id = (flag) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim())
  try {
    return { uid: id('-u'), gid: id('-g') }
  } catch {
    throw new Error('running as root, but there is no `postgres` user to run PostgreSQL as: run scripts/setup-reference.sh')
  }
}

function chownTree(dir, { uid, gid }) {
  execFileSync('chown', ['-R', `${uid}:${gid}`, dir])
}

/**
 * Creates a cluster in `dataDir` (which must not exist or be empty) with user `pg`, trust auth.
 * The user is named after nothing on the machine, so the connection URL is always
 * postgresql://pg@127.0.0.1:PORT/postgres.
 */
export function initdb(dataDir) {
  const user = serverUser()
  mkdirSync(dataDir, { recursive: true })
  if (user.uid !== undefined) chownSync(dataDir, user.uid, user.gid)
  execFileSync(join(pgBindir(), 'initdb'), ['-D', dataDir, '-A', 'trust', '-U', 'pg', '-E', 'UTF8', '--locale=C', '--no-sync'], {
    ...user,
    stdio: ['ignore', 'ignore', 'pipe'],
  })
}

/**
 * Starts `postgres` on 127.0.0.1:port as a child process and resolves once it accepts
 * connections. `options` are extra `-c name=value` settings; the defaults are PostgreSQL's own
 * apart from where it listens. Returns { url, stop() }.
 */
export async function startPostgres(dataDir, port, options = []) {
  const user = serverUser()
  if (user.uid !== undefined) chownTree(dataDir, user)
  // TCP on loopback only: a Unix socket's path has a 107-byte limit that a data directory
  // deep in a checkout passes.
  const args = ['-D', dataDir, '-p', String(port), '-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=']
  for (const option of options) args.push('-c', option)
  const child = spawn(join(pgBindir(), 'postgres'), args, { ...user, stdio: ['ignore', 'ignore', 'pipe'] })
  let stderr = ''
  child.stderr.on('data', (chunk) => {
    stderr = (stderr + chunk).slice(-4000)
  })
  let exited = null
  const exitPromise = new Promise((resolve) =>
    child.on('exit', (code, signal) => {
      exited = { code, signal }
      resolve(exited)
    }),
  )
  const url = `postgresql://pg@127.0.0.1:${port}/postgres`
  const deadline = Date.now() + 60_000
  for (;;) {
    if (exited) throw new Error(`postgres exited (${exited.code ?? exited.signal}) while starting:\n${stderr}`)
    try {
      execFileSync(join(pgBindir(), 'pg_isready'), ['-h', '127.0.0.1', '-p', String(port), '-U', 'pg', '-q'])
      break
    } catch {
      if (Date.now() > deadline) throw new Error(`postgres did not accept connections on ${port} within 60 s:\n${stderr}`)
      await new Promise((r) => setTimeout(r, 100))
    }
  }
  return {
    url,
    pid: child.pid,
    exited: exitPromise,
    /** Fast shutdown (SIGINT): aborts open transactions, then a clean checkpoint. */
    async stop() {
      if (!exited) child.kill('SIGINT')
      await exitPromise
    },
  }
}
