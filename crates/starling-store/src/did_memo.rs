//! The DIDs of the last few actors a page named.
//!
//! Why: a page of an author feed, an actor's likes or a notification list names the same few
//! actors on entry after entry (its owner on every one), and each [`Store::did`] spells the
//! DID out of the actor table again: a few cache misses and a `did:plc:` unpacked. Profiles of
//! those RPCs put 5-7% of the server's CPU there.

use starling_core::ActorId;

use crate::Store;

/// DIDs kept: a repost in an author feed names its author and the reposted post's, and a
/// notification its author and the recipient.
const DIDS_KEPT: usize = 4;

/// The DIDs of the last [`DIDS_KEPT`] actors looked up through it, for one page's work.
#[derive(Debug, Default)]
pub struct DidMemo {
    kept: Vec<(ActorId, String)>,
    /// The slot the next new DID replaces once every slot is taken.
    next: usize,
}

impl DidMemo {
    /// The DID of `actor`, from memory when it was one of the last looked up; `None` for an
    /// id `store` does not know.
    pub fn did<S: Store + ?Sized>(&mut self, store: &S, actor: ActorId) -> Option<&str> {
        self.did_with(actor, |actor| store.did(actor))
    }

    /// [`DidMemo::did`], with `lookup` for the store's answer.
    fn did_with(
        &mut self,
        actor: ActorId,
        lookup: impl FnOnce(ActorId) -> Option<String>,
    ) -> Option<&str> {
        let slot = match self.kept.iter().position(|(id, _)| *id == actor) {
            Some(slot) => slot,
            None => self.keep(actor, lookup(actor)?),
        };
        self.kept.get(slot).map(|(_, did)| did.as_str())
    }

    /// Keeps `did` as `actor`'s, in a free slot or in place of the oldest; returns its slot.
    fn keep(&mut self, actor: ActorId, did: String) -> usize {
        if self.kept.len() < DIDS_KEPT {
            self.kept.push((actor, did));
            return self.kept.len() - 1;
        }
        let slot = self.next;
        self.next = (slot + 1) % DIDS_KEPT;
        if let Some(kept) = self.kept.get_mut(slot) {
            *kept = (actor, did);
        }
        slot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever the order of the ids asked for, each answer is the one the lookup gives, an
    /// unknown id stays unknown, and an id asked for again at once is not looked up again.
    #[test]
    fn answers_match_the_lookup() {
        let truth = |actor: ActorId| (actor.0 % 7 != 3).then(|| format!("did:plc:{}", actor.0));
        let mut memo = DidMemo::default();
        let mut state = 11u64;
        let mut lookups = 0;
        for _ in 0..10_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let actor = ActorId((state % 12) as u32);
            for _ in 0..2 {
                let before = lookups;
                let got = memo.did_with(actor, |actor| {
                    lookups += 1;
                    truth(actor)
                });
                assert_eq!(got.map(str::to_owned), truth(actor), "{actor:?}");
                // Asked again at once, a known id is answered from memory.
                if got.is_some() && before < lookups {
                    let again = memo.did_with(actor, |_| panic!("{actor:?} looked up again"));
                    assert_eq!(again.map(str::to_owned), truth(actor));
                }
            }
        }
        assert!(lookups < 20_000, "{lookups} lookups for 20,000 asks");
    }
}
