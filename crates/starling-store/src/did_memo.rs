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

/// The DIDs of the last [`DIDS_KEPT`] actors looked up through it, for one page's work. A
/// DID looked up anew is spelled into the buffer of the one it replaces: no allocation once
/// every slot is taken.
#[derive(Debug, Default)]
pub struct DidMemo {
    /// Each slot's actor (`None` once a lookup into it failed) and DID.
    kept: Vec<(Option<ActorId>, String)>,
    /// The slot the next new DID replaces once every slot is taken.
    next: usize,
}

impl DidMemo {
    /// The DID of `actor`, from memory when it was one of the last looked up; `None` for an
    /// id `store` does not know.
    pub fn did<S: Store + ?Sized>(&mut self, store: &S, actor: ActorId) -> Option<&str> {
        self.did_with(actor, |actor, out| store.push_did(actor, out))
    }

    /// [`DidMemo::did`], with `lookup` appending the store's answer (`false` for none).
    fn did_with(
        &mut self,
        actor: ActorId,
        lookup: impl FnOnce(ActorId, &mut String) -> bool,
    ) -> Option<&str> {
        let slot = match self.kept.iter().position(|(id, _)| *id == Some(actor)) {
            Some(slot) => slot,
            None => self.fill(actor, lookup)?,
        };
        self.kept.get(slot).map(|(_, did)| did.as_str())
    }

    /// Looks `actor` up into a free slot or the oldest one; returns the slot, `None` when the
    /// lookup failed (the slot is then empty).
    fn fill(
        &mut self,
        actor: ActorId,
        lookup: impl FnOnce(ActorId, &mut String) -> bool,
    ) -> Option<usize> {
        let slot = if self.kept.len() < DIDS_KEPT {
            self.kept.push((None, String::new()));
            self.kept.len() - 1
        } else {
            let slot = self.next;
            self.next = (slot + 1) % DIDS_KEPT;
            slot
        };
        let (id, did) = self.kept.get_mut(slot)?;
        did.clear();
        let found = lookup(actor, did);
        *id = found.then_some(actor);
        found.then_some(slot)
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
                let got = memo.did_with(actor, |actor, out| {
                    lookups += 1;
                    truth(actor).map(|did| out.push_str(&did)).is_some()
                });
                assert_eq!(got.map(str::to_owned), truth(actor), "{actor:?}");
                // Asked again at once, a known id is answered from memory.
                if got.is_some() && before < lookups {
                    let again = memo.did_with(actor, |_, _| panic!("{actor:?} looked up again"));
                    assert_eq!(again.map(str::to_owned), truth(actor));
                }
            }
        }
        assert!(lookups < 20_000, "{lookups} lookups for 20,000 asks");
    }
}
