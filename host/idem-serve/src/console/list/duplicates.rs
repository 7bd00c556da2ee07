//! The front page's last section: the duplicates by cause over the window
//! chosen (the same analysis as `idem report`), each cause with one example
//! key linking to its record's page.

use std::fmt::Write as _;

use idem::forensics::{Analysis, Cause};

use super::super::page::{self, esc};
use super::{Asked, WINDOWS};

pub(super) fn section(out: &mut String, asked: &Asked, a: &Analysis) {
    let _ = write!(
        out,
        "<h2 id=\"duplicates\">Duplicates by cause, last {}</h2><nav>",
        asked.window.0
    );
    for (name, _) in WINDOWS {
        if name == asked.window.0 {
            let _ = write!(out, "<b>{name}</b> ");
        } else {
            let _ = write!(
                out,
                "<a href=\"{}\">{name}</a> ",
                esc(&asked.href(asked.which, name, None))
            );
        }
    }
    out.push_str("</nav>\n");
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    let _ = writeln!(
        out,
        "<p class=\"meta\">{} attempt-log entr{} about {} key{}.</p>",
        a.entries,
        if a.entries == 1 { "y" } else { "ies" },
        a.keys,
        plural(a.keys)
    );
    if a.duplicates.is_empty() {
        out.push_str("<p>No duplicates in this window: every key was asked for once.</p>\n");
    }
    for (cause, n) in a.causes() {
        let _ = write!(
            out,
            "<p class=\"cause\"><span class=\"n\">{n}</span>{}{}</p>",
            esc(cause.describe()),
            if cause == Cause::KeyDrift {
                " <strong>(not prevented)</strong>"
            } else {
                ""
            }
        );
        if let Some(d) = a.duplicates.iter().find(|d| d.cause == cause) {
            let hex = d.key.digest.to_hex();
            let _ = writeln!(
                out,
                "<p class=\"meta\">e.g. <a class=\"key\" href=\"{}\">{}</a>: {}</p>",
                page::record_href(&hex),
                &hex[..16],
                esc(&d.explanation)
            );
        }
    }
}
