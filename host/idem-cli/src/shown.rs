//! Lines a person reads: what the text faces print may hold what an
//! operation, a message or a person wrote (a field value, a message id, a
//! reason), so every line goes out with its control and bidirectional
//! characters spelt `\u{…}` ([`idem_core::text::escaped`]): an ESC
//! sequence cannot rewrite the screen, a newline cannot forge an `idem:`
//! line, `U+202E` cannot turn "EUR 1000" around. JSON outputs are not
//! passed through here: serde already escapes them as JSON.

/// `println!`, with the line escaped for a terminal.
macro_rules! say {
    () => {
        println!()
    };
    ($($arg:tt)*) => {
        println!("{}", idem_core::text::escaped(&format!($($arg)*)))
    };
}

/// `eprintln!`, with the line escaped for a terminal.
macro_rules! tell {
    ($($arg:tt)*) => {
        eprintln!("{}", idem_core::text::escaped(&format!($($arg)*)))
    };
}

pub(crate) use {say, tell};
