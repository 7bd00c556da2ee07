//! Where a job's operations come from. The runner reads them twice: once
//! to check and derive every one (bad input stops the run, or is skipped,
//! before anything is claimed), once to run them. Between the two it keeps
//! each operation's derivation, about 150 bytes ([`super::plan`]), never
//! the operations, so a job of a million operations holds about 150 MB
//! whatever the size of the operations.

use std::sync::Arc;

use idem_core::Operation;

/// One entry a source yields.
#[derive(Debug, Clone)]
pub struct SourceItem {
    /// Where the entry is, for messages: the source's own numbering (a line
    /// number in a file; the index in a list). Positions increase.
    pub position: u64,
    /// The operation, or why the entry is not one.
    pub operation: Result<Operation, Unreadable>,
}

/// An entry that is not an operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// Why, for an operator.
    pub error: String,
    /// The entry as it was read (lossy where it was not UTF-8), to be
    /// written back for a fix.
    pub text: String,
}

/// The entries of one read, in order.
pub type SourceRead = Box<dyn Iterator<Item = SourceItem> + Send + 'static>;

/// A job's operations, readable more than once and the same each time: a
/// file, a list. Reading runs on a blocking thread, so it may do file I/O.
///
/// If a second read yields something other than the first did, the runner
/// notices (each operation's key is checked against the first read), runs
/// nothing more and says so ([`super::Summary::not_run`]).
pub trait OperationSource: Send + Sync + 'static {
    /// A fresh read from the first entry. An error means the source cannot
    /// be read at all (say, the file is gone).
    fn read(&self) -> Result<SourceRead, String>;
}

/// A list of operations held in memory, as [`super::JobRunner::run`] takes
/// them; positions are indexes (from 0).
#[derive(Debug, Clone)]
pub struct ListSource(Arc<Vec<Operation>>);

impl ListSource {
    /// The source of `operations`.
    pub fn new(operations: Vec<Operation>) -> Self {
        ListSource(Arc::new(operations))
    }
}

impl OperationSource for ListSource {
    fn read(&self) -> Result<SourceRead, String> {
        let list = self.0.clone();
        Ok(Box::new((0..list.len()).map(move |i| SourceItem {
            position: i as u64,
            operation: Ok(list[i].clone()),
        })))
    }
}
