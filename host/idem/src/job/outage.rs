//! Riding out a store that went away.
//!
//! A nightly job meets a store outage sooner or later: a PostgreSQL
//! restart or fail-over (seconds to a minute), connections killed by an
//! operator, a SQLite disk that filled. Each store call of the job that
//! fails because the store could not serve it ([`EngineError::is_store_unavailable`])
//! is tried again, with capped exponential backoff and jitter, until the
//! store answers or the job's outage budget is spent. Trying again is safe:
//! a claim that committed unseen is found by the next claim, and every
//! later write is conditional on its fence (an end already recorded under
//! the fence is recognised: see `engine::in_doubt`).

use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

use idem_store::StoreError;

use crate::engine::EngineError;

/// The first wait after a failure; doubled after each, up to [`MAX_WAIT`].
const FIRST_WAIT: Duration = Duration::from_millis(50);
/// The longest wait between two tries: a store that comes back is used
/// within this long.
const MAX_WAIT: Duration = Duration::from_secs(2);

/// How long the store was gone when a job gave up on it, and what it last
/// said.
#[derive(Debug)]
pub(crate) struct GaveUp {
    /// The last error.
    pub(crate) error: EngineError,
    /// From the first failure to giving up.
    pub(crate) lasted: Duration,
}

/// The waits of one caller through one outage: capped exponential backoff
/// with jitter, up to a budget counted from the first failure.
pub(crate) struct Backoff {
    budget: Duration,
    since: Option<Instant>,
    wait: Duration,
}

impl Backoff {
    /// Backoff within `budget`.
    pub(crate) fn new(budget: Duration) -> Backoff {
        Backoff {
            budget,
            since: None,
            wait: FIRST_WAIT,
        }
    }

    /// Call after a failure that [`EngineError::is_store_unavailable`]:
    /// waits before the next try (`Ok`; `waiting` is called first when this
    /// is the outage's first failure: say so, once), or says to give up
    /// after how long the store has been gone (`Err`).
    pub(crate) async fn after_failure(&mut self, waiting: impl FnOnce()) -> Result<(), Duration> {
        let first = self.since.is_none();
        let since = *self.since.get_or_insert_with(Instant::now);
        let lasted = since.elapsed();
        if lasted >= self.budget {
            return Err(lasted);
        }
        if first {
            waiting();
        }
        // Never sleep past the budget: the last try comes at its end.
        tokio::time::sleep(jittered(self.wait).min(self.budget - lasted)).await;
        self.wait = (self.wait * 2).min(MAX_WAIT);
        Ok(())
    }
}

/// Calls `attempt` until it succeeds or fails with an error `passing`
/// does not call an outage, trying again with [`Backoff`] within `budget`;
/// `waiting` is told once, at the outage's first failure. Past the budget
/// the last error is returned.
pub(crate) async fn riding_out<T, E, Fut>(
    budget: Duration,
    mut attempt: impl FnMut() -> Fut,
    passing: impl Fn(&E) -> bool,
    waiting: impl Fn(&E),
) -> Result<T, E>
where
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut backoff = Backoff::new(budget);
    loop {
        let error = match attempt().await {
            Err(e) if passing(&e) => e,
            done => return done,
        };
        if backoff.after_failure(|| waiting(&error)).await.is_err() {
            return Err(error);
        }
    }
}

/// What one batch riding out an outage came to: each item served, with
/// its tag; and when it gave up (past the budget, or a whole call failed
/// otherwise), why and the tags of the items left unserved.
pub(crate) type Served<A, T> = (Vec<(A, T)>, Option<(GaveUp, Vec<T>)>);

/// One item's answer in a batch, as [`batch_riding_out`] sorts it.
pub(crate) enum Answer<A, I> {
    /// The store served it.
    Served(A),
    /// The store could not serve it: why, and the item to send again.
    Again(EngineError, I),
}

/// [`riding_out`] for a batch: `call` sends the items it is given in one
/// store call and answers each in order, or fails whole (handing the items
/// back when they may be sent again). An answer `unserved` sorts as
/// [`Answer::Again`] is sent again with the
/// others so answered; a whole call that failed so, entire; both within
/// `budget`, `waiting` told once. Each item is sent as it was made, so a
/// write that committed while its answer was lost is recognised (a claim by
/// its holder token, an end by its fence).
pub(crate) async fn batch_riding_out<I, T, A, Fut>(
    budget: Duration,
    items: Vec<(I, T)>,
    mut call: impl FnMut(Vec<I>) -> Fut,
    unserved: impl Fn(A) -> Answer<A, I>,
    waiting: impl Fn(&EngineError),
) -> Served<A, T>
where
    Fut: std::future::Future<Output = Result<Vec<A>, (EngineError, Option<Vec<I>>)>>,
{
    let mut backoff = Backoff::new(budget);
    let (mut items, mut tags): (Vec<I>, Vec<T>) = items.into_iter().unzip();
    let mut served = Vec::with_capacity(items.len());
    loop {
        let error = match call(items).await {
            Ok(answers) => {
                let (mut again, mut again_tags, mut error) = (Vec::new(), Vec::new(), None);
                for (answer, tag) in answers.into_iter().zip(tags) {
                    match unserved(answer) {
                        Answer::Served(answer) => served.push((answer, tag)),
                        Answer::Again(e, item) => {
                            error.get_or_insert(e);
                            again.push(item);
                            again_tags.push(tag);
                        }
                    }
                }
                let Some(error) = error else {
                    return (served, None);
                };
                (items, tags) = (again, again_tags);
                error
            }
            Err((error, Some(back))) if error.is_store_unavailable() => {
                items = back;
                error
            }
            Err((error, _)) => {
                let lasted = Duration::ZERO;
                return (served, Some((GaveUp { error, lasted }, tags)));
            }
        };
        if let Err(lasted) = backoff.after_failure(|| waiting(&error)).await {
            return (served, Some((GaveUp { error, lasted }, tags)));
        }
    }
}

/// `wait` with up to a quarter added or taken at random, so that many
/// callers (a job's tasks, a fleet's workers) do not come back in step.
fn jittered(wait: Duration) -> Duration {
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let quarter = wait.as_micros() as u64 / 4;
    let spread = if quarter == 0 {
        0
    } else {
        random % (2 * quarter)
    };
    Duration::from_micros(wait.as_micros() as u64 - quarter + spread)
}

/// Says how long a store has been gone, for the job's one line about it.
pub(crate) fn describe(gave_up: &GaveUp) -> String {
    let store = match &gave_up.error {
        EngineError::Store(StoreError::Backend { store, .. }) => store.clone(),
        _ => "the store".to_string(),
    };
    format!(
        "{store} was unavailable for {:.1} s, past the job's outage budget: {}",
        gave_up.lasted.as_secs_f64(),
        gave_up.error
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn within_the_budget_it_waits_and_says_so_once() {
        let mut backoff = Backoff::new(Duration::from_secs(60));
        let told = std::cell::Cell::new(0);
        assert_eq!(
            backoff.after_failure(|| told.set(told.get() + 1)).await,
            Ok(())
        );
        assert_eq!(
            backoff.after_failure(|| told.set(told.get() + 1)).await,
            Ok(())
        );
        assert_eq!(told.get(), 1, "said once, at the first failure");
        assert_eq!(backoff.wait, FIRST_WAIT * 4, "doubled after each wait");
    }

    #[tokio::test]
    async fn a_zero_budget_gives_up_at_the_first_failure_saying_nothing() {
        let mut backoff = Backoff::new(Duration::ZERO);
        let told = std::cell::Cell::new(false);
        assert!(backoff.after_failure(|| told.set(true)).await.is_err());
        assert!(!told.get(), "no wait to speak of");
    }

    #[tokio::test]
    async fn a_spent_budget_gives_up_with_how_long_the_store_was_gone() {
        let mut backoff = Backoff::new(Duration::from_millis(30));
        let mut tries = 0;
        let lasted = loop {
            tries += 1;
            if let Err(lasted) = backoff.after_failure(|| {}).await {
                break lasted;
            }
        };
        assert!(lasted >= Duration::from_millis(30), "{lasted:?}");
        assert!(tries >= 2, "it waited before giving up");
    }

    #[test]
    fn only_a_store_that_could_not_serve_is_waited_for() {
        let busy = StoreError::Busy {
            store: "sqlite:x.db".into(),
            context: "claiming",
        };
        assert!(EngineError::Store(busy).is_store_unavailable());
        let refused = StoreError::InvalidRequest("no".into());
        assert!(!EngineError::Store(refused).is_store_unavailable());
    }

    #[test]
    fn jitter_stays_within_a_quarter() {
        for _ in 0..100 {
            let w = jittered(Duration::from_millis(400));
            assert!(
                w >= Duration::from_millis(300) && w <= Duration::from_millis(500),
                "{w:?}"
            );
        }
    }
}
