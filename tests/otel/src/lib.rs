//! Nothing: this crate holds one integration test (`tests/otel.rs`), the
//! CLI's `otel` feature end to end. See its `Cargo.toml` for why it is a
//! crate of its own.
