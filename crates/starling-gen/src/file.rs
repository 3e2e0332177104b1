//! Writing a generated stream to a file, and its summary beside it.
//!
//! This thread generates 4 MiB chunks of lines; a second thread compresses them (zstd level 1)
//! into `FILE.tmp`, so generation and compression overlap. The summary is written to
//! `FILE.summary.json`, then `FILE.tmp` is renamed to `FILE`: a file with the final name is
//! always complete, and its summary is already beside it.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread;

use crate::{GenParams, Generator, ParamsError, Summary};

/// Bytes of lines handed to the writer thread at a time.
const CHUNK_BYTES: usize = 4 * 1024 * 1024;
/// Chunks queued for the writer thread, at most: generation waits when compression lags.
const CHUNKS_QUEUED_MAX: usize = 4;
/// The zstd level. Level 1 compresses this data 4.5:1 at ~0.6 µs an event, so compression keeps
/// up with generation (~0.9 µs an event); level 3 saves 10% of the size for three times the CPU.
const ZSTD_LEVEL: i32 = 1;

/// Where generation is, reported after each chunk.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Events written.
    pub events: u64,
    /// Events the parameters call for.
    pub events_planned: u64,
    /// Bytes of JSON written, uncompressed.
    pub bytes: u64,
    /// The phase: `actors`, `follows`, `activity` or `done`.
    pub phase: &'static str,
}

/// A finished file.
#[derive(Clone, Debug)]
pub struct Report {
    /// What the file holds, as written to `summary_path`.
    pub summary: Summary,
    /// The summary file.
    pub summary_path: PathBuf,
}

/// Why a file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Bad parameters.
    #[error(transparent)]
    Params(#[from] ParamsError),
    /// The output's directory does not exist.
    #[error("output directory `{0}` does not exist")]
    NoDirectory(PathBuf),
    /// The output names a directory.
    #[error("output `{0}` is a directory; name a file such as `events.jsonl.zst`")]
    IsDirectory(PathBuf),
    /// A file operation failed.
    #[error("{action} `{}`: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The writer thread panicked.
    #[error("the writer thread panicked")]
    WriterPanicked,
}

/// `FILE.summary.json` for `FILE.jsonl.zst` (or `FILE.jsonl`, or any other name plus
/// `.summary.json`).
pub fn summary_path(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name
        .strip_suffix(".zst")
        .unwrap_or(&name)
        .strip_suffix(".jsonl")
        .unwrap_or_else(|| name.strip_suffix(".zst").unwrap_or(&name));
    out.with_file_name(format!("{stem}.summary.json"))
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Generates the events of `params` into `out`, zstd-compressed when its name ends in `.zst`,
/// and the summary beside it. `progress` is called after each chunk of events.
pub fn write_file(
    params: &GenParams,
    out: &Path,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Report, WriteError> {
    params.validate()?;
    if out.is_dir() {
        return Err(WriteError::IsDirectory(out.to_path_buf()));
    }
    if let Some(dir) = out.parent().filter(|dir| !dir.as_os_str().is_empty())
        && !dir.is_dir()
    {
        return Err(WriteError::NoDirectory(dir.to_path_buf()));
    }
    let mut generator = Generator::new(params)?;
    let tmp = tmp_path(out);
    let summary_path = summary_path(out);
    let summary_tmp = tmp_path(&summary_path);
    let res = generate_into(&mut generator, &tmp, out, progress).and_then(|compressed_bytes| {
        let mut summary = generator.summary();
        summary.compressed_bytes = compressed_bytes;
        let mut json = serde_json::to_string_pretty(&summary).unwrap_or_default();
        json.push('\n');
        std::fs::write(&summary_tmp, json).map_err(io("writing", &summary_tmp))?;
        std::fs::rename(&summary_tmp, &summary_path).map_err(io("renaming", &summary_tmp))?;
        std::fs::rename(&tmp, out).map_err(io("renaming", &tmp))?;
        Ok(summary)
    });
    match res {
        Ok(summary) => Ok(Report {
            summary,
            summary_path,
        }),
        Err(err) => {
            // Leave nothing half-written behind.
            let _ = std::fs::remove_file(&tmp);
            let _ = std::fs::remove_file(&summary_tmp);
            Err(err)
        }
    }
}

/// Generates the events of `params` into `sink` as plain JSON lines (for a pipe, such as
/// `starling gen --out - | starling replay -`), and returns the summary. Nothing is written
/// beside it. `progress` is called after each chunk of events.
pub fn write_to(
    params: &GenParams,
    sink: &mut dyn Write,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Summary, WriteError> {
    params.validate()?;
    let mut generator = Generator::new(params)?;
    let writing = io("writing", Path::new("-"));
    let mut chunk = String::with_capacity(CHUNK_BYTES + 64 * 1024);
    let mut bytes = 0u64;
    let mut more = true;
    while more {
        chunk.clear();
        more = fill_chunk(&mut generator, &mut chunk);
        bytes += chunk.len() as u64;
        sink.write_all(chunk.as_bytes()).map_err(&writing)?;
        progress(&progress_of(&generator, bytes));
    }
    sink.flush().map_err(&writing)?;
    Ok(generator.summary())
}

fn progress_of(generator: &Generator, bytes: u64) -> Progress {
    Progress {
        events: generator.events(),
        events_planned: generator.events_planned(),
        bytes,
        phase: generator.phase(),
    }
}

/// Appends events to `chunk` until it holds [`CHUNK_BYTES`]; `false` when the stream ended.
fn fill_chunk(generator: &mut Generator, chunk: &mut String) -> bool {
    while chunk.len() < CHUNK_BYTES {
        if !generator.next_event(chunk) {
            return false;
        }
    }
    true
}

/// Writes every event into `tmp`; the compressed size when compressing.
fn generate_into(
    generator: &mut Generator,
    tmp: &Path,
    out: &Path,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Option<u64>, WriteError> {
    let file = File::create(tmp).map_err(io("creating", tmp))?;
    let compress = out.extension().is_some_and(|ext| ext == "zst");
    let (tx, rx) = sync_channel::<String>(CHUNKS_QUEUED_MAX);
    // Written chunks come back to be refilled: fresh 4 MiB buffers cost a page fault a page.
    let (recycle_tx, recycle_rx) = sync_channel::<String>(CHUNKS_QUEUED_MAX + 2);
    let tmp_owned = tmp.to_path_buf();
    let writer = thread::Builder::new()
        .name("gen-writer".to_owned())
        .spawn(move || write_chunks(rx, recycle_tx, file, compress, &tmp_owned))
        .map_err(io("starting the writer thread for", tmp))?;
    let mut bytes = 0u64;
    let mut more = true;
    while more {
        let mut chunk = recycle_rx
            .try_recv()
            .unwrap_or_else(|_| String::with_capacity(CHUNK_BYTES + 64 * 1024));
        chunk.clear();
        more = fill_chunk(generator, &mut chunk);
        bytes += chunk.len() as u64;
        // A closed channel means the writer failed; joining it below reports why.
        if !chunk.is_empty() && tx.send(chunk).is_err() {
            break;
        }
        progress(&progress_of(generator, bytes));
    }
    drop(tx);
    let compressed = writer.join().map_err(|_| WriteError::WriterPanicked)??;
    Ok(compress.then_some(compressed))
}

/// Writes the chunks into `file`, compressed or not, and syncs it; the bytes on disk.
fn write_chunks(
    rx: Receiver<String>,
    recycle: SyncSender<String>,
    file: File,
    compress: bool,
    path: &Path,
) -> Result<u64, WriteError> {
    let writing = io("writing", path);
    let file = if compress {
        let mut encoder = zstd::stream::write::Encoder::new(BufWriter::new(file), ZSTD_LEVEL)
            .map_err(io("starting zstd for", path))?;
        encoder
            .include_checksum(true)
            .map_err(io("starting zstd for", path))?;
        for chunk in rx {
            encoder.write_all(chunk.as_bytes()).map_err(&writing)?;
            let _ = recycle.try_send(chunk);
        }
        encoder.finish().map_err(&writing)?.into_inner()
    } else {
        let mut writer = BufWriter::new(file);
        for chunk in rx {
            writer.write_all(chunk.as_bytes()).map_err(&writing)?;
            let _ = recycle.try_send(chunk);
        }
        writer.into_inner()
    };
    let file = file.map_err(|err| WriteError::Io {
        action: "writing",
        path: path.to_path_buf(),
        source: err.into_error(),
    })?;
    file.sync_all().map_err(io("syncing", path))?;
    let len = file.metadata().map_err(io("reading", path))?.len();
    Ok(len)
}

/// Maps an I/O error to a [`WriteError`] naming the action and the file.
fn io(action: &'static str, path: &Path) -> impl Fn(std::io::Error) -> WriteError + use<> {
    let path = path.to_path_buf();
    move |source| WriteError::Io {
        action,
        path: path.clone(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks the summary file's name for the usual output names, against literals.
    #[test]
    fn summary_sits_beside_the_output() {
        for (out, summary) in [
            ("/d/net.jsonl.zst", "/d/net.summary.json"),
            ("/d/net.jsonl", "/d/net.summary.json"),
            ("net.zst", "net.summary.json"),
            ("net", "net.summary.json"),
        ] {
            assert_eq!(summary_path(Path::new(out)), PathBuf::from(summary));
        }
    }
}
