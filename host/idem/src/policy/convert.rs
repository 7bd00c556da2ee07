//! The contract's types as wasmtime sees them, and their conversion to and
//! from `idem-core`'s plain Rust types.

pub(crate) mod wit {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "idem:policy/idempotency-policy",
        // Inputs are memo keys (see `memo.rs`).
        additional_derives: [PartialEq, Eq, Hash],
    });
}

use idem_core as core;
use wit::exports::idem::policy::policy as p;

pub(crate) fn operation(op: &core::Operation, now_ms: u64) -> p::Operation {
    p::Operation {
        kind: op.kind.clone(),
        tenant: op.tenant.clone(),
        fields: op
            .fields
            .iter()
            .map(|(name, value)| p::Field {
                name: name.clone(),
                value: match value {
                    core::Value::Text(t) => p::Value::Text(t.clone()),
                    core::Value::Number(n) => p::Value::Number(n.clone()),
                    core::Value::Boolean(b) => p::Value::Boolean(*b),
                },
            })
            .collect(),
        run: op.run.as_ref().map(|r| p::RunContext {
            run_id: r.run_id.clone(),
            trigger: match r.trigger {
                core::Trigger::Scheduled => p::Trigger::Scheduled,
                core::Trigger::Retry => p::Trigger::Retry,
                core::Trigger::Manual => p::Trigger::Manual,
                core::Trigger::Client => p::Trigger::Client,
            },
            attempt: r.attempt,
        }),
        now_ms: op.now_ms.unwrap_or(now_ms),
    }
}

pub(crate) fn duplicate_context(ctx: &core::DuplicateContext, now_ms: u64) -> p::DuplicateContext {
    use core::RecordState as S;
    p::DuplicateContext {
        operation: operation(&ctx.operation, now_ms),
        state: match ctx.state {
            S::InProgress => p::RecordState::InProgress,
            S::Completed => p::RecordState::Completed,
            S::FailedRetryable => p::RecordState::FailedRetryable,
            S::FailedPermanent => p::RecordState::FailedPermanent,
            S::OutcomeUnknown => p::RecordState::OutcomeUnknown,
        },
        fingerprint_matches: ctx.fingerprint_matches,
        attempts: ctx.attempts,
        age_ms: ctx.age_ms,
        lease_remaining_ms: ctx.lease_remaining_ms,
        outcome: ctx.outcome.as_ref().map(|o| p::OutcomeSummary {
            status: o.status,
            size: o.size,
            error: o.error.clone(),
        }),
    }
}

pub(crate) fn info(i: p::PolicyInfo) -> core::PolicyInfo {
    core::PolicyInfo {
        name: i.name,
        version: i.version,
        namespace: i.namespace,
        description: i.description,
    }
}

pub(crate) fn derivation(d: p::Derivation) -> core::Derivation {
    let parts = |ps: Vec<p::Part>| {
        ps.into_iter()
            .map(|x| core::Part::new(x.name, x.value))
            .collect()
    };
    core::Derivation {
        key: parts(d.key),
        fingerprint: parts(d.fingerprint),
        partition: d.partition,
        retention_s: d.retention_s,
        lease_s: d.lease_s,
    }
}

pub(crate) fn policy_error(e: p::PolicyError) -> core::PolicyError {
    core::PolicyError {
        code: match e.code {
            p::ErrorCode::MissingField => core::ErrorCode::MissingField,
            p::ErrorCode::InvalidValue => core::ErrorCode::InvalidValue,
            p::ErrorCode::UnsupportedKind => core::ErrorCode::UnsupportedKind,
        },
        // Bounded: the message and field are repeated in errors, logs and
        // `idem key`'s JSON answer.
        field: e
            .field
            .map(|f| core::text::bounded(&f, core::text::MAX_NAME_BYTES)),
        message: core::text::bounded(&e.message, core::text::MAX_MESSAGE_BYTES),
    }
}

pub(crate) fn decision(d: p::Decision) -> core::Decision {
    // The contract's `u16`, as the `i32` every status is in Rust.
    let rejection = |r: p::Rejection| core::Rejection {
        status: i32::from(r.status),
        reason: r.reason,
        retry_after_ms: r.retry_after_ms,
    };
    match d {
        p::Decision::Replay => core::Decision::Replay,
        p::Decision::Reject(r) => core::Decision::Reject(rejection(r)),
        p::Decision::Wait(ms) => core::Decision::Wait { max_ms: ms },
        p::Decision::ReExecute => core::Decision::ReExecute,
        p::Decision::MarkUnknown(r) => core::Decision::MarkUnknown(rejection(r)),
    }
}
