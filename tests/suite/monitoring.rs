//! The alert rules and the dashboard shipped in `examples/monitoring`:
//! the rules pass Prometheus's own `promtool check rules` and their unit
//! tests (`promtool test rules`: each alert below its threshold, then
//! crossing it), every series they read is in a fresh sidecar's first
//! scrape (a rule over a series that does not exist yet never fires), and
//! every metric the dashboard reads is one the operators' guide documents.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use idem_tests::{tool_available, workspace_root};
use serde_json::Value;

use crate::operator_console::TOKEN;
use crate::serve::{Server, TestStore, request};

fn monitoring() -> PathBuf {
    workspace_root().join("examples/monitoring")
}

fn read(name: &str) -> String {
    std::fs::read_to_string(monitoring().join(name))
        .unwrap_or_else(|e| panic!("examples/monitoring/{name}: {e}"))
}

/// The `idem_…` metric names in `text` (a histogram's `_bucket`, `_sum`
/// and `_count` series named by their histogram); recording rules
/// (`idem:…`) are not metrics.
fn metric_names(text: &str) -> BTreeSet<String> {
    let names = regex::Regex::new(r"\bidem_[a-z_]+").unwrap();
    names
        .find_iter(text)
        .map(|m| {
            let name = m.as_str();
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .unwrap_or(name)
                .to_string()
        })
        .collect()
}

/// The expressions of the rules file.
fn rule_expressions() -> String {
    read("idem-rules.yml")
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .skip_while(|l| !l.contains("groups:"))
        .filter(|l| !l.contains("summary:") && !l.contains("description"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_shipped_alert_rules_pass_promtool_and_their_unit_tests() {
    if !tool_available("monitoring::rules", "promtool") {
        return;
    }
    for args in [
        ["check", "rules", "idem-rules.yml"],
        ["test", "rules", "idem-rules.test.yml"],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(monitoring())
            .output()
            .expect("promtool runs");
        assert!(
            out.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn every_series_the_rules_read_is_in_a_fresh_sidecars_first_scrape() {
    let store = TestStore::sqlite();
    let server = Server::start(&store.url, &["--metrics"], &[("IDEM_SERVE_TOKEN", TOKEN)]);
    let auth = vec![("Authorization".to_string(), format!("Bearer {TOKEN}"))];
    let scrape = request(&server.addr, "GET", "/metrics", &auth, b"");
    assert_eq!(scrape.status, 200);
    let text = scrape.text();
    let samples: BTreeSet<String> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect();
    let read = metric_names(&rule_expressions());
    assert!(read.len() >= 4, "the rules read {read:?}");
    for name in &read {
        assert!(
            samples.contains(name),
            "{name}, read by a rule, is not in a fresh scrape (a rule over it would never fire):\n{text}"
        );
    }
    // The counters an alert takes the increase of start at zero, by label.
    for zero in [
        "idem_begin_total{answer=\"error\"} 0",
        "idem_finish_total{ending=\"completed\",result=\"fenced\"} 0",
        "idem_review_oldest_waiting_seconds 0",
    ] {
        assert!(text.contains(zero), "{zero} missing from:\n{text}");
    }
}

#[test]
fn every_metric_the_dashboard_reads_is_documented() {
    let dashboard: Value = serde_json::from_str(&read("idem-dashboard.json")).unwrap();
    let expressions: Vec<String> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(str::to_string))
        .collect();
    assert!(expressions.len() >= 6, "{expressions:?}");
    let guide = std::fs::read_to_string(workspace_root().join("docs/guide/operators.md")).unwrap();
    let documented = metric_names(&guide);
    for name in metric_names(&expressions.join("\n")) {
        assert!(
            documented.contains(&name),
            "the dashboard reads {name}, which docs/guide/operators.md does not document"
        );
    }
    // Recording rules the dashboard reads are the rules file's.
    let rules = read("idem-rules.yml");
    let recorded = regex::Regex::new(r"idem:[a-z_:0-9]+").unwrap();
    for expr in &expressions {
        for rule in recorded.find_iter(expr) {
            assert!(
                rules.contains(&format!("record: {}", rule.as_str())),
                "the dashboard reads {}, which idem-rules.yml does not record",
                rule.as_str()
            );
        }
    }
}
