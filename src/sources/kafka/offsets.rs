//! Which offsets the `kafka` source may store: a partition's offset moves past a batch only once
//! every sink committed that batch and every batch before it on the partition (at least once,
//! end to end). A batch a sink reports as not delivered rewinds its partitions to its first
//! offset; the batches after it on those partitions are forgotten and read again.
//!
//! ```text
//! partition p: [100..199 done] [200..299 in flight] [300..349 done]
//!              store 200 ─┘  (300..349 waits for 200..299)
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use loghaul_core::BatchStatus;

/// A topic's partition.
pub type Partition = (Arc<str>, i32);

/// The batches in flight and what they cover.
#[derive(Debug, Default)]
pub struct Offsets {
    /// Per partition, the batches in flight by first offset: their last offset, and whether
    /// they are done.
    partitions: HashMap<Partition, BTreeMap<i64, (i64, bool)>>,
    /// What each batch covers: per partition, its first offset.
    batches: HashMap<u64, Vec<(Partition, i64)>>,
    next_batch: u64,
}

impl Offsets {
    /// Registers a batch covering, per partition, `first..=last`; returns its id.
    pub fn add(&mut self, covers: impl IntoIterator<Item = (Partition, i64, i64)>) -> u64 {
        let id = self.next_batch;
        self.next_batch += 1;
        let mut firsts = Vec::new();
        for (partition, first, last) in covers {
            self.partitions
                .entry(partition.clone())
                .or_default()
                .insert(first, (last, false));
            firsts.push((partition, first));
        }
        self.batches.insert(id, firsts);
        id
    }

    /// Records a batch's fate. Returns the partitions to read again from the given offset
    /// (when a sink did not deliver it); forgets the batches after it on those partitions.
    pub fn settle(&mut self, id: u64, status: BatchStatus) -> Vec<(Partition, i64)> {
        let Some(covers) = self.batches.remove(&id) else {
            // Forgotten: a rewind or a revoked partition already decided about it.
            return Vec::new();
        };
        match status {
            // Dead-lettered events are settled too: they are not read again.
            BatchStatus::Delivered | BatchStatus::Rejected => {
                for (partition, first) in covers {
                    if let Some(entry) = self
                        .partitions
                        .get_mut(&partition)
                        .and_then(|p| p.get_mut(&first))
                    {
                        entry.1 = true;
                    }
                }
                Vec::new()
            }
            BatchStatus::Errored => {
                for (partition, first) in &covers {
                    if let Some(p) = self.partitions.get_mut(partition) {
                        let later: Vec<i64> = p.range(*first..).map(|(f, _)| *f).collect();
                        for f in later {
                            p.remove(&f);
                        }
                    }
                }
                // Batches that covered a rewound partition from a later offset are read again
                // there; what they cover elsewhere stays as it is.
                self.batches.retain(|_, firsts| {
                    firsts.retain(|(p, f)| {
                        !covers
                            .iter()
                            .any(|(rewound, from)| rewound == p && f >= from)
                    });
                    !firsts.is_empty()
                });
                covers
            }
        }
    }

    /// The offsets to store now: per partition whose front batches are done, the offset after
    /// them. The done front batches are forgotten.
    pub fn committable(&mut self) -> Vec<(Partition, i64)> {
        let mut out = Vec::new();
        for (partition, batches) in &mut self.partitions {
            let mut next = None;
            while let Some((&first, &(last, done))) = batches.iter().next() {
                if !done {
                    break;
                }
                batches.remove(&first);
                next = Some(last + 1);
            }
            if let Some(next) = next {
                out.push((partition.clone(), next));
            }
        }
        self.partitions.retain(|_, b| !b.is_empty());
        out
    }

    /// Whether a batch covering any of `partitions` is still in flight.
    pub fn in_flight(&self, partitions: &[Partition]) -> bool {
        partitions.iter().any(|p| {
            self.partitions
                .get(p)
                .is_some_and(|b| b.values().any(|(_, done)| !done))
        })
    }

    /// Forgets `partitions` (revoked: their next owner reads from the committed offset).
    pub fn forget(&mut self, partitions: &[Partition]) {
        for p in partitions {
            self.partitions.remove(p);
        }
        self.batches.retain(|_, firsts| {
            firsts.retain(|(p, _)| !partitions.contains(p));
            !firsts.is_empty()
        });
    }

    /// Batches in flight.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.batches.len()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn p(n: i32) -> Partition {
        (Arc::from("logs"), n)
    }

    #[test]
    fn a_partition_moves_only_past_its_done_front() {
        let mut o = Offsets::default();
        let a = o.add([(p(0), 100, 199), (p(1), 10, 19)]);
        let b = o.add([(p(0), 200, 299)]);
        let c = o.add([(p(0), 300, 349)]);
        assert!(o.settle(c, BatchStatus::Delivered).is_empty());
        assert!(o.committable().is_empty(), "200..299 is in flight");
        o.settle(a, BatchStatus::Rejected);
        let mut got = o.committable();
        got.sort();
        assert_eq!(got, [(p(0), 200), (p(1), 20)]);
        assert!(o.in_flight(&[p(0)]));
        o.settle(b, BatchStatus::Delivered);
        assert_eq!(o.committable(), [(p(0), 350)]);
        assert!(!o.in_flight(&[p(0), p(1)]));
        assert_eq!(o.len(), 0);
    }

    #[test]
    fn an_errored_batch_rewinds_its_partitions_and_forgets_what_follows() {
        let mut o = Offsets::default();
        let a = o.add([(p(0), 0, 9)]);
        let b = o.add([(p(0), 10, 19), (p(1), 0, 4)]);
        let c = o.add([(p(0), 20, 29), (p(1), 5, 9)]);
        assert_eq!(o.settle(b, BatchStatus::Errored), [(p(0), 10), (p(1), 0)]);
        // c is read again on both partitions: its verdict no longer counts.
        assert!(o.settle(c, BatchStatus::Delivered).is_empty());
        o.settle(a, BatchStatus::Delivered);
        assert_eq!(o.committable(), [(p(0), 10)]);
        assert_eq!(o.len(), 0);
    }

    #[test]
    fn revoked_partitions_are_forgotten() {
        let mut o = Offsets::default();
        let a = o.add([(p(0), 0, 9), (p(1), 0, 9)]);
        o.forget(&[p(0)]);
        o.settle(a, BatchStatus::Delivered);
        assert_eq!(o.committable(), [(p(1), 10)]);
    }
}
