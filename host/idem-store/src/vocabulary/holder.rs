//! Who holds a record: the holder's provenance (run, host, pid, or the
//! name a caller gave itself), kept for `idem inspect` and the attempt log,
//! and the token of the claim attempt, which lets a claim sent again
//! recognise its own record.

use std::fmt;

/// Who holds (or last held) a record: provenance for `idem inspect`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Holder {
    /// The run carrying the operation, when there is one.
    pub run_id: Option<String>,
    /// Why the run happened (`scheduled`, `retry`, `manual`, `client`).
    pub trigger: Option<String>,
    /// The run's own attempt number (not the record's attempts).
    pub attempt: Option<u32>,
    /// Host name of the holding process; for a holder that named itself
    /// ([`Holder::named()`], `pid` 0), that name.
    pub host: String,
    /// Process id of the holding process; 0 for a holder that named itself
    /// (no process a store's caller runs as has pid 0), or for a process
    /// whose pid an attempt-log entry does not give.
    pub pid: u32,
    /// Whether it is a caller that named itself ([`Holder::named()`]): `host`
    /// is then that name. The stores keep it as pid 0 (no schema change);
    /// a record or an entry read back with pid 0 is one, and an entry whose
    /// pid is NULL is a process whose pid was not written.
    pub named: bool,
    /// The claim attempt's own identity ([`HolderToken::new`]), stored with
    /// the record: a claim sent again after its answer was lost (the
    /// connection dropped after the commit) finds its own record and goes
    /// on as that claim, where any other claimer finds a record in
    /// progress. `None` claims nothing of the kind. Never part of the
    /// attempt log, which says who, not which attempt.
    pub token: Option<HolderToken>,
}

impl Holder {
    /// This process: its host name and pid, no run context, no token.
    pub fn this_process() -> Self {
        Holder {
            run_id: None,
            trigger: None,
            attempt: None,
            host: host_name(),
            pid: std::process::id(),
            named: false,
            token: None,
        }
    }

    /// A caller that named itself, such as a client of `idem serve`
    /// (`billing@web-3:4242`): the attempt log and every view show that
    /// name instead of the process that wrote the claim for it (the
    /// sidecar). Kept in the same columns as a process, as `host` with pid
    /// 0, so every store keeps it without a schema change.
    pub fn named(caller: &CallerName) -> Self {
        Holder {
            run_id: None,
            trigger: None,
            attempt: None,
            host: caller.0.clone(),
            pid: 0,
            named: true,
            token: None,
        }
    }

    /// Who it is, as a person reads it: `host:pid` for a process, the
    /// name for a holder that named itself.
    pub fn who(&self) -> String {
        if self.named {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.pid)
        }
    }

    /// Whether it is a caller that named itself ([`Holder::named()`]).
    pub fn is_named(&self) -> bool {
        self.named
    }

    /// The same holder without its token: what the attempt log keeps.
    pub fn provenance(&self) -> Holder {
        Holder {
            token: None,
            ..self.clone()
        }
    }

    /// Whether `other` is this very claim attempt: both carry a token and
    /// it is the same.
    pub fn is_same_attempt(&self, other: &Holder) -> bool {
        self.token.is_some() && self.token == other.token
    }
}

/// The name a caller gives itself (`service@host:pid` by the clients'
/// default): untrusted text, so held to a bound and refused with control
/// characters; views still spell out bidirectional characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CallerName(String);

impl CallerName {
    /// The longest name kept, in bytes.
    pub const MAX_BYTES: usize = 128;

    /// `text` as a caller's name, or why it cannot be one: empty, longer
    /// than [`CallerName::MAX_BYTES`], blank at either end, or holding a
    /// control character (a NUL, a newline, an escape).
    pub fn parse(text: &str) -> Result<CallerName, String> {
        if text.is_empty() {
            return Err("is empty".into());
        }
        if text.len() > Self::MAX_BYTES {
            return Err(format!(
                "is {} bytes; at most {} are kept",
                text.len(),
                Self::MAX_BYTES
            ));
        }
        if text.trim() != text {
            return Err("starts or ends with a space".into());
        }
        if let Some(c) = text.chars().find(|c| c.is_control()) {
            return Err(format!("holds the control character U+{:04X}", c as u32));
        }
        Ok(CallerName(text.to_string()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CallerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One claim attempt's identity: 16 bytes, unique to the attempt (a random
/// number drawn once per process, then a counter), kept in the record's
/// `holder_token` column. Send the same request again (with the same token)
/// when a claim's answer was lost; build a new one for a new attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HolderToken(pub [u8; 16]);

impl HolderToken {
    /// A token no other attempt has: this process's random half and the
    /// next value of its counter.
    pub fn new() -> Self {
        use std::hash::BuildHasher;
        use std::sync::atomic::{AtomicU64, Ordering};
        static PROCESS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        static NEXT: AtomicU64 = AtomicU64::new(0);
        // std's RandomState is keyed from the operating system's random
        // source: hashing the pid and the time with it gives a process half
        // that no other process (here or on another host) draws, without a
        // dependency for it.
        let process = *PROCESS.get_or_init(|| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            std::collections::hash_map::RandomState::new().hash_one((std::process::id(), now))
        });
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&process.to_be_bytes());
        bytes[8..].copy_from_slice(&n.to_be_bytes());
        HolderToken(bytes)
    }

    /// The token read back from a column; `None` unless it is 16 bytes.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(HolderToken)
    }
}

impl Default for HolderToken {
    fn default() -> Self {
        HolderToken::new()
    }
}

impl fmt::Display for HolderToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// Best-effort host name without a dependency: `HOSTNAME`, then the kernel's.
/// Read once: every claim records it, and it does not change under us.
fn host_name() -> String {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        if let Ok(name) = std::env::var("HOSTNAME")
            && !name.is_empty()
        {
            return name;
        }
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "unknown".to_string())
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_holder_reads_as_its_name_and_a_process_as_host_and_pid() {
        let name = CallerName::parse("billing@web-3:4242").unwrap();
        let named = Holder::named(&name);
        assert!(named.is_named());
        assert_eq!(named.who(), "billing@web-3:4242");
        let process = Holder::this_process();
        assert!(!process.is_named());
        assert_eq!(process.who(), format!("{}:{}", process.host, process.pid));
    }

    #[test]
    fn a_caller_name_is_bounded_and_free_of_control_characters() {
        assert!(CallerName::parse("billing@web-3:4242").is_ok());
        assert!(CallerName::parse(&"é".repeat(64)).is_ok());
        for bad in ["", " x", "x ", "a\nb", "a\u{0}b", "a\u{1b}[2Jb"] {
            assert!(CallerName::parse(bad).is_err(), "{bad:?}");
        }
        assert!(CallerName::parse(&"x".repeat(CallerName::MAX_BYTES + 1)).is_err());
    }
}
