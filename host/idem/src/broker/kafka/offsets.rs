//! Which offset each partition may commit: Kafka keeps one position per
//! partition, not an acknowledgement per message, so a message is settled
//! in the broker only once every message before it in its partition is.
//! The position committed is the lowest offset given out and not settled
//! (a message put off holds it back), or past the last given out when all
//! are: never ahead of what the store has recorded.
//!
//! Each assignment of a partition to this consumer is numbered (its
//! *serial*); a delivery carries the serial it was given out under, and
//! settling it after the partition was revoked (a rebalance moved it to
//! another consumer, which reads from the committed position) changes
//! nothing: its offset is the new owner's to commit.

use std::collections::{BTreeSet, HashMap};

/// A topic's partition.
pub(super) type Partition = (String, i32);

/// What this consumer holds of one partition, for one assignment.
#[derive(Debug)]
struct Held {
    serial: u64,
    /// Given out and not settled.
    outstanding: BTreeSet<i64>,
    /// One past the highest offset given out, once one has been.
    next: Option<i64>,
    /// The position last sent to be committed.
    committed: Option<i64>,
}

impl Held {
    /// Where the committed position may go: the lowest offset not settled,
    /// or past the last given out.
    fn position(&self) -> Option<i64> {
        self.outstanding.first().copied().or(self.next)
    }
}

/// The partitions assigned to this consumer, and their positions.
#[derive(Debug, Default)]
pub(super) struct Offsets {
    held: HashMap<Partition, Held>,
    serials: u64,
}

impl Offsets {
    /// `partition` is assigned to this consumer: a new serial, nothing
    /// given out yet.
    pub(super) fn assign(&mut self, partition: Partition) {
        self.serials += 1;
        self.held.insert(
            partition,
            Held {
                serial: self.serials,
                outstanding: BTreeSet::new(),
                next: None,
                committed: None,
            },
        );
    }

    /// `partition` is revoked: what its settled messages let it commit
    /// (to be committed now, before it goes, even if a commit of it was
    /// sent already: that one may have failed), and nothing more of it is
    /// settled here.
    pub(super) fn revoke(&mut self, partition: &Partition) -> Option<i64> {
        self.held.remove(partition)?.position()
    }

    /// The serial `partition` is held under, if it is assigned here.
    pub(super) fn serial(&self, partition: &Partition) -> Option<u64> {
        self.held.get(partition).map(|held| held.serial)
    }

    /// The message at `offset` is given out under `serial`; false when the
    /// partition is no longer held under it (the message is dropped: its
    /// new owner reads it again from the committed position).
    pub(super) fn give_out(&mut self, partition: &Partition, serial: u64, offset: i64) -> bool {
        match self.held.get_mut(partition) {
            Some(held) if held.serial == serial => {
                held.outstanding.insert(offset);
                held.next = Some(held.next.map_or(offset + 1, |n| n.max(offset + 1)));
                true
            }
            _ => false,
        }
    }

    /// Whether `partition` is still held under `serial`.
    pub(super) fn holds(&self, partition: &Partition, serial: u64) -> bool {
        self.serial(partition) == Some(serial)
    }

    /// The message at `offset` is settled (its end recorded, or refused for
    /// good); false when the partition is no longer held under `serial`.
    pub(super) fn settle(&mut self, partition: &Partition, serial: u64, offset: i64) -> bool {
        match self.held.get_mut(partition) {
            Some(held) if held.serial == serial => {
                held.outstanding.remove(&offset);
                true
            }
            _ => false,
        }
    }

    /// The positions to commit: each held partition whose position moved
    /// past what was last committed.
    pub(super) fn to_commit(&self) -> Vec<(Partition, i64)> {
        self.held
            .iter()
            .filter_map(|(partition, held)| {
                let position = held.position()?;
                (Some(position) > held.committed).then(|| (partition.clone(), position))
            })
            .collect()
    }

    /// A commit of `position` for `partition` was sent (librdkafka tells an
    /// application nothing of an asynchronous commit's answer: one that
    /// fails is sent again at the next progress, or when the partition is
    /// revoked or the consumer closes).
    pub(super) fn committed(&mut self, partition: &Partition, position: i64) {
        if let Some(held) = self.held.get_mut(partition) {
            held.committed = Some(held.committed.map_or(position, |c| c.max(position)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(n: i32) -> Partition {
        ("orders".to_string(), n)
    }

    #[test]
    fn a_message_put_off_holds_its_partition_back() {
        let mut offsets = Offsets::default();
        offsets.assign(p(0));
        let serial = offsets.serial(&p(0)).unwrap();
        for offset in 10..14 {
            assert!(offsets.give_out(&p(0), serial, offset));
        }
        offsets.settle(&p(0), serial, 10);
        offsets.settle(&p(0), serial, 12);
        offsets.settle(&p(0), serial, 13);
        // 11 is still out: the position is 11, not 14.
        assert_eq!(offsets.to_commit(), vec![(p(0), 11)]);
        offsets.committed(&p(0), 11);
        assert!(offsets.to_commit().is_empty());
        offsets.settle(&p(0), serial, 11);
        assert_eq!(offsets.to_commit(), vec![(p(0), 14)]);
    }

    #[test]
    fn a_revoked_partition_settles_nothing_more() {
        let mut offsets = Offsets::default();
        offsets.assign(p(1));
        let old = offsets.serial(&p(1)).unwrap();
        offsets.give_out(&p(1), old, 5);
        offsets.give_out(&p(1), old, 6);
        offsets.settle(&p(1), old, 5);
        assert_eq!(offsets.revoke(&p(1)), Some(6));
        // Assigned again: the old delivery's settle is not this one's.
        offsets.assign(p(1));
        let new = offsets.serial(&p(1)).unwrap();
        assert_ne!(old, new);
        assert!(!offsets.settle(&p(1), old, 6));
        assert!(!offsets.give_out(&p(1), old, 7));
        assert!(offsets.to_commit().is_empty(), "nothing given out anew");
        offsets.give_out(&p(1), new, 6);
        assert_eq!(offsets.to_commit(), vec![(p(1), 6)]);
    }

    proptest! {
        /// Whatever order messages are settled in, the position committed
        /// never passes an offset given out and not settled.
        #[test]
        fn the_position_is_never_ahead_of_what_is_settled(
            count in 1usize..40,
            order in proptest::collection::vec(any::<prop::sample::Index>(), 0..40),
        ) {
            let mut offsets = Offsets::default();
            offsets.assign(p(0));
            let serial = offsets.serial(&p(0)).unwrap();
            let mut out: Vec<i64> = (100..100 + count as i64).collect();
            for &offset in &out {
                offsets.give_out(&p(0), serial, offset);
            }
            for index in order {
                if out.is_empty() {
                    break;
                }
                let offset = out.remove(index.index(out.len()));
                offsets.settle(&p(0), serial, offset);
                let position = offsets.to_commit().first().map(|(_, at)| *at);
                let lowest_out = out.iter().min().copied();
                match (position, lowest_out) {
                    (Some(position), Some(lowest)) => prop_assert!(position <= lowest),
                    (Some(position), None) => prop_assert_eq!(position, 100 + count as i64),
                    (None, _) => prop_assert_eq!(lowest_out, Some(100)),
                }
            }
        }
    }
}
