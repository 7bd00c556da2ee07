//! The book's Rust snippets, compiled as doctests: every ```rust block of
//! the pages below is a doctest of this crate (`cargo test -p idem-tests
//! --doc`, and so part of `cargo test --workspace`). What a reader need not
//! see (a function to hold the snippet, the stand-ins for their own code)
//! is written as hidden lines (`# `), which the book hides as rustdoc does.
//! A snippet that needs a policy, a store or a server is `no_run`: it must
//! compile, and the examples and suites run the same calls.
//!
//! The README's snippets are excerpts of these (checked by the suite's
//! `docs::readme_snippets`), so they compile too.

#[doc = include_str!("../../docs/guide/library.md")]
pub struct Library;

#[doc = include_str!("../../docs/guide/http-layer.md")]
pub struct HttpLayer;

#[doc = include_str!("../../docs/guide/effects-in-the-store.md")]
pub struct EffectsInTheStore;

#[doc = include_str!("../../docs/guide/nightly-jobs.md")]
pub struct NightlyJobs;

#[doc = include_str!("../../docs/guide/policy-lifecycle.md")]
pub struct PolicyLifecycle;

#[doc = include_str!("../../docs/guide/review.md")]
pub struct Review;

#[doc = include_str!("../../docs/guide/the-downstream-gate.md")]
pub struct TheDownstreamGate;

#[doc = include_str!("../../docs/guide/why-did-it-run-twice.md")]
pub struct WhyDidItRunTwice;

#[doc = include_str!("../../docs/guide/writing-a-policy.md")]
pub struct WritingAPolicy;

#[doc = include_str!("../../docs/guide/stores.md")]
pub struct Stores;
