//! The actor table as one file, written at a clean exit and read by the next open instead of
//! the `actors` keyspace row by row, which at millions of actors is most of an open's time.
//!
//! The file names the newest sequence number of the `actors` keyspace when it was written.
//! Every write of an actor row moves that number, so a file written before the last such write
//! (a crash after it, or an older binary that wrote without it) no longer matches, and the open
//! reads the rows as before. The file is checked whole (a CRC-32 at its end) before the table
//! it built is used; a damaged one is logged and left for the rows.
//!
//! Layout: `MAGIC`, the sequence number and the actor count (big-endian `u64`s), then per actor
//! in id order its row as the keyspace holds it (`encode_actor_row`) behind a `u32` length, then
//! the CRC-32 of everything before it.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use starling_core::ActorId;

use crate::actors::{ActorRows, ActorTable};
use crate::codec::{decode_actor_row, encode_actor_row};

const FILE_NAME: &str = "actors.snapshot";
const MAGIC: &[u8; 8] = b"STRLACT1";
/// Bytes of the longest row: a DID of 2048 bytes and a state with a handle of 253.
const ROW_BYTES_MAX: u32 = 4096;
/// Bytes of the shortest row in the file: its length, the DID's length and a state without a
/// handle.
const ROW_BYTES_MIN: u64 = 4 + 2 + 18;

fn path(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

/// Writes `actors` as the table of the `actors` keyspace at sequence number `seqno`,
/// atomically.
pub(super) fn write(dir: &Path, seqno: u64, actors: &ActorTable) -> io::Result<()> {
    let tmp = dir.join(format!("{FILE_NAME}.tmp"));
    let mut out = Crc32Writer {
        inner: BufWriter::new(File::create(&tmp)?),
        crc: crc32fast::Hasher::new(),
    };
    out.write_all(MAGIC)?;
    out.write_all(&seqno.to_be_bytes())?;
    out.write_all(&(actors.len() as u64).to_be_bytes())?;
    for id in 0..actors.len() {
        let id = ActorId(u32::try_from(id).expect("fewer than 2^32 actors"));
        let did = actors.did(id).expect("actor ids are dense");
        let state = actors.state(id).expect("actor ids are dense");
        let row = encode_actor_row(&did, &state);
        out.write_all(&(row.len() as u32).to_be_bytes())?;
        out.write_all(&row)?;
    }
    let crc = out.crc.finalize();
    let mut file = out
        .inner
        .into_inner()
        .map_err(io::IntoInnerError::into_error)?;
    file.write_all(&crc.to_be_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path(dir))?;
    File::open(dir)?.sync_all()
}

/// An actor table as the file holds it.
pub(super) struct Snapshot {
    /// The sequence number of the `actors` keyspace the file was written at: the table is the
    /// keyspace's only while that number stays the same.
    pub(super) seqno: u64,
    pub(super) table: ActorTable,
    /// How long reading the file took.
    pub(super) read_in: Duration,
}

/// The actor table of the file in `dir`; `None` when there is no such file, or it is damaged
/// (logged). Needs no engine, so that it can be read while the engine opens: the caller then
/// checks the sequence number it was written at.
pub(super) fn read(dir: &Path) -> Option<Snapshot> {
    let started = Instant::now();
    let file = match File::open(path(dir)) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return None,
        Err(err) => return damaged(dir, &err.to_string()),
    };
    match read_table(file, started) {
        Ok(snapshot) => snapshot,
        Err(err) => damaged(dir, &err),
    }
}

/// The table and the sequence number it was written at, `None` for a file of another format,
/// or what is wrong.
fn read_table(file: File, started: Instant) -> Result<Option<Snapshot>, String> {
    let len = file.metadata().map_err(|err| err.to_string())?.len();
    let checked_len = len
        .checked_sub(4)
        .ok_or_else(|| format!("a file of {len} bytes"))?;
    // Checksummed a buffer at a time as it is read, not a row at a time: the checksum of small
    // pieces was a tenth of the load.
    let mut input = BufReader::with_capacity(
        1 << 20,
        Crc32Reader {
            inner: file.take(checked_len),
            crc: crc32fast::Hasher::new(),
        },
    );
    let [mut magic, mut written_at, mut n_actors] = [[0; 8]; 3];
    for field in [&mut magic, &mut written_at, &mut n_actors] {
        input.read_exact(field).map_err(|err| err.to_string())?;
    }
    let [seqno, n_actors] = [written_at, n_actors].map(u64::from_be_bytes);
    if magic != *MAGIC {
        return Ok(None);
    }
    // The count is checked against the file's length before it sizes anything: a damaged one
    // must not ask for more memory than the machine has.
    let n_actors = u32::try_from(n_actors)
        .ok()
        .filter(|&n| u64::from(n) <= checked_len / ROW_BYTES_MIN)
        .ok_or_else(|| format!("{n_actors} actors in a file of {len} bytes"))?;
    let mut rows = ActorRows::with_capacity(n_actors as usize);
    let mut row = Vec::new();
    for id in 0..n_actors {
        let mut len = [0; 4];
        input.read_exact(&mut len).map_err(|err| err.to_string())?;
        let len = u32::from_be_bytes(len);
        if len > ROW_BYTES_MAX {
            return Err(format!("a row of {len} bytes"));
        }
        row.resize(len as usize, 0);
        input.read_exact(&mut row).map_err(|err| err.to_string())?;
        let (did, state) = decode_actor_row(&row).map_err(|err| err.to_string())?;
        rows.push(ActorId(id), did, state)
            .map_err(|err| err.to_string())?;
    }
    if !input.fill_buf().map_err(|err| err.to_string())?.is_empty() {
        return Err("bytes after the last row".to_owned());
    }
    let Crc32Reader { inner, crc } = input.into_inner();
    let mut stored = [0; 4];
    inner
        .into_inner()
        .read_exact(&mut stored)
        .map_err(|err| err.to_string())?;
    if u32::from_be_bytes(stored) != crc.finalize() {
        return Err("checksum mismatch".to_owned());
    }
    let table = rows.into_table();
    Ok(Some(Snapshot {
        seqno,
        table,
        read_in: started.elapsed(),
    }))
}

fn damaged(dir: &Path, err: &str) -> Option<Snapshot> {
    tracing::warn!(path = %path(dir).display(), error = err, "actor snapshot unusable; reading the actor rows");
    None
}

struct Crc32Writer<W> {
    inner: W,
    crc: crc32fast::Hasher,
}

impl<W: Write> Write for Crc32Writer<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(buf.get(..n).unwrap_or_default());
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

struct Crc32Reader<R> {
    inner: R,
    crc: crc32fast::Hasher,
}

impl<R: Read> Read for Crc32Reader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.crc.update(buf.get(..n).unwrap_or_default());
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedded::EmbeddedStore;
    use crate::locks::read as read_lock;
    use crate::{Batch, Store};

    /// The table of the file in `dir` if it was written at `seqno`.
    fn read_at(dir: &Path, seqno: u64) -> Option<ActorTable> {
        read(dir)
            .filter(|snapshot| snapshot.seqno == seqno)
            .map(|snapshot| snapshot.table)
    }

    /// Each actor's DID and state, in id order.
    fn rows(table: &ActorTable) -> Vec<Vec<u8>> {
        (0..table.len() as u32)
            .map(|id| {
                let id = ActorId(id);
                encode_actor_row(&table.did(id).unwrap(), &table.state(id).unwrap())
            })
            .collect()
    }

    fn identities(store: &EmbeddedStore, dids: std::ops::Range<u32>) {
        let mut batch = store.batch();
        for n in dids {
            let line = format!(
                r#"{{"did":"did:plc:a{n}","time_us":{n},"kind":"identity","identity":{{"did":"did:plc:a{n}","seq":{n},"handle":"h{n}.example.com","time":"2024-09-01T00:00:00.000Z"}}}}"#
            );
            batch
                .apply(&starling_core::jetstream::decode(line.as_bytes()).unwrap())
                .unwrap();
        }
        batch.commit().unwrap();
    }

    #[test]
    fn a_clean_exit_leaves_the_table_for_the_next_open_and_a_write_voids_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        identities(&store, 0..50);
        store.flush_to_tables().unwrap();
        let written = rows(&read_lock(&store.actors));
        drop(store);

        let store = EmbeddedStore::open(dir.path()).unwrap();
        assert_eq!(rows(&read_lock(&store.actors)), written);
        let snapshot = read_at(dir.path(), store.actor_rows_seqno()).expect("the snapshot matches");
        assert_eq!(rows(&snapshot), written);
        assert_eq!(
            read_lock(&store.actors).by_handle("h7.example.com"),
            Some(ActorId(7))
        );
        identities(&store, 50..60);
        store.wait_in_flight().unwrap();
        assert!(read_at(dir.path(), store.actor_rows_seqno()).is_none());
        // Gone without a clean exit: the next open finds the file of 50 actors beside rows of
        // 60, and takes the rows.
        let expected = rows(&read_lock(&store.actors));
        assert_eq!(expected.len(), 60);
        drop(store);
        assert_eq!(rows(&read(dir.path()).unwrap().table), written);
        let store = EmbeddedStore::open(dir.path()).unwrap();
        assert_eq!(rows(&read_lock(&store.actors)), expected);
    }

    #[test]
    fn a_damaged_snapshot_is_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let mut table = ActorTable::default();
        for n in 0..20 {
            table.intern(&format!("did:plc:b{n}"));
        }
        write(dir.path(), 9, &table).unwrap();
        assert_eq!(rows(&read_at(dir.path(), 9).unwrap()), rows(&table));
        assert!(read_at(dir.path(), 10).is_none());
        let bytes = std::fs::read(path(dir.path())).unwrap();
        let mut flipped = bytes.clone();
        flipped[100] ^= 1;
        // An actor count far past what the file holds, its checksum not yet read.
        let mut overcounted = bytes.clone();
        overcounted[16..24].copy_from_slice(&u64::from(u32::MAX).to_be_bytes());
        for damaged in [flipped, bytes[..bytes.len() - 3].to_vec(), overcounted] {
            std::fs::write(path(dir.path()), damaged).unwrap();
            assert!(read_at(dir.path(), 9).is_none());
        }
    }
}
