//! Fan-in: the newest items of several author feeds, merged.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use starling_core::ActorId;
use starling_core::feed::{FeedItem, FeedKey};

use crate::{FeedSource, SourceError};

/// One author's feed, read in chunks that double in size.
struct Stream {
    author: ActorId,
    /// Newest first; `pos` is the next to hand out.
    buf: Vec<FeedItem>,
    pos: usize,
    chunk: usize,
    exhausted: bool,
}

impl Stream {
    fn fill(&mut self, source: &dyn FeedSource, below: Option<FeedKey>) -> Result<(), SourceError> {
        let below = self.buf.last().map(|item| item.key).or(below);
        self.buf.clear();
        self.pos = 0;
        let chunk = self.chunk;
        let buf = &mut self.buf;
        source.author_feed(self.author, below, &mut |item| {
            buf.push(item);
            buf.len() < chunk
        })?;
        self.exhausted = self.buf.len() < chunk;
        self.chunk = (chunk * 2).min(4096);
        Ok(())
    }

    fn peek(&self) -> Option<&FeedItem> {
        self.buf.get(self.pos)
    }
}

/// What a visit of [`merge`] wants after an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// The next item, of any author.
    More,
    /// No more items of this item's author: the rest of that feed is not read.
    AuthorDone,
    /// Nothing more.
    Done,
}

/// Visits the items below `below` (or of all time) of the feeds of `authors`, newest first,
/// for as long as `visit` asks. `expected`, how many items the visit will likely want, sizes
/// the first reads of each feed.
pub(crate) fn merge(
    source: &dyn FeedSource,
    authors: &[ActorId],
    below: Option<FeedKey>,
    expected: usize,
    mut visit: impl FnMut(&FeedItem) -> Next,
) -> Result<(), SourceError> {
    if authors.is_empty() {
        return Ok(());
    }
    // Enough per author that, with items spread evenly, one chunk each would do.
    let first_chunk = (2 * expected / authors.len() + 2).min(expected + 1);
    let mut streams = Vec::with_capacity(authors.len());
    let mut heap = BinaryHeap::with_capacity(authors.len());
    for &author in authors {
        let mut stream = Stream {
            author,
            buf: Vec::new(),
            pos: 0,
            chunk: first_chunk,
            exhausted: false,
        };
        stream.fill(source, below)?;
        if let Some(item) = stream.peek() {
            heap.push((item.key, Reverse(streams.len())));
        }
        streams.push(stream);
    }
    while let Some((_, Reverse(idx))) = heap.pop() {
        let Some(stream) = streams.get_mut(idx) else {
            break;
        };
        let Some(&item) = stream.peek() else {
            continue;
        };
        stream.pos += 1;
        match visit(&item) {
            Next::More => {}
            Next::AuthorDone => continue,
            Next::Done => break,
        }
        if stream.peek().is_none() && !stream.exhausted {
            stream.fill(source, below)?;
        }
        if let Some(item) = stream.peek() {
            heap.push((item.key, Reverse(idx)));
        }
    }
    Ok(())
}

/// Appends to `out`, newest first, the `limit` newest items below `below` (or of all time)
/// of the feeds of `authors` that `keep` accepts.
pub(crate) fn fan_in(
    source: &dyn FeedSource,
    authors: &[ActorId],
    below: Option<FeedKey>,
    limit: usize,
    keep: impl Fn(&FeedItem) -> bool,
    out: &mut Vec<FeedItem>,
) -> Result<(), SourceError> {
    if limit == 0 {
        return Ok(());
    }
    let mut n_taken = 0;
    merge(source, authors, below, limit, |item| {
        if keep(item) {
            out.push(*item);
            n_taken += 1;
        }
        if n_taken < limit {
            Next::More
        } else {
            Next::Done
        }
    })
}
