//! [`Writes`] for every backend.

use async_trait::async_trait;

use super::checked::{check_finished, fresh_claim};
use super::claims::{self, prepared_claim};
use super::finishes::{self, prepared_finish};
use super::{in_one_transaction, timed};
use crate::backend::RecordBackend;
use crate::machine;
use crate::port::{Batching, Writes, write_by_kind};
use crate::vocabulary::StoreError;
use crate::vocabulary::{ClaimOutcome, ClaimRequest, Finish, Write, WriteOutcome};

#[async_trait]
impl<B: RecordBackend> Writes for B {
    fn batching(&self) -> Batching {
        RecordBackend::batching(self)
    }

    async fn claim(&self, request: ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        machine::validate(&request)?;
        timed(
            "claim",
            claims::claim(self, machine::kept(request, self.options())),
        )
        .await
    }

    async fn finish(&self, finish: Finish) -> Result<(), StoreError> {
        timed("finish", finishes::finish(self, finish)).await
    }

    async fn claim_many(
        &self,
        requests: Vec<ClaimRequest>,
    ) -> Result<Vec<Result<ClaimOutcome, StoreError>>, StoreError> {
        let options = self.options();
        let requests = requests
            .into_iter()
            .map(|r| machine::kept(r, options))
            .collect();
        timed("claim_many", claims::claim_many(self, requests)).await
    }

    async fn finish_many(
        &self,
        finishes: Vec<Finish>,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        timed("finish_many", finishes::finish_many(self, finishes)).await
    }

    /// Where one transaction carries both kinds, every write shares it (one
    /// commit), each decided as alone, in order; an invalid claim or an
    /// outcome too large is refused alone.
    async fn write_many(
        &self,
        writes: Vec<Write>,
    ) -> Result<Vec<Result<WriteOutcome, StoreError>>, StoreError> {
        if !RecordBackend::batching(self).one_transaction {
            let writes = match paired(self, writes).await? {
                Ok(answers) => return Ok(answers),
                Err(writes) => writes,
            };
            // A call of each kind, each timed as itself.
            return write_by_kind(self, writes).await;
        }
        let options = self.options();
        let prepared = writes
            .into_iter()
            .map(|write| match write {
                Write::Claim(request) => {
                    prepared_claim(machine::kept(request, options), WriteOutcome::Claim)
                }
                Write::Finish(finish) => prepared_finish(self, finish, |()| WriteOutcome::Finished),
            })
            .collect();
        timed("write_many", in_one_transaction(self, prepared)).await
    }
}

/// One holder's end and one claim of another key, where the backend writes
/// that pair in one round trip and one commit
/// ([`RecordBackend::fast_pair`]): what its fast path did not write takes
/// its record transaction, as it would alone. Any other writes, or a
/// backend without the path, are handed back.
async fn paired<B: RecordBackend>(
    backend: &B,
    writes: Vec<Write>,
) -> Result<Result<Vec<Result<WriteOutcome, StoreError>>, Vec<Write>>, StoreError> {
    let pair = match <[Write; 2]>::try_from(writes) {
        Ok([Write::Finish(finish), Write::Claim(claim)]) if finish.key != claim.key => {
            (finish, claim)
        }
        Ok(writes) => return Ok(Err(writes.into())),
        Err(writes) => return Ok(Err(writes)),
    };
    let (finish, claim) = pair;
    // An invalid claim is refused as alone, by the general path.
    if machine::validate(&claim).is_err() {
        return Ok(Err(vec![Write::Finish(finish), Write::Claim(claim)]));
    }
    let claim = machine::kept(claim, backend.options());
    let finish = match finishes::checked(backend, finish) {
        Ok(checked) => checked,
        // Refused before the store, as alone; the claim goes alone.
        Err(refused) => {
            let claimed = claims::claim(backend, claim).await;
            return Ok(Ok(vec![Err(refused), claimed.map(WriteOutcome::Claim)]));
        }
    };
    let Some(written) = timed("write_pair", backend.fast_pair(&finish, &claim)).await? else {
        return Ok(Err(vec![Write::Finish(finish), Write::Claim(claim)]));
    };
    let finished = match written.finish {
        Some(w) => {
            let limit = backend.options().max_outcome_bytes;
            let state = finish.ending.state();
            check_finished(&finish.key, finish.fence, state, &finish.outcome, limit, &w);
            Ok(())
        }
        None => finishes::finish_transaction(backend, finish).await,
    };
    let claimed = match written.claim {
        Some(w) => Ok(ClaimOutcome::Claimed(
            fresh_claim("a paired claim", &claim, &w).1,
        )),
        None => claims::claim_transaction(backend, claim).await,
    };
    Ok(Ok(vec![
        finished.map(|()| WriteOutcome::Finished),
        claimed.map(WriteOutcome::Claim),
    ]))
}
