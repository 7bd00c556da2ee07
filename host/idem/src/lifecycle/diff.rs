//! `idem diff` as a library: every operation (from a corpus, or kept with a
//! store's records) derived with two versions of a policy, and each key,
//! fingerprint or partition that changes, grouped by the material that
//! explains it.

use std::collections::BTreeMap;

use idem_core::{KeyedDerivation, Operation, OperationLimits};
use idem_store::{KeptOperation, ListFilter, Record, Store, StoreError};
use serde::Serialize;

use super::material;
use crate::policy::LoadedPolicy;

/// Examples kept per group (and per reason a record cannot be diffed).
pub const EXAMPLES: usize = 5;

// Exhaustive on purpose (not `#[non_exhaustive]`): what a key derivation yields (key,
// fingerprint, partition) and which side refused.
/// What changes between the two versions for one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Aspect {
    /// The key (a record within retention is no longer found: the effect
    /// would run again).
    Key,
    /// The fingerprint (a duplicate is taken for a conflicting request).
    Fingerprint,
    /// The partition (another worker owns the operation).
    Partition,
    /// The new version refuses the operation, or fails on it.
    NewRefuses,
    /// The old version refused the operation (or failed); the new derives
    /// a key.
    OldRefused,
}

/// What a derivation gave, in brief.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Derived {
    /// The key, hex.
    pub key: String,
    /// The fingerprint, hex.
    pub fingerprint: String,
    /// The partition.
    pub partition: String,
}

impl Derived {
    fn of(k: &KeyedDerivation) -> Self {
        Derived {
            key: k.key.to_hex(),
            fingerprint: k.fingerprint.to_hex(),
            partition: k.partition.clone(),
        }
    }
}

/// One operation of a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Example {
    /// Where the operation came from: `line N`, or the record's
    /// `namespace/key`.
    pub source: String,
    /// Before: what the store holds (a record), else the old version's
    /// derivation; `None` when the old version refused.
    pub old: Option<Derived>,
    /// After: the new version's derivation; `None` when it refused.
    pub new: Option<Derived>,
}

/// Operations changed the same way, for the same reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Group {
    /// What changes.
    pub changes: Vec<Aspect>,
    /// Why: the named parts that changed (see `idem key --explain`), or
    /// the refusal.
    pub explanation: Vec<String>,
    /// How many operations.
    pub count: usize,
    /// The first few.
    pub examples: Vec<Example>,
}

/// Records whose key cannot be derived again, by reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotDiffable {
    /// Why.
    pub reason: String,
    /// How many records.
    pub count: usize,
    /// The first few (`namespace/key`).
    pub examples: Vec<String>,
}

/// A policy version, as the report names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Version {
    /// `sha256:…`.
    pub digest: String,
    /// The policy's name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Its namespace.
    pub namespace: String,
}

impl Version {
    fn of(p: &LoadedPolicy) -> Self {
        let info = p.info();
        Version {
            digest: p.digest().to_string(),
            name: info.name.clone(),
            version: info.version.clone(),
            namespace: info.namespace.clone(),
        }
    }
}

/// What changes between two versions over a set of operations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiffReport {
    /// The version in use.
    pub old: Version,
    /// The candidate.
    pub new: Version,
    /// Operations derived with both.
    pub compared: usize,
    /// Of those, how many got the same key, fingerprint and partition.
    pub unchanged: usize,
    /// How many keys change (every one within retention: a record the new
    /// version would not find, so its effect would run again).
    pub key_changes: usize,
    /// The changes, most frequent first.
    pub groups: Vec<Group>,
    /// Records that could not be compared, by reason.
    pub not_diffable: Vec<NotDiffable>,
}

impl DiffReport {
    /// Whether an upgrade keeps every key (the exit status of `idem diff`).
    pub fn keeps_keys(&self) -> bool {
        self.key_changes == 0
    }
}

/// Collects the comparison one operation at a time.
pub struct Differ<'a> {
    old: &'a LoadedPolicy,
    new: &'a LoadedPolicy,
    compared: usize,
    unchanged: usize,
    key_changes: usize,
    groups: BTreeMap<(Vec<Aspect>, Vec<String>), Group>,
    not_diffable: BTreeMap<String, NotDiffable>,
}

/// A derivation, a refusal or a failure, as text for a refusal.
type Outcome = Result<KeyedDerivation, String>;

fn derive(policy: &LoadedPolicy, op: &Operation, now_ms: u64) -> Outcome {
    match policy.derive(op, now_ms) {
        Ok(evaluated) => evaluated
            .value
            .map_err(|refusal| format!("refuses it ({})", refusal.code.as_str())),
        Err(failed) => Err(format!("fails on it ({failed})")),
    }
}

impl<'a> Differ<'a> {
    /// A comparison of `old` (in use) with `new` (the candidate).
    pub fn new(old: &'a LoadedPolicy, new: &'a LoadedPolicy) -> Self {
        Differ {
            old,
            new,
            compared: 0,
            unchanged: 0,
            key_changes: 0,
            groups: BTreeMap::new(),
            not_diffable: BTreeMap::new(),
        }
    }

    /// Compares one operation from a corpus, at logical time `now_ms`
    /// (when the operation gives none).
    pub fn operation(&mut self, source: String, op: &Operation, now_ms: u64) {
        let old = derive(self.old, op, now_ms);
        let new = derive(self.new, op, now_ms);
        let before = old.as_ref().ok().map(Derived::of);
        self.compare(source, &old, before, &new, Vec::new());
    }

    /// Compares one record of a store: its stored key, fingerprint and
    /// partition against what the new version derives from its kept
    /// operation (the old version's derivation explains the change). A
    /// record without a usable operation is counted as not diffable.
    pub fn record(&mut self, record: &Record) {
        let source = format!(
            "{}/{}",
            record.key.namespace,
            &record.key.digest.to_hex()[..16]
        );
        let text = match &record.operation {
            None => {
                return self.cannot(source, "written before stores kept operations".into());
            }
            Some(KeptOperation::NotKept(why)) => return self.cannot(source, why.to_string()),
            Some(KeptOperation::Kept(text)) => text,
        };
        let op = match Operation::from_json(text, &OperationLimits::default()) {
            Ok(op) => op,
            Err(e) => return self.cannot(source, format!("its kept operation does not read: {e}")),
        };
        // The time the claim derived at, as near as the record knows.
        let now_ms = op.now_ms.unwrap_or(record.created_ms);
        let old = derive(self.old, &op, now_ms);
        let new = derive(self.new, &op, now_ms);
        let stored = Derived {
            key: record.key.digest.to_hex(),
            fingerprint: record.fingerprint.to_hex(),
            partition: record.partition.clone(),
        };
        let mut notes = Vec::new();
        match &old {
            Ok(k) if k.key != record.key.digest || k.namespace != record.key.namespace => {
                notes.push(format!(
                    "the old version does not derive the stored key either (the record is {}'s)",
                    record.policy_digest
                ));
            }
            _ => {}
        }
        self.compare(source, &old, Some(stored), &new, notes);
    }

    fn cannot(&mut self, source: String, reason: String) {
        let entry = self
            .not_diffable
            .entry(reason.clone())
            .or_insert(NotDiffable {
                reason,
                count: 0,
                examples: Vec::new(),
            });
        entry.count += 1;
        if entry.examples.len() < EXAMPLES {
            entry.examples.push(source);
        }
    }

    fn compare(
        &mut self,
        source: String,
        old: &Outcome,
        before: Option<Derived>,
        new: &Outcome,
        mut explanation: Vec<String>,
    ) {
        self.compared += 1;
        let mut changes = Vec::new();
        match (old, new) {
            (_, Err(why)) => {
                changes.push(Aspect::NewRefuses);
                explanation.push(format!("the new version {why}"));
            }
            (Err(why), Ok(_)) if before.is_none() => {
                changes.push(Aspect::OldRefused);
                explanation.push(format!("the old version {why}"));
            }
            (old, Ok(n)) => {
                let b = before.as_ref().expect("a record, or the old derivation");
                if b.key != n.key.to_hex() {
                    changes.push(Aspect::Key);
                }
                if b.fingerprint != n.fingerprint.to_hex() {
                    changes.push(Aspect::Fingerprint);
                }
                if b.partition != n.partition {
                    changes.push(Aspect::Partition);
                }
                match old {
                    Ok(o) => {
                        explanation.extend(material::explain(o, n));
                        if o.partition != n.partition {
                            explanation.push("the partition is derived another way".into());
                        }
                    }
                    Err(why) => explanation.push(format!("the old version {why}")),
                }
            }
        }
        if changes.is_empty() {
            self.unchanged += 1;
            return;
        }
        if changes.contains(&Aspect::Key) {
            self.key_changes += 1;
        }
        if explanation.is_empty() {
            explanation.push("the material is the same: the key encoding differs".into());
        }
        let example = Example {
            source,
            old: before,
            new: new.as_ref().ok().map(Derived::of),
        };
        let group = self
            .groups
            .entry((changes.clone(), explanation.clone()))
            .or_insert(Group {
                changes,
                explanation,
                count: 0,
                examples: Vec::new(),
            });
        group.count += 1;
        if group.examples.len() < EXAMPLES {
            group.examples.push(example);
        }
    }

    /// The report.
    pub fn finish(self) -> DiffReport {
        let mut groups: Vec<Group> = self.groups.into_values().collect();
        groups.sort_by(|a, b| b.count.cmp(&a.count).then(a.changes.cmp(&b.changes)));
        let mut not_diffable: Vec<NotDiffable> = self.not_diffable.into_values().collect();
        not_diffable.sort_by_key(|n| std::cmp::Reverse(n.count));
        DiffReport {
            old: Version::of(self.old),
            new: Version::of(self.new),
            compared: self.compared,
            unchanged: self.unchanged,
            key_changes: self.key_changes,
            groups,
            not_diffable,
        }
    }
}

/// Compares every live record of `old`'s namespace in `store` (every record
/// within retention: past it, a record counts as absent) with what `new`
/// derives from its kept operation.
pub async fn diff_store(
    old: &LoadedPolicy,
    new: &LoadedPolicy,
    store: &Store,
) -> Result<DiffReport, StoreError> {
    let records = store
        .records()
        .list(ListFilter {
            namespace: Some(old.info().namespace.clone()),
            ..ListFilter::default()
        })
        .await?;
    let mut differ = Differ::new(old, new);
    for view in &records {
        differ.record(&view.record);
    }
    Ok(differ.finish())
}
