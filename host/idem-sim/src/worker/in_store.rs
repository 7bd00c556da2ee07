//! The in-store guard: idem with the charge written in the store's own
//! transaction, beside the holder's completion (`Engine::begin_in_store`,
//! then `Execution::run_in_sqlite` / `run_in_postgres`). The charge and
//! its end commit together or not at all, so the faults read differently:
//! a crash after the charge rolls the charge back with the transaction, a
//! lost completion is a lost commit (nothing charged), and a pause between
//! the two is a pause before the one commit. An expired claim is known to
//! have charged nothing: the next duplicate re-executes it, and the
//! deposed holder's commit is fenced inside its own transaction.

use idem::engine::{EngineError, RunResult};
use idem_store::{Database, Outcome, rusqlite};

use super::{Phase, Sim};
use crate::SimError;

/// The business table: one row per charge that moved money.
const TABLE: &str = "sim_charges";

impl Sim<'_> {
    pub(super) async fn step_in_store(&mut self, r: usize) -> Result<(), SimError> {
        let n = self.scenario.job.customers;
        match self.runs[r].phase {
            Phase::Next(i) if i >= n => {
                self.runs[r].phase = Phase::Done;
                self.note(r, || "done".into());
            }
            Phase::Next(i) => self.claim_next(r, i, true).await?,
            Phase::Charge(i) => {
                if self.store_wait(r) {
                    return Ok(());
                }
                self.spend();
                self.runs[r].phase = Phase::Next(i + 1);
                if self.spec(r).crashes_after_charge(i) {
                    // The process dies inside its transaction: the server
                    // (or SQLite's journal) rolls the charge back.
                    self.note(r, || format!("writes the charge of invoice {i}, then dies"));
                    self.crash(r);
                    return Ok(());
                }
                let claim = self.runs[r].claim.take().expect("charging under a claim");
                if self.spec(r).loses_completion(i) {
                    // The commit never reaches the store: charge and end
                    // are lost together, and the run believes it done.
                    self.counters.lost_completions += 1;
                    self.note(r, || format!("the commit of invoice {i} is lost"));
                    return Ok(());
                }
                let fence = claim.fence();
                let at = self.rel_ms();
                // Steps run one at a time: no other charge comes between.
                let receipt = self.ledger.next_receipt();
                let body = receipt.clone().into_bytes();
                let run = self.spec(r).name.clone();
                let ran = match self.database(r).await? {
                    Database::Sqlite(_) => {
                        claim
                            .run_in_sqlite(move |tx, ctx| {
                                tx.execute(
                                    &format!(
                                        "CREATE TABLE IF NOT EXISTS {TABLE} (run TEXT NOT NULL, invoice INTEGER NOT NULL, fence INTEGER NOT NULL)"
                                    ),
                                    [],
                                )?;
                                tx.execute(
                                    &format!("INSERT INTO {TABLE} (run, invoice, fence) VALUES (?1, ?2, ?3)"),
                                    rusqlite::params![run, i as i64, ctx.fence as i64],
                                )?;
                                Ok(Outcome::new(0, body))
                            })
                            .await
                    }
                    Database::Postgres(pg) => {
                        let table = format!("{}.{TABLE}", pg.schema());
                        claim
                            .run_in_postgres(None, async move |tx, ctx| {
                                tx.batch_execute(&format!(
                                    "CREATE TABLE IF NOT EXISTS {table} (run TEXT NOT NULL, invoice BIGINT NOT NULL, fence BIGINT NOT NULL)"
                                ))
                                .await?;
                                tx.execute(
                                    &format!("INSERT INTO {table} (run, invoice, fence) VALUES ($1, $2, $3)"),
                                    &[&run, &(i as i64), &(ctx.fence as i64)],
                                )
                                .await?;
                                Ok(Outcome::new(0, body.clone()))
                            })
                            .await
                    }
                    _ => unreachable!("begin_in_store refused a store without transactions"),
                };
                match ran {
                    Ok(RunResult::Executed { result: Ok(_), .. }) => {
                        // Committed with its end: the money moved once.
                        let name = self.spec(r).name.clone();
                        let charged = self.ledger.charge(at, &name, i, None, None);
                        debug_assert!(
                            matches!(&charged, crate::LedgerReply::Charged { receipt: r } if *r == receipt)
                        );
                        self.counters.completed += 1;
                        self.recorded[i] = true;
                        self.note(r, || {
                            format!("charges invoice {i} and completes it in one commit (fence {fence}): {receipt}")
                        });
                    }
                    Ok(other) => {
                        return Err(SimError::Charge {
                            run: self.spec(r).name.clone(),
                            invoice: i,
                            detail: format!("{other:?}"),
                        });
                    }
                    Err(EngineError::Fenced(_)) => {
                        self.counters.fenced_writes += 1;
                        self.note(r, || {
                            format!(
                                "its transaction for invoice {i} is fenced: the charge rolls back"
                            )
                        });
                    }
                    Err(source) => {
                        return Err(SimError::Engine {
                            run: self.spec(r).name.clone(),
                            invoice: i,
                            source,
                        });
                    }
                }
            }
            Phase::Start | Phase::Record(_) | Phase::Release | Phase::Done => {
                self.runs[r].phase = Phase::Done;
            }
        }
        Ok(())
    }

    /// The store's database, which the charges share.
    async fn database(&self, r: usize) -> Result<Database, SimError> {
        let engine = self.runs[r]
            .engine
            .as_ref()
            .expect("idem runs have an engine");
        Ok(engine.store().database().await?)
    }
}
