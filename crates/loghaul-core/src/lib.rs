//! loghaul's event model: events, batches and the finalizers that carry acknowledgements back to
//! sources. This crate owns no sockets and no files, so everything in it is fast to test.
//!
//! The shape, in one picture:
//!
//! ```text
//!  source ──Arc<EventBatch>──► fan-out ──► sink A (holds a Finalizer clone until committed)
//!                                     └──► sink B (holds a Finalizer clone until committed)
//!  source ◄── BatchStatus ── BatchNotifier (fires when the last Finalizer clone is dropped)
//! ```
//!
//! A batch owns one immutable byte arena (`bytes::Bytes`) and every string field of every event is
//! a [`Span`] into it, so parsing a batch of syslog lines allocates nothing per event.

pub mod batch;
pub mod budget;
pub mod event;
pub mod finalizer;
pub mod names;
pub mod persist;

pub use batch::{BatchCopy, EventBatch, Field, SdElement, SdParam, Value};
pub use budget::{Charge, MemoryBudget};
pub use event::{Event, Flags, OptSpan, Span, Timestamp};
pub use finalizer::{BatchNotifier, BatchStatus, BatchStatusReceiver, Finalizer};
pub use persist::{DecodeError, decode_batch, encode_batch, encoded_len_events, encoded_size};
