//! A holder's writes under its fence: its end (completed or failed) and
//! its heartbeat.

use std::time::Duration;

use idem_core::RecordState;

use super::{MAX_TIME_MS, after, held};
use crate::{MAX_ERROR_BYTES, Outcome, Record, RecordKey, StoreError, TRUNCATION_MARK};

/// Enforces the body cap and cuts the error text, spelling a NUL in it
/// `\u{0}`: an effect's error text is what its process said (its stderr),
/// and refusing it would leave the holder unable to record its end.
pub(crate) fn checked_outcome(
    key: &RecordKey,
    mut outcome: Outcome,
    limit: usize,
) -> Result<Outcome, StoreError> {
    if outcome.body.len() > limit {
        return Err(StoreError::OutcomeTooLarge {
            key: key.clone(),
            size: outcome.body.len(),
            limit,
        });
    }
    if let Some(error) = &mut outcome.error {
        if error.contains('\0') {
            *error = error.replace('\0', "\\u{0}");
        }
        truncate_error(error);
    }
    Ok(outcome)
}

/// Cuts error text to [`MAX_ERROR_BYTES`] (mark included), on a character
/// boundary.
pub(crate) fn truncate_error(error: &mut String) {
    if error.len() <= MAX_ERROR_BYTES {
        return;
    }
    let mut end = MAX_ERROR_BYTES - TRUNCATION_MARK.len();
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    error.truncate(end);
    error.push_str(TRUNCATION_MARK);
}

/// The record after its holder finished: completed, failed-retryable or
/// failed-permanent.
pub(crate) fn finish(
    current: Option<Record>,
    key: &RecordKey,
    fence: u64,
    state: RecordState,
    outcome: Outcome,
    limit: usize,
    now_ms: u64,
) -> Result<Record, StoreError> {
    let outcome = checked_outcome(key, outcome, limit)?;
    let mut record = held(current, key, fence, now_ms)?;
    record.state = state;
    record.outcome = Some(outcome);
    record.updated_ms = now_ms;
    record.retain_until_ms = now_ms.saturating_add(record.retention_ms).min(MAX_TIME_MS);
    Ok(record)
}

/// The record after a heartbeat: lease until `now + lease`.
pub(crate) fn heartbeat(
    current: Option<Record>,
    key: &RecordKey,
    fence: u64,
    lease: Duration,
    now_ms: u64,
) -> Result<Record, StoreError> {
    let mut record = held(current, key, fence, now_ms)?;
    record.lease_until_ms = after(now_ms, lease);
    record.updated_ms = now_ms;
    record.retain_until_ms = record.retain_until_ms.max(record.lease_until_ms);
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_text_is_cut_on_a_char_boundary() {
        let mut text = "é".repeat(MAX_ERROR_BYTES);
        truncate_error(&mut text);
        assert!(text.len() <= MAX_ERROR_BYTES);
        assert!(text.ends_with(TRUNCATION_MARK));
        let mut short = "short".to_string();
        truncate_error(&mut short);
        assert_eq!(short, "short");
    }
}
