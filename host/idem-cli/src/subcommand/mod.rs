//! One module per subcommand: its flags (`…Args`) and its `run`, which
//! returns the exit status (see [`crate::exit`]) or a
//! [`Failure`](crate::exit::Failure).

pub mod build;
pub mod cache;
pub mod consume;
pub mod demo;
pub mod describe;
pub mod diff;
pub mod exec;
pub mod gc;
pub mod inspect;
pub mod key;
pub mod migrate;
pub mod new;
pub mod policy;
pub mod report;
pub mod resolve;
pub mod review;
pub mod run;
pub mod serve;
pub mod test;
