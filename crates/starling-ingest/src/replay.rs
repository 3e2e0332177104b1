//! Replaying a recorded file of events (`.jsonl`, or `.jsonl.zst` compressed with plain zstd).
//!
//! A reader thread reads and decompresses the file into chunks of whole lines; the calling
//! thread decodes and applies them. Each batch stores, atomically with its data, the offset in
//! the decompressed stream after its last line. Replaying the same file again resumes there, so
//! a replay killed at any moment finishes with the same state as one never interrupted.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread;

use starling_core::jetstream::{DropReason, EVENT_BYTES_MAX};
use starling_store::{Progress, Store};
use tracing::info;

use crate::IngestError;
use crate::applier::{Applier, BatchLimits, CommitSink};

/// Bytes read from the file per chunk handed to the applier.
const CHUNK_BYTES: usize = 4 * 1024 * 1024;
/// Chunks read ahead of the applier, at most: bounds memory at
/// `(CHUNK_BYTES + LINE_BYTES_MAX) * (this + 2)`.
const CHUNKS_AHEAD_MAX: usize = 4;
/// The longest line kept whole, in bytes: an event is at most [`EVENT_BYTES_MAX`]. A longer
/// line is skipped as it is read, never held, and counted as [`DropReason::TooLarge`].
pub const LINE_BYTES_MAX: usize = EVENT_BYTES_MAX;

/// How to replay.
#[derive(Clone, Debug, Default)]
pub struct ReplayOptions {
    /// Batch limits.
    pub limits: BatchLimits,
    /// Start from the beginning even if the store has progress for this file.
    pub from_start: bool,
}

/// What a replay did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Events (lines) read and applied or dropped by this run.
    pub events: u64,
    /// Decompressed bytes skipped because an earlier run had applied them.
    pub resumed_from: u64,
}

/// Progress of a running replay, readable from another thread for a progress bar.
#[derive(Debug, Default)]
pub struct ReplayProgress {
    /// File bytes read so far (compressed bytes, for a compressed file).
    pub file_bytes_read: AtomicU64,
    /// Events applied so far.
    pub events: AtomicU64,
}

/// A chunk of whole lines and the decompressed offset just after them; or, with `too_long`,
/// one line over [`LINE_BYTES_MAX`], skipped (`lines` is empty).
struct Chunk {
    lines: Vec<u8>,
    end_offset: u64,
    too_long: bool,
}

/// Counts bytes read through it, so that progress can be shown in file bytes.
struct CountingReader<R> {
    inner: R,
    progress: Arc<ReplayProgress>,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.progress
            .file_bytes_read
            .fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Names a file for its stored progress: the canonical path and the size.
fn source_name(path: &Path) -> io::Result<String> {
    let canonical = path.canonicalize()?;
    let len = std::fs::metadata(&canonical)?.len();
    Ok(format!("{}#{len}", canonical.display()))
}

/// Opens a file for reading, decompressing it when it starts with a zstd frame.
pub(crate) fn open_stream(
    path: &Path,
    progress: Arc<ReplayProgress>,
) -> io::Result<Box<dyn Read + Send>> {
    decode_stream(File::open(path)?, progress)
}

/// `input`, decompressed when it starts with a zstd frame.
fn decode_stream(
    mut input: impl Read + Send + 'static,
    progress: Arc<ReplayProgress>,
) -> io::Result<Box<dyn Read + Send>> {
    let mut magic = [0u8; 4];
    let n = read_full(&mut input, &mut magic)?;
    let head = io::Cursor::new(magic.get(..n).unwrap_or_default().to_vec());
    let counted = CountingReader {
        inner: head.chain(input),
        progress,
    };
    // Compression is recognized by the zstd frame magic, not by the file name.
    if n == 4 && magic == [0x28, 0xb5, 0x2f, 0xfd] {
        let decoder = zstd::stream::read::Decoder::new(counted)?;
        Ok(Box::new(BufReader::with_capacity(1 << 20, decoder)))
    } else {
        Ok(Box::new(BufReader::with_capacity(1 << 20, counted)))
    }
}

/// Reads `stream` from `skip` into chunks of whole lines, until the end or the receiver leaves.
fn read_chunks(mut stream: Box<dyn Read + Send>, skip: u64, tx: SyncSender<io::Result<Chunk>>) {
    if let Err(err) = io::copy(&mut (&mut stream).take(skip), &mut io::sink()) {
        let _ = tx.send(Err(err));
        return;
    }
    if let Err(err) = send_chunks(&mut *stream, skip, &tx) {
        let _ = tx.send(Err(err));
    }
}

/// The loop of [`read_chunks`]; stops quietly when the receiver leaves.
fn send_chunks(
    stream: &mut dyn Read,
    mut offset: u64,
    tx: &SyncSender<io::Result<Chunk>>,
) -> io::Result<()> {
    let mut carry: Vec<u8> = Vec::new();
    loop {
        let mut buf = std::mem::take(&mut carry);
        let start = buf.len();
        buf.resize(start + CHUNK_BYTES, 0);
        let n = read_full(stream, buf.get_mut(start..).unwrap_or_default())?;
        buf.truncate(start + n);
        let at_end = n == 0;
        // Everything up to the last newline is whole lines; the rest waits for more bytes,
        // except at the end of the file, where a last line without a newline still counts.
        // The carried bytes are bounded (below), so searching them again costs little.
        let cut = if at_end {
            buf.len()
        } else {
            buf.iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |idx| idx + 1)
        };
        carry = buf.split_off(cut);
        offset += buf.len() as u64;
        let chunk = Chunk {
            lines: buf,
            end_offset: offset,
            too_long: false,
        };
        if !chunk.lines.is_empty() && tx.send(Ok(chunk)).is_err() {
            return Ok(());
        }
        if at_end {
            return Ok(());
        }
        if carry.len() > LINE_BYTES_MAX {
            // The line is too long to be an event: skip the rest of it without holding it.
            let (skipped, rest) = skip_line(stream)?;
            offset += (carry.len() + skipped) as u64;
            carry = rest;
            let chunk = Chunk {
                lines: Vec::new(),
                end_offset: offset,
                too_long: true,
            };
            if tx.send(Ok(chunk)).is_err() {
                return Ok(());
            }
        }
    }
}

/// Reads up to and including the next newline (or to the end); returns the bytes read up to
/// there and those read after it.
fn skip_line(stream: &mut dyn Read) -> io::Result<(usize, Vec<u8>)> {
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut skipped = 0usize;
    loop {
        let n = read_full(stream, &mut buf)?;
        let read = buf.get(..n).unwrap_or_default();
        if let Some(idx) = read.iter().position(|&b| b == b'\n') {
            return Ok((
                skipped + idx + 1,
                read.get(idx + 1..).unwrap_or_default().to_vec(),
            ));
        }
        skipped += n;
        if n == 0 {
            return Ok((skipped, Vec::new()));
        }
    }
}

fn read_full(stream: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while let Some(rest) = buf.get_mut(filled..).filter(|rest| !rest.is_empty()) {
        match stream.read(rest) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(filled)
}

/// Replays one file into the store, resuming where an earlier run of the same file stopped.
pub fn replay_file<S: Store>(
    store: &S,
    path: &Path,
    options: &ReplayOptions,
    graph: &mut dyn CommitSink,
    progress: Arc<ReplayProgress>,
) -> Result<ReplayReport, IngestError> {
    let file_error = |source| IngestError::File {
        path: path.display().to_string(),
        source,
    };
    let source = source_name(path).map_err(file_error)?;
    let resume = match store.progress(Some(&source))? {
        Some(Progress::File { offset, .. }) if !options.from_start => offset,
        _ => 0,
    };
    if resume > 0 {
        info!(file = %path.display(), offset = resume, "resuming replay");
    }
    let stream = open_stream(path, progress.clone()).map_err(file_error)?;
    let input = Input {
        stream,
        source: &source,
        resume,
    };
    replay_input(store, input, options, graph, &progress).map_err(|err| err.naming(file_error))
}

/// The source name under which a replay of standard input stores its progress.
pub const STDIN_SOURCE: &str = "-";

/// Replays standard input (plain or zstd) into the store: `starling gen --out - | starling
/// replay -` needs no file on disk. A stream cannot be read again, so it never resumes; its
/// progress is stored under [`STDIN_SOURCE`] only to say how far it got.
pub fn replay_stdin<S: Store>(
    store: &S,
    options: &ReplayOptions,
    graph: &mut dyn CommitSink,
    progress: Arc<ReplayProgress>,
) -> Result<ReplayReport, IngestError> {
    let stdin_error = |source| IngestError::File {
        path: "standard input".to_owned(),
        source,
    };
    let stream = decode_stream(io::stdin(), progress.clone()).map_err(stdin_error)?;
    let input = Input {
        stream,
        source: STDIN_SOURCE,
        resume: 0,
    };
    replay_input(store, input, options, graph, &progress).map_err(|err| err.naming(stdin_error))
}

/// What a replay reads: the stream, the name its progress is stored under, and the
/// decompressed bytes an earlier run already applied.
struct Input<'a> {
    stream: Box<dyn Read + Send>,
    source: &'a str,
    resume: u64,
}

/// Reads `input` on a reader thread and applies it on this one, until the end is durable.
fn replay_input<S: Store>(
    store: &S,
    input: Input<'_>,
    options: &ReplayOptions,
    graph: &mut dyn CommitSink,
    progress: &ReplayProgress,
) -> Result<ReplayReport, ChunkError> {
    let Input {
        stream,
        source,
        resume,
    } = input;
    let (tx, rx) = sync_channel(CHUNKS_AHEAD_MAX);
    let reader = thread::Builder::new()
        .name("replay-reader".to_owned())
        .spawn(move || read_chunks(stream, resume, tx))
        .map_err(ChunkError::Io)?;
    let res = apply_chunks(store, source, options, graph, progress, rx);
    // The replay is done when its last batch is durable.
    let res = res.and_then(|events| {
        store.sync().map_err(|err| ChunkError::Ingest(err.into()))?;
        Ok(events)
    });
    // The reader ends on its own once the receiver is gone.
    let _ = reader.join();
    Ok(ReplayReport {
        events: res?,
        resumed_from: resume,
    })
}

enum ChunkError {
    Io(io::Error),
    Ingest(IngestError),
}

impl ChunkError {
    /// The error as ingest reports it, a read error naming the input through `io`.
    fn naming(self, io: impl FnOnce(io::Error) -> IngestError) -> IngestError {
        match self {
            ChunkError::Io(source) => io(source),
            ChunkError::Ingest(err) => err,
        }
    }
}

fn apply_chunks<S: Store>(
    store: &S,
    source: &str,
    options: &ReplayOptions,
    graph: &mut dyn CommitSink,
    progress: &ReplayProgress,
    rx: Receiver<io::Result<Chunk>>,
) -> Result<u64, ChunkError> {
    let mut applier = Applier::new(store, graph, options.limits).map_err(ChunkError::Ingest)?;
    let mut events = 0u64;
    for chunk in rx {
        let chunk = chunk.map_err(ChunkError::Io)?;
        if chunk.too_long {
            applier.drop_event(DropReason::TooLarge);
            events += 1;
            commit(&mut applier, source, chunk.end_offset)?;
            continue;
        }
        let chunk_start = chunk.end_offset - chunk.lines.len() as u64;
        let mut line_start = 0usize;
        // Each line with the offset just after it and its newline, in the whole stream.
        let mut lines = Vec::new();
        for line in chunk.lines.split(|&b| b == b'\n') {
            let line_end = line_start + line.len();
            let after = (chunk_start + line_end as u64 + 1).min(chunk.end_offset);
            line_start = line_end + 1;
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if !line.iter().all(u8::is_ascii_whitespace) {
                lines.push((line, after));
            }
        }
        // In windows that fit the open batch, so what is read ahead is used by that batch.
        let mut rest = &lines[..];
        while !rest.is_empty() {
            let (window, tail) = rest.split_at(applier.room().clamp(1, rest.len()));
            rest = tail;
            applier
                .prefetch(window.iter().map(|&(line, _)| line))
                .map_err(ChunkError::Ingest)?;
            for &(line, after) in window {
                applier.push(line).map_err(ChunkError::Ingest)?;
                events += 1;
                if applier.is_full() {
                    commit(&mut applier, source, after)?;
                    progress.events.store(events, Ordering::Relaxed);
                }
            }
        }
        if applier.pending() > 0 {
            commit(&mut applier, source, chunk.end_offset)?;
        }
        progress.events.store(events, Ordering::Relaxed);
    }
    Ok(events)
}

fn commit<S: Store>(
    applier: &mut Applier<'_, '_, S>,
    source: &str,
    offset: u64,
) -> Result<(), ChunkError> {
    let progress = Progress::File {
        source: source.to_owned(),
        offset,
        cursor: applier.newest_cursor(),
    };
    applier.commit(Some(progress)).map_err(ChunkError::Ingest)?;
    Ok(())
}
