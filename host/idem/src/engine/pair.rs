//! A lone worker's end of one operation and claim of the next in one store
//! call ([`Writes::write_many`](idem_store::Writes::write_many)): on SQLite
//! one transaction, so a job at one worker commits once per operation
//! instead of twice; on PostgreSQL the two at once, on two connections (one
//! transaction there runs them one after the other before its commit, and
//! measured slower). Each write is still decided alone, conditional on its
//! own key and fence, and answered as it would be alone.

use idem_store::{Finish, StoreError, Write, WriteOutcome};

use super::batch::{FirstClaim, ToClaim, one_answer_each};
use super::{Engine, EngineError};

impl Engine {
    /// Whether `finish` and the claim of `next` may share one store call:
    /// not during a dual-read window (where the replaced version's key
    /// decides a claim first), and not for the same key (an end and a claim
    /// of one key are decided in either order in one call; alone, the end
    /// comes first).
    pub(crate) fn pairs(&self, finish: &Finish, next: &ToClaim) -> bool {
        self.dual_read().is_none() && finish.key != next.request().key
    }

    /// Records `finish` and claims `next` in one store call (see
    /// [`Engine::pairs`]): the end's answer as
    /// [`Engine::record_finishes`] gives it, and `next`'s first claim as a
    /// claim batch gives it. A failure of the whole call hands `next` back
    /// (the caller keeps `finish`): either write may have been made, and
    /// each sent again is recognised (the end by its fence, the claim by
    /// its holder token).
    pub(crate) async fn finish_and_claim(
        &self,
        finish: &Finish,
        next: ToClaim,
    ) -> Result<(Result<(), EngineError>, FirstClaim), (EngineError, ToClaim)> {
        if let Err(e) = self.admission.check(&self.store, &self.policy).await {
            return Err((e, next));
        }
        let writes = vec![
            Write::Finish(finish.clone()),
            Write::Claim(next.request().clone()),
        ];
        let answers = match self.store.writes().write_many(writes).await {
            Ok(answers) => answers,
            Err(e) => return Err((e.into(), next)),
        };
        let [finished, claimed] =
            match one_answer_each(answers, 2, "writes").map(<[_; 2]>::try_from) {
                Ok(Ok(pair)) => pair,
                Ok(Err(_)) => unreachable!("two answers were counted"),
                Err(e) => return Err((e, next)),
            };
        let finished = finished.and_then(|answer| match answer {
            WriteOutcome::Finished => Ok(()),
            WriteOutcome::Claim(_) => Err(mismatched("finish")),
        });
        let first = claimed.and_then(|answer| match answer {
            WriteOutcome::Claim(outcome) => Ok(outcome),
            WriteOutcome::Finished => Err(mismatched("claim")),
        });
        let finished = self.finish_answer(finish, finished).await;
        let (op, keyed, request) = next.into_parts();
        Ok((
            finished,
            FirstClaim {
                op,
                keyed,
                request,
                first,
            },
        ))
    }
}

fn mismatched(kind: &str) -> StoreError {
    StoreError::Task(format!(
        "the store answered a {kind} with another kind of answer"
    ))
}
