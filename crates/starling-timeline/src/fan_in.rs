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
    if limit == 0 || authors.is_empty() {
        return Ok(());
    }
    // Enough per author that, with items spread evenly, one chunk each would do.
    let first_chunk = (2 * limit / authors.len() + 2).min(limit + 1);
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
    let mut taken = 0;
    while taken < limit {
        let Some((_, Reverse(idx))) = heap.pop() else {
            break;
        };
        let Some(stream) = streams.get_mut(idx) else {
            break;
        };
        if let Some(&item) = stream.peek() {
            if keep(&item) {
                out.push(item);
                taken += 1;
            }
            stream.pos += 1;
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
