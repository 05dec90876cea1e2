//! The global memory budget (`limits.memory`): every batch in flight holds a [`Charge`] against
//! it, taken before the batch enters a queue and given back when the last holder drops the
//! batch. A sender that finds the budget spent waits, and so stops reading: the same push back
//! a full queue gives, but across every queue, memory buffer and sink at once.
//!
//! A charge is an estimate: the bytes a batch holds (its arena and tables) plus what sinks'
//! encoders made of it. What a source holds before it sends (a connection's read buffer, the
//! batch it is filling) is outside the budget; the documented margin covers it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

use crate::EventBatch;

/// The shared budget.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: usize,
    used: AtomicUsize,
    freed: Notify,
}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            limit,
            used: AtomicUsize::new(0),
            freed: Notify::new(),
        })
    }

    /// A budget nothing waits on (tests, tools that run one sink).
    pub fn unlimited() -> Arc<MemoryBudget> {
        MemoryBudget::new(usize::MAX)
    }

    /// The limit, in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes charged now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Takes `bytes` if they fit now. A charge larger than the whole budget is granted when
    /// nothing else is charged, so one oversized batch still moves (alone).
    pub fn try_charge(self: &Arc<Self>, bytes: usize) -> Option<Charge> {
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let fits = used == 0 || used.saturating_add(bytes) <= self.limit;
            if !fits {
                return None;
            }
            match self.used.compare_exchange_weak(
                used,
                used + bytes,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    return Some(Charge {
                        budget: self.clone(),
                        bytes: AtomicUsize::new(bytes),
                    });
                }
                Err(now) => used = now,
            }
        }
    }

    /// A charge of nothing, granted at once, to be grown or resized later: what a component
    /// charges for state it keeps between batches (a cache, open groups).
    pub fn hold(self: &Arc<Self>) -> Charge {
        Charge {
            budget: self.clone(),
            bytes: AtomicUsize::new(0),
        }
    }

    /// Takes `bytes`, waiting until they fit.
    pub async fn charge(self: &Arc<Self>, bytes: usize) -> Charge {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before the check, so a release between the check and the wait wakes us.
            freed.as_mut().enable();
            if let Some(charge) = self.try_charge(bytes) {
                return charge;
            }
            freed.await;
        }
    }

    fn release(&self, bytes: usize) {
        if bytes > 0 {
            self.used.fetch_sub(bytes, Ordering::AcqRel);
            self.freed.notify_waiters();
        }
    }
}

/// Bytes held against a [`MemoryBudget`]; given back on drop.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<MemoryBudget>,
    bytes: AtomicUsize,
}

impl Charge {
    /// Adds `bytes` without waiting (what an encoder made of the batch once it was admitted): the
    /// budget may go over for a moment, and the next senders wait for it.
    pub fn grow(&self, bytes: usize) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.budget.used.fetch_add(bytes, Ordering::AcqRel);
    }

    /// Sets the bytes held to `bytes` without waiting (an estimate taken before a body was read,
    /// made exact once it was decoded): less gives the difference back at once.
    pub fn resize(&self, bytes: usize) {
        let old = self.bytes.swap(bytes, Ordering::Relaxed);
        if bytes >= old {
            self.budget.used.fetch_add(bytes - old, Ordering::AcqRel);
        } else {
            self.budget.release(old - bytes);
        }
    }

    /// Takes over what `other` holds, charged to the same budget, without touching the budget:
    /// a step's charge joins the batch it was taken for.
    pub fn absorb(&self, other: Charge) {
        debug_assert!(Arc::ptr_eq(&self.budget, &other.budget));
        let bytes = other.bytes.swap(0, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// A new charge of nothing against the same budget, to be grown: what a sink charges for
    /// what it made of batches it no longer holds (an HTTP request body waiting to be sent).
    pub fn sibling(&self) -> Charge {
        self.budget.hold()
    }

    /// The bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.release(*self.bytes.get_mut());
    }
}

/// What a batch weighs against the budget: its arena and its tables.
pub fn batch_bytes(batch: &EventBatch) -> usize {
    use std::mem::size_of;
    batch.arena.len()
        + batch.events.capacity() * size_of::<crate::Event>()
        + batch.fields.capacity() * size_of::<crate::Field>()
        + batch.sd_elements.capacity() * size_of::<crate::SdElement>()
        + batch.sd_params.capacity() * size_of::<crate::SdParam>()
        + size_of::<EventBatch>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn charges_fit_and_come_back() {
        let budget = MemoryBudget::new(100);
        let a = budget.try_charge(60);
        assert!(a.is_some());
        assert!(budget.try_charge(50).is_none(), "over the limit");
        let b = budget.try_charge(40);
        assert!(b.is_some());
        assert_eq!(budget.used(), 100);
        drop(a);
        assert_eq!(budget.used(), 40);
        if let Some(b) = &b {
            b.grow(30);
        }
        assert_eq!(budget.used(), 70);
        if let Some(b) = &b {
            b.resize(10);
        }
        assert_eq!(budget.used(), 10);
        drop(b);
        assert_eq!(budget.used(), 0);
        // A step's charge joins its batch's: nothing changes in the budget.
        let (batch, step) = (budget.try_charge(10), budget.try_charge(20));
        if let (Some(batch), Some(step)) = (&batch, step) {
            batch.absorb(step);
            assert_eq!((batch.bytes(), budget.used()), (30, 30));
        }
        drop(batch);
        assert_eq!(budget.used(), 0);
        // Alone, an oversized charge moves.
        let big = budget.try_charge(1000);
        assert!(big.is_some());
        assert!(budget.try_charge(1).is_none());
    }

    #[tokio::test]
    async fn a_waiting_charge_is_granted_when_memory_comes_back() {
        let budget = MemoryBudget::new(100);
        let held = budget.charge(90).await;
        let waiter = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.charge(50).await.bytes() })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "must wait while the budget is spent");
        drop(held);
        let granted = tokio::time::timeout(Duration::from_secs(5), waiter).await;
        assert!(matches!(granted, Ok(Ok(50))));
        assert_eq!(budget.used(), 0);
    }
}
