//! [`Gates`] for every backend: the request checked, the decision
//! (`machine::gate`) run in the backend's entry transaction.

use std::time::Duration;

use async_trait::async_trait;

use super::timed;
use crate::backend::{GateBackend, GateDecide};
use crate::machine::gate::{self, GateStep};
use crate::port::Gates;
use crate::vocabulary::{Admission, GateEntry, GateRequest, GateTicket, StoreError};

/// A ticket's write as a decision: `change` the entry it holds, save it.
fn write_step(
    ticket: &GateTicket,
    change: impl Fn(Option<GateEntry>, &GateTicket, u64) -> Result<GateEntry, StoreError>
    + Send
    + Sync
    + 'static,
) -> GateDecide<()> {
    let ticket = ticket.clone();
    Box::new(move |entry, now| {
        let saved = change(entry, &ticket, now)?;
        Ok(GateStep {
            save: Some(saved),
            answer: (),
        })
    })
}

#[async_trait]
impl<B: GateBackend> Gates for B {
    async fn admit(&self, request: &GateRequest) -> Result<Admission, StoreError> {
        gate::check_request(&request.gate, &request.key, request.fence)?;
        let asked = request.clone();
        let decide: GateDecide<Admission> =
            Box::new(move |entry, now| Ok(gate::admit(entry, &asked, now)));
        timed(
            "gate_admit",
            self.gate_transact(&request.gate, &request.key, decide),
        )
        .await
    }

    async fn record(&self, ticket: &GateTicket, result: Vec<u8>) -> Result<(), StoreError> {
        gate::check_request(&ticket.gate, &ticket.key, ticket.fence)?;
        let decide = write_step(ticket, move |entry, ticket, now| {
            gate::record(entry, ticket, result.clone(), now)
        });
        timed(
            "gate_record",
            self.gate_transact(&ticket.gate, &ticket.key, decide),
        )
        .await
    }

    async fn release(&self, ticket: &GateTicket) -> Result<(), StoreError> {
        gate::check_request(&ticket.gate, &ticket.key, ticket.fence)?;
        let decide = write_step(ticket, gate::release);
        self.gate_transact(&ticket.gate, &ticket.key, decide).await
    }

    async fn extend(&self, ticket: &GateTicket, window: Duration) -> Result<(), StoreError> {
        gate::check_request(&ticket.gate, &ticket.key, ticket.fence)?;
        let decide = write_step(ticket, move |entry, ticket, now| {
            gate::extend(entry, ticket, window, now)
        });
        self.gate_transact(&ticket.gate, &ticket.key, decide).await
    }

    async fn entry(&self, gate: &str, key: &str) -> Result<Option<GateEntry>, StoreError> {
        gate::check_request(gate, key, 0)?;
        self.gate_read(gate, key).await
    }

    async fn forget(&self, gate: &str, before_ms: u64) -> Result<u64, StoreError> {
        gate::check_request(gate, "-", 0)?;
        self.gate_forget(gate, before_ms.min(i64::MAX as u64)).await
    }
}
