//! The worker line protocol of `idem run --worker` (version 1): one JSON
//! object per line each way, UTF-8, `\n`-terminated.
//!
//! 1. The worker starts and prints `{"ready":true}` once it can take work.
//!    No operation is sent before: a worker that fails to start costs no
//!    operation its outcome.
//! 2. For each operation idem writes one request line to the worker's
//!    stdin:
//!    `{"key":"<64 hex>","fence":7,"attempt":1,"take_over":false,"partition":"c1","op":{…the canonical operation…}}`
//! 3. The worker performs the effect (hand the key and fence downstream)
//!    and prints one answer line on stdout:
//!    `{"status":0,"body":"receipt 42"}`. `status` 0 is success; any other
//!    is a failure, retryable unless `--permanent-exit-codes` lists it or
//!    the answer says `"retryable":false` (or `true`, which wins over the
//!    list). `body` (text, optional) is stored and replayed, up to 64 KiB.
//!    Unknown members are refused.
//! 4. One operation at a time per worker: the next request comes after the
//!    answer. At the end idem closes the worker's stdin; the worker exits 0.
//!
//! Anything else on stdout breaks the protocol: the operation's outcome is
//! unknown (the effect may have happened) and the worker is replaced. The
//! worker's stderr is idem's. A worker that exits while it holds an
//! operation leaves that operation's outcome unknown.

use idem::engine::{ExecContext, Failed};
use idem::job::EffectOutcome;
use idem_core::Operation;
use idem_store::Outcome;
use serde::Deserialize;

pub use crate::input::shown;
use crate::user_command::MAX_STORED_STDOUT;

/// The line a worker prints when it is ready for work.
pub const READY: &str = r#"{"ready":true}"#;

/// The longest line read from a worker: a 64 KiB body, escaped, and room.
pub const MAX_LINE: usize = 1024 * 1024;

/// Whether `line` is the ready line (any JSON spelling of it).
pub fn is_ready(line: &str) -> bool {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Ready {
        ready: bool,
    }
    matches!(
        serde_json::from_str::<Ready>(line),
        Ok(Ready { ready: true })
    )
}

/// The request line for `op` under the claim `ctx`, with its newline.
pub fn request(op: &Operation, ctx: &ExecContext) -> String {
    let s = |v: &str| serde_json::to_string(v).expect("strings always serialise");
    format!(
        "{{\"key\":{},\"fence\":{},\"attempt\":{},\"take_over\":{},\"partition\":{},\"op\":{}}}\n",
        s(&ctx.key),
        ctx.fence,
        ctx.attempt,
        ctx.take_over,
        s(&ctx.partition),
        op.canonical_json()
    )
}

/// A worker's answer for one operation.
#[derive(Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    /// 0 for success.
    pub status: i32,
    /// What is stored and replayed.
    #[serde(default)]
    pub body: String,
    /// Whether a failure may be retried; absent, `--permanent-exit-codes`
    /// decides.
    #[serde(default)]
    pub retryable: Option<bool>,
    /// For a failure: why, in the worker's words (kept in the attempt log,
    /// cut to 1 KiB, and shown escaped).
    #[serde(default)]
    pub error: Option<String>,
}

impl Answer {
    /// Reads an answer line.
    pub fn parse(line: &str) -> Result<Answer, String> {
        serde_json::from_str(line).map_err(|e| format!("not an answer ({e})"))
    }

    /// What is recorded: success completed; a failure failed, retryable as
    /// the answer says or else unless `permanent` lists its status.
    pub fn into_outcome(self, permanent: &[i32]) -> EffectOutcome {
        let mut body = self.body.into_bytes();
        body.truncate(MAX_STORED_STDOUT);
        if self.status == 0 {
            return EffectOutcome::Completed(Outcome::new(0, body));
        }
        EffectOutcome::Failed(Failed {
            retryable: self.retryable.unwrap_or(!permanent.contains(&self.status)),
            outcome: Outcome {
                status: self.status,
                body,
                error: Some(match self.error.filter(|e| !e.trim().is_empty()) {
                    Some(why) => format!("the worker answered status {}: {why}", self.status),
                    None => format!("the worker answered status {}", self.status),
                }),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_and_map() {
        let ok = Answer::parse(r#"{"status":0,"body":"r1"}"#).unwrap();
        match ok.into_outcome(&[]) {
            EffectOutcome::Completed(o) => assert_eq!(o.body, b"r1"),
            other => panic!("{other:?}"),
        }
        let failed = |line: &str, permanent: &[i32]| match Answer::parse(line)
            .unwrap()
            .into_outcome(permanent)
        {
            EffectOutcome::Failed(f) => (f.outcome.status, f.retryable),
            other => panic!("{other:?}"),
        };
        assert_eq!(failed(r#"{"status":3}"#, &[]), (3, true));
        assert_eq!(failed(r#"{"status":3}"#, &[3]), (3, false));
        assert_eq!(failed(r#"{"status":3,"retryable":true}"#, &[3]), (3, true));
        assert_eq!(failed(r#"{"status":3,"retryable":false}"#, &[]), (3, false));
        let why = |line: &str| match Answer::parse(line).unwrap().into_outcome(&[]) {
            EffectOutcome::Failed(f) => f.outcome.error,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            why(r#"{"status":3,"error":"card declined"}"#).as_deref(),
            Some("the worker answered status 3: card declined")
        );
        assert_eq!(
            why(r#"{"status":3,"error":" "}"#).as_deref(),
            Some("the worker answered status 3")
        );
        for bad in [r#"{"body":"x"}"#, r#"{"status":0,"colour":1}"#, "ok", ""] {
            assert!(Answer::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_the_ready_line_is_ready() {
        assert!(is_ready(READY));
        assert!(is_ready(r#"{ "ready" : true }"#));
        for not in [r#"{"ready":false}"#, "ready", r#"{"status":0}"#, ""] {
            assert!(!is_ready(not), "{not}");
        }
    }

    #[test]
    fn a_request_is_one_json_line() {
        let op = Operation::from_json(
            r#"{"kind":"charge","tenant":"acme","fields":{"customer":"c\n1"}}"#,
            &Default::default(),
        )
        .unwrap();
        let mut ctx = ExecContext::new("ab".repeat(32), 7);
        (ctx.attempt, ctx.take_over) = (2, true);
        ctx.partition = "c\"1".into();
        let line = request(&op, &ctx);
        assert!(line.ends_with('\n'));
        assert_eq!(line.matches('\n').count(), 1);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["fence"], 7);
        assert_eq!(v["attempt"], 2);
        assert_eq!(v["take_over"], true);
        assert_eq!(v["partition"], "c\"1");
        assert_eq!(v["op"]["fields"]["customer"], "c\n1");
    }
}
