//! [`Writes`] for every backend.

use async_trait::async_trait;

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
            // A call of each kind, at once, each timed as itself.
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
