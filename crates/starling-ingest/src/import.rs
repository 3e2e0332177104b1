//! Bulk import of a follow adjacency list: one `actor_did,subject_did` per line (GraphD's
//! format), plain or zstd-compressed.
//!
//! Lines are read in chunks; each chunk's DIDs are interned and its pairs stored durably as
//! imported follows, then added to the graph. Bad lines (not two DIDs, a self-follow) are
//! counted and reported with their line numbers, never fatal.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use rustc_hash::FxHashMap;
use starling_core::ActorId;
use starling_core::syntax::is_valid_did;
use starling_graph::{EdgeChange, Graph, GraphBuilder};
use starling_store::Store;
use tracing::debug;

use crate::IngestError;
use crate::replay::{ReplayProgress, open_stream};

/// Lines per import chunk.
const IMPORT_CHUNK_LINES: usize = 1 << 20;

/// What an import did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Follows imported.
    pub follows: u64,
    /// Lines that were not `actor_did,subject_did` with two valid, different DIDs.
    pub bad_lines: u64,
    /// The first few bad lines' numbers, for the report.
    pub first_bad_lines: Vec<u64>,
}

/// How many bad line numbers the report keeps.
const BAD_LINES_SHOWN_MAX: usize = 10;

/// Imports the follows in `path` into the store and into `graph` (built anew when `graph` is
/// `None`, which is much faster than adding edges to a live graph). Returns the graph.
pub fn import_follows<S: Store>(
    store: &S,
    path: &Path,
    graph: Option<Graph>,
    progress: Arc<ReplayProgress>,
) -> Result<(Graph, ImportReport), IngestError> {
    let file_error = |source| IngestError::File {
        path: path.display().to_string(),
        source,
    };
    let stream = open_stream(path, progress.clone()).map_err(file_error)?;
    let mut lines = BufReader::with_capacity(1 << 20, stream);
    let mut report = ImportReport::default();
    let mut builder = graph.is_none().then(GraphBuilder::new);
    let mut line = String::new();
    let mut line_no = 0u64;
    let mut chunk: Vec<(String, String)> = Vec::with_capacity(IMPORT_CHUNK_LINES);
    loop {
        line.clear();
        let n = lines.read_line(&mut line).map_err(file_error)?;
        if n > 0 {
            line_no += 1;
            match parse_line(&line) {
                Some(Some(pair)) => chunk.push(pair),
                Some(None) => {}
                None => {
                    report.bad_lines += 1;
                    if report.first_bad_lines.len() < BAD_LINES_SHOWN_MAX {
                        report.first_bad_lines.push(line_no);
                    }
                    debug!(line_no, "skipping a bad adjacency line");
                }
            }
        }
        if chunk.len() >= IMPORT_CHUNK_LINES || (n == 0 && !chunk.is_empty()) {
            let pairs = intern_chunk(store, &chunk)?;
            store.import_follows(&pairs)?;
            match (&mut builder, &graph) {
                (Some(builder), _) => {
                    for &(actor, subject) in &pairs {
                        builder.follow(actor, subject);
                    }
                }
                (None, Some(graph)) => {
                    let changes: Vec<EdgeChange> = pairs
                        .iter()
                        .map(|&(actor, subject)| EdgeChange::Follow { actor, subject })
                        .collect();
                    graph.apply(&changes);
                }
                (None, None) => {}
            }
            report.follows += pairs.len() as u64;
            progress.events.store(line_no, Ordering::Relaxed);
            chunk.clear();
        }
        if n == 0 {
            break;
        }
    }
    let graph = match (builder, graph) {
        (Some(builder), _) => builder.build(),
        (None, Some(graph)) => graph,
        (None, None) => Graph::new(),
    };
    Ok((graph, report))
}

/// `Some(Some(pair))` for a follow, `Some(None)` for a blank or `#` comment line, `None` for a
/// bad line.
fn parse_line(line: &str) -> Option<Option<(String, String)>> {
    let line = line.trim_end_matches(['\n', '\r']);
    if line.trim().is_empty() || line.starts_with('#') {
        return Some(None);
    }
    let (actor, subject) = line.split_once(',')?;
    let (actor, subject) = (actor.trim(), subject.trim());
    let valid = is_valid_did(actor) && is_valid_did(subject) && actor != subject;
    valid.then(|| Some((actor.to_owned(), subject.to_owned())))
}

fn intern_chunk<S: Store>(
    store: &S,
    chunk: &[(String, String)],
) -> Result<Vec<(ActorId, ActorId)>, IngestError> {
    let mut unique: FxHashMap<&str, usize> = FxHashMap::default();
    let mut dids: Vec<&str> = Vec::new();
    for (actor, subject) in chunk {
        for did in [actor.as_str(), subject.as_str()] {
            unique.entry(did).or_insert_with(|| {
                dids.push(did);
                dids.len() - 1
            });
        }
    }
    let ids = store.intern_actors(&dids)?;
    let id_of = |did: &str| unique.get(did).and_then(|&idx| ids.get(idx)).copied();
    Ok(chunk
        .iter()
        .filter_map(|(actor, subject)| Some((id_of(actor)?, id_of(subject)?)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks the line parser on good, blank, comment and bad lines, each against the answer
    // written out by hand.
    #[test]
    fn lines_parse_or_are_counted_bad() {
        let good = parse_line("did:plc:a,did:plc:b\r\n");
        assert_eq!(
            good,
            Some(Some(("did:plc:a".to_owned(), "did:plc:b".to_owned())))
        );
        assert_eq!(parse_line("\n"), Some(None));
        assert_eq!(parse_line("# header\n"), Some(None));
        assert_eq!(parse_line("did:plc:a\n"), None);
        assert_eq!(parse_line("did:plc:a,nope\n"), None);
        assert_eq!(parse_line("did:plc:a,did:plc:a\n"), None);
    }
}
