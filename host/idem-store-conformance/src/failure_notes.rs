//! What failed, kept: a failure's error text is the detail of its end in
//! the attempt log (cut to `MAX_NOTE_BYTES` on a character boundary),
//! whichever way the end was written — alone or in a batch — so that every
//! view of the log says why an attempt failed, not only that it did.

use std::future::Future;

use super::Fixture;
use super::assert::{claimed, fixture, key, request};
use super::attempt_log::log_of;
use idem_store::{AttemptEvent, Ending, Finish, MAX_NOTE_BYTES, Outcome, StoreOptions};

/// See the module docs.
pub async fn a_failures_error_text_is_kept_in_the_log<F, Fut>(factory: &F)
where
    F: Fn(StoreOptions) -> Fut,
    Fut: Future<Output = Fixture>,
{
    let (fx, _clock) = fixture(factory, idem_store::DEFAULT_MAX_OUTCOME_BYTES).await;
    let store = &fx.store;
    let name = store.describe();
    // Past the bound, with a two-byte character across it.
    let long = format!("{}é and the rest", "x".repeat(MAX_NOTE_BYTES - 1));
    let cases = [
        (
            Ending::Failed { retryable: true },
            Some("the provider timed out".to_string()),
        ),
        (Ending::Failed { retryable: false }, Some(long.clone())),
        (Ending::Completed, None),
    ];
    let expected = |error: &Option<String>| {
        error.as_ref().map(|e| {
            if e.len() > MAX_NOTE_BYTES {
                "x".repeat(MAX_NOTE_BYTES - 1)
            } else {
                e.clone()
            }
        })
    };
    // Alone, then the same three ends in one batch.
    for (batch, first) in [(false, 1), (true, 11)] {
        let mut finishes = Vec::new();
        for (i, (ending, error)) in cases.iter().enumerate() {
            let k = key(first + i as u32);
            let c = claimed(store, request(&k, 1, 1_000, 60_000, 1)).await;
            let outcome = match error {
                Some(error) => Outcome::error(75, error.clone()),
                None => Outcome::new(0, "body"),
            };
            finishes.push(Finish {
                key: k,
                fence: c.fence,
                ending: *ending,
                outcome,
            });
        }
        if batch {
            for answer in store
                .writes()
                .finish_many(finishes.clone())
                .await
                .expect("a batch of ends")
            {
                answer.expect("each end");
            }
        } else {
            for finish in &finishes {
                store.writes().finish(finish.clone()).await.expect("an end");
            }
        }
        for (finish, (ending, error)) in finishes.iter().zip(&cases) {
            let ended = log_of(store, &finish.key).await.pop().expect("an entry");
            assert_eq!(
                ended.event,
                match ending {
                    Ending::Completed => AttemptEvent::Completed,
                    Ending::Failed { retryable: true } => AttemptEvent::FailedRetryable,
                    Ending::Failed { .. } => AttemptEvent::FailedPermanent,
                },
                "{name}"
            );
            assert_eq!(
                ended.detail,
                expected(error),
                "{name}: the detail of {ending:?} (batch: {batch})"
            );
        }
    }
}
