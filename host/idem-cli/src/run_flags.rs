//! Flags shared by `idem exec` and `idem run`.

use std::time::Duration;

use clap::Args;
use idem::engine::EngineOptions;
use idem::job::Ownership;
use idem_core::{OpError, Operation, OperationLimits, RunContext, Trigger};

/// How a run is labelled and how claims behave.
#[derive(Args, Debug, Clone)]
pub struct RunFlags {
    /// The run these operations belong to (recorded as provenance; replaces
    /// the operation's own `run.run_id`).
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
    /// Why this run happens: scheduled, retry, manual or client.
    #[arg(long, value_name = "T")]
    pub trigger: Option<Trigger>,
    /// The run's attempt number (1 for the first).
    #[arg(long, value_name = "N")]
    pub attempt: Option<u32>,
    /// Override the policy's lease for this run, e.g. `90s`, `10m` (1s to
    /// 24h, the bounds a policy's own lease is held to).
    #[arg(long, value_name = "DURATION", value_parser = parse_lease)]
    pub lease: Option<Duration>,
    /// Exit statuses that mean a permanent failure (replayed to duplicates);
    /// any other non-zero status is retryable. Comma-separated.
    #[arg(long, value_name = "CODES", value_delimiter = ',')]
    pub permanent_exit_codes: Vec<i32>,
    /// How long the store may be unavailable (unreachable, restarting, its
    /// disk full) before idem gives up on it: meanwhile each failed store
    /// call is tried again and the commands already running go on; past it
    /// no more operations start (those not started are not run) and idem
    /// exits 69. `0` gives up at the first failure.
    #[arg(long, value_name = "DURATION", value_parser = parse_outage, default_value = "60s")]
    pub store_outage: Duration,
    /// The longest a duplicate waits for a live holder in all, whatever the
    /// policy's `wait` asks (the shorter of the two), e.g. `2s`, `500ms`;
    /// `0`: a duplicate is answered in progress at once [default: the
    /// policy's wait, at most 60s].
    #[arg(long, value_name = "DURATION", value_parser = parse_max_wait)]
    pub max_wait: Option<Duration>,
}

/// The longest wait a policy may ask for (`wait`'s 60000 ms): a larger
/// `--max-wait` would cap nothing.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// `--max-wait DURATION`: `0`, or up to [`MAX_WAIT`].
pub fn parse_max_wait(text: &str) -> Result<Duration, String> {
    let wait = if text.trim() == "0" {
        Duration::ZERO
    } else {
        humantime::parse_duration(text)
            .map_err(|e| format!("`{text}`: {e} (e.g. `2s`, `500ms`, or `0`)"))?
    };
    if wait > MAX_WAIT {
        return Err(format!(
            "`{text}` is longer than any wait a policy may ask for (60s)"
        ));
    }
    Ok(wait)
}

/// `--store-outage`: a duration (`90s`, `5m`), or `0` for none.
fn parse_outage(text: &str) -> Result<Duration, String> {
    if text.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(text).map_err(|e| format!("{e} (e.g. `60s`, `5m`, or `0`)"))
}

impl RunFlags {
    /// Applies `--run-id`, `--trigger` and `--attempt` to an operation. A
    /// run the flags name without `--trigger` is `scheduled` (the
    /// operation's own trigger when it has one): labelling a run must not
    /// silently make it a `manual` re-run in the record's provenance.
    pub fn apply(&self, op: &mut Operation) {
        if self.run_id.is_none() && self.trigger.is_none() && self.attempt.is_none() {
            return;
        }
        let current = op.run.clone();
        op.run = Some(RunContext {
            run_id: self
                .run_id
                .clone()
                .or_else(|| current.as_ref().map(|r| r.run_id.clone()))
                .unwrap_or_else(|| "cli".to_string()),
            trigger: self
                .trigger
                .or(current.as_ref().map(|r| r.trigger))
                .unwrap_or(Trigger::Scheduled),
            attempt: self
                .attempt
                .or(current.as_ref().map(|r| r.attempt))
                .unwrap_or(1),
        });
    }

    /// Holds `--run-id` to the rules an operation's own `run.run_id` is
    /// held to under `limits` (the policy's: at most 256 bytes by default,
    /// not empty, no control character, a NUL among them); the refusal
    /// names the flag and never repeats the value (it may be long, or
    /// move the cursor).
    pub fn check(&self, limits: &OperationLimits) -> Result<(), String> {
        match &self.run_id {
            None => Ok(()),
            Some(id) => match RunContext::check_run_id("--run-id", id, limits) {
                Ok(_) => Ok(()),
                Err(OpError::Invalid { why, .. }) => Err(format!("--run-id {why}")),
                Err(e) => Err(e.to_string()),
            },
        }
    }

    /// The run these flags name, for operations that name none of their
    /// own (`idem consume`): `None` without any of the three flags; else
    /// `--run-id` (`cli` without it), `--trigger` (`scheduled`, as
    /// [`RunFlags::apply`] has it) and `--attempt` (1).
    pub fn run_context(&self) -> Option<RunContext> {
        if self.run_id.is_none() && self.trigger.is_none() && self.attempt.is_none() {
            return None;
        }
        Some(RunContext {
            run_id: self.run_id.clone().unwrap_or_else(|| "cli".to_string()),
            trigger: self.trigger.unwrap_or(Trigger::Scheduled),
            attempt: self.attempt.unwrap_or(1),
        })
    }

    /// The engine settings these flags ask for.
    pub fn engine_options(&self) -> EngineOptions {
        EngineOptions {
            lease: self.lease,
            max_wait: self.max_wait,
            ..EngineOptions::default()
        }
    }
}

/// The shortest lease `--lease` accepts. A claim's lease is what keeps a
/// second holder out while the command runs; below a second, a heartbeat
/// (every third of the lease) competes with process start-up and one slow
/// store call, and the claim expires under a live command (`0s` would hand
/// out claims that expire at once). The same floor binds a policy's own
/// lease (`lease_s` ≥ 1).
pub const MIN_LEASE: Duration = Duration::from_secs(1);

/// The longest lease `--lease` accepts: a policy's own ceiling (24 h).
pub const MAX_LEASE: Duration = Duration::from_secs(24 * 3600);

/// `--lease DURATION`, within [`MIN_LEASE`]..=[`MAX_LEASE`].
pub fn parse_lease(text: &str) -> Result<Duration, String> {
    let lease = humantime::parse_duration(text).map_err(|e| format!("`{text}`: {e}"))?;
    if lease < MIN_LEASE || lease > MAX_LEASE {
        return Err(format!(
            "a lease of {text} is out of bounds: it must be from 1s to 24h (a claim shorter than a second expires under a running command)"
        ));
    }
    Ok(lease)
}

/// Partitioned ownership, as `idem run` and `idem consume` take it.
#[derive(Args, Debug, Clone, Default)]
pub struct PartitionFlags {
    /// Process only the operations (messages) whose partition this shard owns, as
    /// `I/N`: worker I of workers 0..N-1 (rendezvous hashing of the policy's
    /// partition key).
    #[arg(long, value_name = "I/N", value_parser = parse_shard, conflicts_with_all = ["members", "member"])]
    pub shard: Option<Shard>,
    /// The named workers sharing the job: a file with one name a line, or a
    /// comma-separated list `a,b,c`. Needs `--member`.
    #[arg(long, value_name = "FILE|a,b,c", requires = "member")]
    pub members: Option<String>,
    /// This worker's name among `--members`.
    #[arg(long, value_name = "NAME", requires = "members")]
    pub member: Option<String>,
    /// The group whose membership and ownership epoch the workers share
    /// (default: the policy's namespace; for `idem consume`,
    /// NAMESPACE/consume/STREAM/CONSUMER).
    #[arg(long, value_name = "NAME")]
    pub group: Option<String>,
}

/// `idem run`'s partitioned ownership and job lease.
#[derive(Args, Debug, Clone, Default)]
pub struct OwnershipFlags {
    #[command(flatten)]
    pub partition: PartitionFlags,
    /// Take the job-level lease NAME first; if another live run holds it,
    /// exit at once with status 75 (efficiency only: docs/guide/fleet.md).
    #[arg(long, value_name = "NAME")]
    pub job_lease: Option<String>,
    /// How long the job lease lasts without a heartbeat (renewed every
    /// third of it while the run goes on).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "60s")]
    pub job_lease_ttl: Duration,
}

/// `--shard I/N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This worker.
    pub index: u32,
    /// How many workers.
    pub count: u32,
}

fn parse_shard(text: &str) -> Result<Shard, String> {
    let (i, n) = text
        .split_once('/')
        .ok_or_else(|| format!("`{text}` is not I/N (e.g. 0/4)"))?;
    let index: u32 = i
        .trim()
        .parse()
        .map_err(|_| format!("shard index `{i}` is not a number"))?;
    let count: u32 = n
        .trim()
        .parse()
        .map_err(|_| format!("shard count `{n}` is not a number"))?;
    if count == 0 || index >= count {
        return Err(format!(
            "shard {index}/{count}: the index must be below the count, and the count at least 1"
        ));
    }
    Ok(Shard { index, count })
}

impl PartitionFlags {
    /// The membership and this worker's name, when ownership is asked for:
    /// `--shard I/N` gives members `0..N-1` and names this one `I`.
    fn membership(&self) -> Result<Option<(Vec<String>, String)>, String> {
        if let Some(shard) = self.shard {
            return Ok(Some((
                idem_core::ownership::shard_members(shard.count),
                shard.index.to_string(),
            )));
        }
        let (Some(spec), Some(me)) = (&self.members, &self.member) else {
            if self.group.is_some() {
                return Err("--group needs --shard or --members".into());
            }
            return Ok(None);
        };
        // A path that exists is a file; anything else is a list.
        let text = if std::path::Path::new(spec).is_file() {
            std::fs::read_to_string(spec)
                .map_err(|e| format!("cannot read --members {spec}: {e}"))?
        } else {
            spec.replace(',', "\n")
        };
        let members: Vec<String> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_string)
            .collect();
        if members.is_empty() {
            return Err(format!("--members {spec} names no member"));
        }
        if !members.contains(me) {
            return Err(format!(
                "--member {me} is not one of --members ({})",
                members.join(", ")
            ));
        }
        Ok(Some((members, me.clone())))
    }
}

impl PartitionFlags {
    /// The ownership asked for, its group defaulting to `group`.
    pub fn ownership(&self, group: &str) -> Result<Option<Ownership>, String> {
        Ok(self.membership()?.map(|(members, member)| Ownership {
            group: self.group.clone().unwrap_or_else(|| group.to_string()),
            members,
            member,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_bounded() {
        assert_eq!(parse_lease("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_lease("1s"), Ok(MIN_LEASE));
        assert_eq!(parse_lease("24h"), Ok(MAX_LEASE));
        for bad in ["0s", "500ms", "999ms", "25h", "soon"] {
            assert!(parse_lease(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_max_wait_is_zero_or_up_to_a_policy_s_longest() {
        assert_eq!(parse_max_wait("0"), Ok(Duration::ZERO));
        assert_eq!(parse_max_wait("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_max_wait("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_max_wait("60s"), Ok(MAX_WAIT));
        for bad in ["61s", "1h", "soon", "-1s"] {
            assert!(parse_max_wait(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_run_id_alone_keeps_the_trigger_scheduled() {
        let flags = RunFlags {
            run_id: Some("nightly-7".into()),
            trigger: None,
            attempt: None,
            lease: None,
            permanent_exit_codes: Vec::new(),
            store_outage: Duration::from_secs(60),
            max_wait: None,
        };
        let mut op = Operation::from_json(
            r#"{"kind":"k","tenant":"t","fields":{}}"#,
            &Default::default(),
        )
        .unwrap();
        flags.apply(&mut op);
        let run = op.run.unwrap();
        assert_eq!(
            (run.run_id.as_str(), run.trigger),
            ("nightly-7", Trigger::Scheduled)
        );
    }

    #[test]
    fn a_run_id_is_held_to_an_operations_rules() {
        let flags = |id: &str| RunFlags {
            run_id: Some(id.into()),
            trigger: None,
            attempt: None,
            lease: None,
            permanent_exit_codes: Vec::new(),
            store_outage: Duration::from_secs(60),
            max_wait: None,
        };
        let limits = OperationLimits::default();
        assert_eq!(flags("nightly-7").check(&limits), Ok(()));
        assert_eq!(flags(&"é".repeat(128)).check(&limits), Ok(()));
        for bad in [
            "x".repeat(257),
            "a\u{0}b".into(),
            "a\nidem: forged".into(),
            "\u{1b}[2J".into(),
            String::new(),
        ] {
            let refused = flags(&bad).check(&limits).unwrap_err();
            assert!(refused.starts_with("--run-id "), "{refused}");
            assert!(!refused.contains(&bad) || bad.is_empty(), "{refused}");
        }
        assert_eq!(
            flags("r").run_context(),
            Some(RunContext {
                run_id: "r".into(),
                trigger: Trigger::Scheduled,
                attempt: 1
            })
        );
    }

    #[test]
    fn shards_parse() {
        assert_eq!(parse_shard("1/4"), Ok(Shard { index: 1, count: 4 }));
        for bad in ["4/4", "0/0", "1", "a/2", "1/b", "-1/2"] {
            assert!(parse_shard(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn members_from_a_list_or_a_file() {
        let flags = |members: &str, member: &str| PartitionFlags {
            members: Some(members.into()),
            member: Some(member.into()),
            ..PartitionFlags::default()
        };
        assert_eq!(
            flags("a, b,c", "b").membership(),
            Ok(Some((vec!["a".into(), "b".into(), "c".into()], "b".into())))
        );
        assert!(flags("a,b", "z").membership().is_err());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("members");
        std::fs::write(&file, "# workers\nw1\n\nw2\n").unwrap();
        assert_eq!(
            flags(file.to_str().unwrap(), "w2").membership(),
            Ok(Some((vec!["w1".into(), "w2".into()], "w2".into())))
        );
        let shard = PartitionFlags {
            shard: Some(Shard { index: 2, count: 3 }),
            ..PartitionFlags::default()
        };
        assert_eq!(
            shard.membership(),
            Ok(Some((vec!["0".into(), "1".into(), "2".into()], "2".into())))
        );
        assert_eq!(PartitionFlags::default().membership(), Ok(None));
        let group_alone = PartitionFlags {
            group: Some("billing".into()),
            ..PartitionFlags::default()
        };
        assert!(group_alone.membership().is_err());
    }
}
