// Reads Jetstream v1 JSON lines, plain or zstd-compressed (.zst, through the `zstd` CLI).
import { spawn } from 'node:child_process'
import { createReadStream } from 'node:fs'
import { createInterface } from 'node:readline'

/**
 * Yields { lineNo, event } for each non-blank line of `file`, in file order; a line that is not
 * JSON yields { lineNo, error } instead, so that callers count it rather than stop.
 */
export async function* readEvents(file) {
  let input
  let child
  if (file.endsWith('.zst')) {
    child = spawn('zstd', ['-dc', '--', file], { stdio: ['ignore', 'pipe', 'pipe'] })
    let stderr = ''
    child.stderr.on('data', (chunk) => (stderr += chunk))
    child.on('error', (err) => input.destroy(new Error(`zstd: ${err.message} (install it: scripts/setup-reference.sh)`)))
    child.on('exit', (code) => {
      if (code) input.destroy(new Error(`zstd -dc ${file} failed (${code}): ${stderr.trim()}`))
    })
    input = child.stdout
  } else {
    input = createReadStream(file)
  }
  const lines = createInterface({ input, crlfDelay: Infinity })
  let lineNo = 0
  try {
    for await (const line of lines) {
      lineNo++
      if (!line.trim()) continue
      try {
        yield { lineNo, event: JSON.parse(line) }
      } catch (err) {
        yield { lineNo, error: `line ${lineNo} is not JSON: ${err.message}` }
      }
    }
  } finally {
    child?.kill()
  }
}
