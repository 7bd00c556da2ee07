//! The conformance suite every idem store must pass.
//!
//! Each check is a public async function taking a *factory*: a closure that
//! makes a fresh, empty store from [`StoreOptions`]. The suite passes in a
//! [`ManualClock`]'s store clock and advances it, so no check sleeps or
//! depends on timing. [`run_all`] runs every check; [`model::check`] runs
//! the model-based property test.
//!
//! A check panics (with the store's description) when the store misbehaves.
//!
//! ```no_run
//! use idem_store_conformance as conformance;
//! # async fn demo() {
//! conformance::run_all(&conformance::memory_factory()).await;
//! conformance::run_all(&conformance::sqlite_factory(Default::default())).await;
//! # }
//! // The model check runs its own runtime: call it outside one.
//! conformance::model::check(conformance::memory_factory(), 64);
//! ```
//!
//! The checks are listed once, in
//! [`for_each_conformance_check!`](crate::for_each_conformance_check):
//! [`run_all`] and the crate's per-store test modules are generated from
//! that list, so a new check is added there.
//!
//! [`ManualClock`]: idem_store::ManualClock

mod amendment;
mod assert;
mod attempt_log;
mod batches;
mod claim_in_doubt;
mod effect_atomic;
mod factories;
mod failure_notes;
mod gates;
mod in_tx;
mod job_lease;
mod kept_operations;
mod list_paging;
mod lookup_index;
pub mod model;
mod ownership;
mod pairs;
mod records;
mod registry;
mod resolution;
mod store_wide;
mod unstorable_text;

use std::future::Future;

pub use amendment::a_persons_resolution_is_amended_once;
pub use assert::{POLICY, START_MS, fingerprint, holder, key, operation_of, request};
pub use attempt_log::{
    attempt_log_follows_every_change, attempt_log_off_writes_no_entries,
    gc_removes_attempt_entries_with_their_records,
};
pub use batches::{
    claim_many_is_claims_in_order, finish_many_is_finishes_in_order, write_many_is_writes_in_order,
};
pub use claim_in_doubt::claim_sent_again_is_the_same_claim;
pub use effect_atomic::atomic_claims_re_execute_when_expired;
pub use factories::{
    BoxFuture, Fixture, POSTGRES_URL_ENV, Reopen, fresh_schema, grouped, memory_factory,
    postgres_test_url,
};
#[cfg(feature = "postgres")]
pub use factories::{drop_postgres_schema, postgres_factory};
#[cfg(feature = "sqlite")]
pub use factories::{sqlite_factory, sqlite_fast_factory};
pub use failure_notes::a_failures_error_text_is_kept_in_the_log;
pub use gates::the_gate_a_downstream_keeps;
pub use in_tx::effects_in_the_store_transaction;
pub use job_lease::job_lease;
pub use kept_operations::{
    keep_operations_off_keeps_none, kept_operations_are_bounded, records_are_found_by_their_fields,
    records_keep_their_operation,
};
pub use list_paging::a_list_pages_by_its_place;
pub use lookup_index::a_lookup_by_field_is_the_same_on_every_store;
pub use ownership::{membership_epochs, stale_epoch_is_refused};
pub use pairs::a_finish_and_a_claim_in_one_call;
pub use records::{
    claim_and_duplicate, complete_then_replay, expired_holder_may_still_write,
    fail_retryable_then_take_over, fenced_stale_writes, heartbeat_extends_and_is_fenced,
    lease_expiry_and_take_over, mark_unknown, take_over_refused_for_final,
};
pub use registry::{activation_pins_digests_and_logs_history, racing_activations_have_one_winner};
pub use resolution::resolution_settles_review_once;
pub use store_wide::{
    fence_monotonic_across_gc_and_reopen, gc_removes_a_backlog_in_batches,
    get_many_is_gets_in_order, list_filters, outcome_size_cap, retention_and_gc,
};
pub use unstorable_text::unstorable_text_is_refused_before_anything_is_written;

use idem_store::StoreOptions;

/// The list of conformance checks, kept once: calls `$callback! { check,
/// check, … }` with the name of every check in this crate
/// (in the order [`run_all`] runs them).
///
/// [`run_all`] is generated from it, and so are the per-store test modules
/// of the crate's tests (`tests/conformance/main.rs`), which a crate testing a
/// store of its own can copy.
///
/// [`run_all`]: crate::run_all
#[macro_export]
macro_rules! for_each_conformance_check {
    ($callback:ident) => {
        $callback! {
            claim_and_duplicate,
            complete_then_replay,
            fenced_stale_writes,
            lease_expiry_and_take_over,
            expired_holder_may_still_write,
            take_over_refused_for_final,
            heartbeat_extends_and_is_fenced,
            fail_retryable_then_take_over,
            mark_unknown,
            claim_sent_again_is_the_same_claim,
            retention_and_gc,
            claim_many_is_claims_in_order,
            finish_many_is_finishes_in_order,
            write_many_is_writes_in_order,
            a_finish_and_a_claim_in_one_call,
            fence_monotonic_across_gc_and_reopen,
            outcome_size_cap,
            list_filters,
            get_many_is_gets_in_order,
            membership_epochs,
            stale_epoch_is_refused,
            job_lease,
            attempt_log_follows_every_change,
            a_failures_error_text_is_kept_in_the_log,
            gc_removes_attempt_entries_with_their_records,
            gc_removes_a_backlog_in_batches,
            resolution_settles_review_once,
            a_persons_resolution_is_amended_once,
            attempt_log_off_writes_no_entries,
            records_keep_their_operation,
            kept_operations_are_bounded,
            records_are_found_by_their_fields,
            a_lookup_by_field_is_the_same_on_every_store,
            a_list_pages_by_its_place,
            keep_operations_off_keeps_none,
            activation_pins_digests_and_logs_history,
            racing_activations_have_one_winner,
            unstorable_text_is_refused_before_anything_is_written,
            effects_in_the_store_transaction,
            the_gate_a_downstream_keeps,
            atomic_claims_re_execute_when_expired,
        }
    };
}

/// Generates [`run_all`] from the list of checks.
macro_rules! define_run_all {
    ($($check:ident),* $(,)?) => {
        /// Runs every check (the list in
        /// [`for_each_conformance_check!`](crate::for_each_conformance_check))
        /// against stores from `factory`.
        pub async fn run_all<F, Fut>(factory: &F)
        where
            F: Fn(StoreOptions) -> Fut,
            Fut: Future<Output = Fixture>,
        {
            $($check(factory).await;)*
        }
    };
}

for_each_conformance_check!(define_run_all);
