//! Phase 4 of the stream: lists (`app.bsky.graph.list`) and their items
//! (`app.bsky.graph.listitem`), after the activity.
//!
//! The phase draws from a random stream of its own (seeded from the seed, like the main one),
//! so adding it left every earlier event of a file byte for byte as it was: a file of the
//! same parameters is the old file with the lists phase appended.
//!
//! Each list is written in one run: its create, then one item per member, then the deletes of
//! some of those items. Sizes follow a Pareto law (`draw::pareto_size`): most lists hold a
//! handful of accounts, one in a thousand over 1,500, capped at [`LIST_MEMBERS_MAX`].

use std::fmt::Write as _;

use rustc_hash::FxHashSet;
use starling_core::jetstream::nsid;
use starling_core::sample::{SplitMix64, datetime, did, tid};

use super::{
    ACTIVITY_ZIPF_OFFSET, CREATED_LAG_MAX_US, Collection, Generator, Op, Phase, Rkey, TICK_MEAN_US,
    WORDS, rkey_clock,
};
use crate::GenParams;
use crate::draw::{pareto_size, shuffle, zipf};

/// One list per this many actors.
pub const ACTORS_PER_LIST: u32 = 10;

/// The most members a list gets; never more than every actor but its owner.
pub const LIST_MEMBERS_MAX: u64 = 5_000;

/// Of every 1,000 items of a list, this many are deleted again (rounded to nearest per list,
/// so lists under 10 members lose none).
const ITEM_DELETES_PER_MILLE: u64 = 50;

/// Of every 10 lists, this many are moderation lists, the others curation lists.
const MODLISTS_PER_TEN: u64 = 2;

/// Mixed into the seed for the phase's own random stream.
const LISTS_SEED_MIX: u64 = 0x4c49_5354_5348_4950;

/// The items of a list with `size` members that are deleted again.
fn item_deletes(size: u64) -> u64 {
    (size * ITEM_DELETES_PER_MILLE + 500) / 1_000
}

/// The state of the lists phase.
pub(super) struct Lists {
    rng: SplitMix64,
    /// Every list's size, drawn up front so that the events planned are known.
    sizes: Vec<u64>,
    next_list_idx: usize,
    current: Option<ListRun>,
}

/// The list being written.
struct ListRun {
    owner: u32,
    /// The `time_us` of its create: its rkey derives from it.
    created_us: u64,
    /// Members in the order they are added.
    members: Vec<u32>,
    next_member_idx: usize,
    /// The create times of items not deleted, for the deletes.
    items: Vec<u64>,
    deletes_left: u64,
}

impl Lists {
    pub(super) fn new(params: &GenParams) -> Lists {
        let mut rng = SplitMix64::new(params.seed ^ LISTS_SEED_MIX);
        let n_lists = params.n_actors / ACTORS_PER_LIST;
        let members_max = LIST_MEMBERS_MAX.min(u64::from(params.n_actors.saturating_sub(1)));
        let sizes = (0..n_lists)
            .map(|_| pareto_size(&mut rng, members_max))
            .collect();
        Lists {
            rng,
            sizes,
            next_list_idx: 0,
            current: None,
        }
    }

    /// List creates, item creates and item deletes.
    pub(super) fn events_planned(&self) -> u64 {
        self.sizes
            .iter()
            .map(|&size| 1 + size + item_deletes(size))
            .sum()
    }
}

impl Generator {
    /// Appends the next event of the lists phase; false (and the phase is done) after the last.
    pub(super) fn list_event(&mut self, out: &mut String) -> bool {
        loop {
            let Some(run) = self.lists.current.as_mut() else {
                let Some(&size) = self.lists.sizes.get(self.lists.next_list_idx) else {
                    self.phase = Phase::Done;
                    return false;
                };
                self.start_list(out, size);
                return true;
            };
            if let Some(&member) = run.members.get(run.next_member_idx) {
                run.next_member_idx += 1;
                let (owner, list_created_us) = (run.owner, run.created_us);
                self.list_item(out, owner, list_created_us, member);
                return true;
            }
            if run.deletes_left > 0 && !run.items.is_empty() {
                run.deletes_left -= 1;
                let idx = self.lists.rng.below(run.items.len() as u64) as usize;
                let created = run.items.swap_remove(idx);
                let owner = run.owner;
                let time_us = self.list_tick();
                self.commit(
                    out,
                    owner,
                    Collection::ListItem,
                    Op::Delete,
                    Rkey::Tid(created),
                    time_us,
                );
                return true;
            }
            self.lists.current = None;
        }
    }

    fn list_tick(&mut self) -> u64 {
        self.time_us += 1 + self.lists.rng.below(2 * TICK_MEAN_US - 1);
        self.time_us
    }

    /// Writes a list's create and makes it the current one.
    fn start_list(&mut self, out: &mut String, size: u64) {
        let list_idx = self.lists.next_list_idx;
        self.lists.next_list_idx += 1;
        let owner = self.list_owner();
        let members = self.list_members(owner, size);
        let time_us = self.list_tick();
        let modlist = self.lists.rng.below(10) < MODLISTS_PER_TEN;
        let (first, second) = (self.list_word(), self.list_word());
        self.record.clear();
        self.record.push_str(r#"{"$type":"app.bsky.graph.list""#);
        self.push_list_created_at(time_us);
        let (description, purpose) = if modlist {
            ("Accounts muted for", "modlist")
        } else {
            ("Accounts posting about", "curatelist")
        };
        let _ = write!(
            self.record,
            r#","description":"{description} {first} and {second}","name":"{first} {second} {list_idx}","purpose":"app.bsky.graph.defs#{purpose}"}}"#
        );
        self.commit(
            out,
            owner,
            Collection::List,
            Op::Create,
            Rkey::Tid(time_us),
            time_us,
        );
        self.lists.current = Some(ListRun {
            owner,
            created_us: time_us,
            deletes_left: item_deletes(members.len() as u64),
            items: Vec::with_capacity(members.len()),
            members,
            next_member_idx: 0,
        });
    }

    fn list_item(&mut self, out: &mut String, owner: u32, list_created_us: u64, member: u32) {
        let time_us = self.list_tick();
        self.record.clear();
        self.record
            .push_str(r#"{"$type":"app.bsky.graph.listitem""#);
        self.push_list_created_at(time_us);
        let _ = write!(
            self.record,
            r#","list":"at://{}/{}/{}","subject":"{}"}}"#,
            did(owner),
            nsid::LIST,
            tid(list_created_us, rkey_clock(owner)),
            did(member)
        );
        self.commit(
            out,
            owner,
            Collection::ListItem,
            Op::Create,
            Rkey::Tid(time_us),
            time_us,
        );
        if let Some(run) = self.lists.current.as_mut() {
            run.items.push(time_us);
        }
    }

    /// A list's owner, drawn by activity as in `active_actor`, from the phase's own stream.
    fn list_owner(&mut self) -> u32 {
        let n = u64::from(self.params.n_actors);
        let rng = &mut self.lists.rng;
        if rng.below(4) == 0 {
            return rng.below(n) as u32;
        }
        let rank = zipf(rng, n, ACTIVITY_ZIPF_OFFSET);
        ((u128::from(rank) * u128::from(self.rank_mult) + u128::from(self.rank_add))
            % u128::from(n)) as u32
    }

    /// `size` distinct actors other than `owner`, uniformly (Floyd's sampling), in random order.
    fn list_members(&mut self, owner: u32, size: u64) -> Vec<u32> {
        let n_others = u64::from(self.params.n_actors) - 1;
        let size = size.min(n_others);
        let rng = &mut self.lists.rng;
        let mut chosen = FxHashSet::default();
        let mut members = Vec::with_capacity(size as usize);
        for top in n_others - size..n_others {
            let pick = rng.below(top + 1);
            let pick = if chosen.insert(pick) {
                pick
            } else {
                chosen.insert(top);
                top
            };
            // Actors other than the owner: skip over it.
            let actor = pick as u32;
            members.push(if actor >= owner { actor + 1 } else { actor });
        }
        shuffle(&mut members, rng);
        members
    }

    fn list_word(&mut self) -> &'static str {
        WORDS
            .get(self.lists.rng.below(WORDS.len() as u64) as usize)
            .copied()
            .unwrap_or("the")
    }

    /// A record's `createdAt`, a little before its event, as `push_created_at` but from the
    /// phase's own stream.
    fn push_list_created_at(&mut self, time_us: u64) {
        let lag = self.lists.rng.below(CREATED_LAG_MAX_US);
        self.record.push_str(r#","createdAt":""#);
        self.record.push_str(&datetime(time_us - lag));
        self.record.push('"');
    }
}
