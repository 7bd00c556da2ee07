//! Record stores (work in progress).
