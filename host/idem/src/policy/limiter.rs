//! Per-evaluation memory and table limits, with the peak recorded for
//! `idem test`'s resource report.

use wasmtime::ResourceLimiter;

/// Raised inside the guest when it asks for more memory than allowed; found
/// again by downcasting the call's error.
#[derive(Debug, thiserror::Error)]
#[error("memory limit exceeded: asked for {requested} bytes, limit {limit}")]
pub(crate) struct MemoryLimitExceeded {
    pub requested: usize,
    pub limit: usize,
}

/// The store data of one evaluation.
pub(crate) struct EvalState {
    pub max_memory: usize,
    pub max_table_elements: usize,
    pub peak_memory: usize,
    /// What the policy said through `diagnostics.failing`, bounded and
    /// escaped: the cause shown if the call fails.
    pub said: Option<String>,
}

impl ResourceLimiter for EvalState {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_memory {
            // An error (not `Ok(false)`) traps at once with a clear cause; a
            // refused grow would surface as a bare `unreachable` from the
            // guest's allocator.
            return Err(wasmtime::Error::new(MemoryLimitExceeded {
                requested: desired,
                limit: self.max_memory,
            }));
        }
        self.peak_memory = self.peak_memory.max(desired);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= self.max_table_elements)
    }
}
