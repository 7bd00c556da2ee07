//! A throwaway PostgreSQL server of a test's own, for fault tests that crash
//! and restart it or kill its connections without touching a shared server.

mod find;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use find::{client_bin, effective_uid, server_bin_dir, unprivileged_user};

/// Environment variables the PostgreSQL tools read: a developer's own
/// settings (another host, `sslmode=require`) must not leak into the cluster.
const PG_ENV: &str = "PGHOST PGHOSTADDR PGPORT PGUSER PGDATABASE PGPASSWORD PGPASSFILE \
    PGSERVICE PGSERVICEFILE PGOPTIONS PGSSLMODE PGDATA PGCONNECT_TIMEOUT";

/// A PostgreSQL server in a temporary directory, on a free port of
/// 127.0.0.1, with trust authentication for the user `postgres`. Dropping it
/// stops the server and removes the directory.
pub struct PgCluster {
    /// The directory holding `initdb`, `pg_ctl`, `postgres` (and, usually,
    /// `psql` and `pg_isready`).
    bin: PathBuf,
    /// The data directory is `data/` in it, the socket and `postgres.log`
    /// beside it.
    dir: tempfile::TempDir,
    port: u16,
    /// The user the server runs as when the tests run as root: initdb, pg_ctl
    /// and postgres refuse to run as root.
    run_as: Option<String>,
}

impl PgCluster {
    /// Creates and starts a cluster. Without server binaries it prints
    /// `SKIPPED: <test>: …` and returns `None`, except under `CI=true`, where
    /// a missing service is a failure. Any other failure panics with the
    /// tail of the server's log.
    pub fn start(test: &str) -> Option<PgCluster> {
        let Some(bin) = server_bin_dir() else {
            let ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
            assert!(
                !ci,
                "{test}: no PostgreSQL server binaries (initdb, pg_ctl, postgres), and CI=true: \
                 CI must install them (e.g. apt-get install postgresql)"
            );
            // Straight to stderr: the harness hides `eprintln!` of a passing test.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: {test}: no PostgreSQL server binaries (initdb, pg_ctl)"
            );
            return None;
        };
        let run_as = (effective_uid() == 0).then(unprivileged_user);
        // The server's user must reach the directory through every parent: a
        // root's TMPDIR may be under /root, /tmp never is.
        let parent = run_as
            .as_ref()
            .map_or_else(std::env::temp_dir, |_| "/tmp".into());
        let dir = tempfile::Builder::new()
            .prefix("idem-pg-")
            .tempdir_in(parent);
        let dir = dir.expect("a temporary directory for the cluster");
        let mut cluster = PgCluster {
            bin,
            dir,
            port: 0,
            run_as,
        };
        if let Some(user) = &cluster.run_as {
            let mut chown = Command::new("chown");
            cluster.check(chown.arg(user).arg(cluster.dir.path()), "chown");
        }
        // --no-sync: a throwaway cluster need not survive an OS crash.
        let mut initdb = cluster.server_command("initdb");
        initdb.arg("-D").arg(cluster.data());
        initdb.args([
            "-U",
            "postgres",
            "--auth=trust",
            "--no-locale",
            "-E",
            "UTF8",
            "--no-sync",
        ]);
        cluster.check(&mut initdb, "initdb");
        // Another process may take the free port before the server binds it:
        // try a few.
        for attempt in 1.. {
            cluster.port = free_port();
            let log_start = std::fs::metadata(cluster.log()).map_or(0, |m| m.len());
            if cluster
                .pg_ctl_start()
                .output()
                .is_ok_and(|o| o.status.success())
            {
                cluster.wait_ready();
                return Some(cluster);
            }
            let log = std::fs::read(cluster.log()).unwrap_or_default();
            let new = String::from_utf8_lossy(log.get(log_start as usize..).unwrap_or_default());
            let tail = cluster.log_tail();
            assert!(
                attempt < 5 && new.contains("could not bind"),
                "{test}: the PostgreSQL cluster does not start:\n{tail}"
            );
        }
        unreachable!()
    }

    /// The URL of the cluster's `postgres` database, as the user `postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The port the server listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server as a crash would (`pg_ctl stop -m immediate`): no
    /// checkpoint, clients cut off; the next start recovers from the WAL.
    pub fn crash(&self) {
        self.check(&mut self.stop_immediate(), "pg_ctl stop -m immediate");
    }

    /// Starts the server again (after [`PgCluster::crash`]) and waits until
    /// it accepts connections.
    pub fn start_again(&self) {
        self.check(&mut self.pg_ctl_start(), "pg_ctl start");
        self.wait_ready();
    }

    /// [`PgCluster::crash`], then [`PgCluster::start_again`].
    pub fn restart_immediate(&self) {
        self.crash();
        self.start_again();
    }

    /// Terminates every client connection (but the one it uses itself) and
    /// waits until they are gone; returns how many there were.
    pub fn terminate_backends(&self) -> usize {
        // MATERIALIZED: the victims are chosen before anyone is terminated,
        // so the planner cannot terminate this very backend first.
        let pids = self.psql(
            "WITH victims AS MATERIALIZED (SELECT pid FROM pg_stat_activity \
             WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()) \
             SELECT pid FROM victims WHERE pg_terminate_backend(pid)",
        );
        let pids: Vec<&str> = pids.lines().filter(|l| !l.is_empty()).collect();
        if pids.is_empty() {
            return 0;
        }
        // pg_terminate_backend only signals: wait until the backends have
        // exited, so the caller's next step sees them gone.
        let alive = "SELECT count(*) FROM pg_stat_activity WHERE pid IN";
        let query = format!("{alive} ({})", pids.join(","));
        for _ in 0..400 {
            if self.psql(&query).trim() == "0" {
                return pids.len();
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let tail = self.log_tail();
        panic!("backends {pids:?} were signalled but do not exit\n{tail}");
    }

    /// The last lines of the server's log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.log()).unwrap_or_else(|e| format!("(no log: {e})"));
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(40)..].join("\n");
        format!("--- {} (tail) ---\n{tail}", self.log().display())
    }

    fn stop_immediate(&self) -> Command {
        let mut stop = self.server_command("pg_ctl");
        stop.args(["stop", "-m", "immediate", "-w", "-D"]);
        stop.arg(self.data());
        stop
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    /// `pg_ctl start`, with the options every start needs (they are not in
    /// postgresql.conf, so each start passes them again).
    fn pg_ctl_start(&self) -> Command {
        // fsync=off is safe even for the crash tests: `-m immediate` kills the
        // server, not the OS, and what the server wrote is in the OS page
        // cache, which survives; only an OS crash would lose committed data.
        // synchronous_commit stays on, so a commit is written (if not synced)
        // before it is acknowledged.
        let options = format!(
            "-p {} -k '{}' -c listen_addresses=127.0.0.1 -c fsync=off -c shared_buffers=16MB",
            self.port,
            self.dir.path().display()
        );
        let mut start = self.server_command("pg_ctl");
        start
            .args(["start", "-w", "-t", "60", "-D"])
            .arg(self.data());
        start.arg("-l").arg(self.log()).arg("-o").arg(options);
        start
    }

    /// Waits until the server accepts connections: `pg_ctl -w` waits for
    /// the postmaster to say it is ready; `pg_isready` checks from outside.
    fn wait_ready(&self) {
        let Some(isready) = client_bin(&self.bin, "pg_isready") else {
            return;
        };
        for _ in 0..200 {
            if self
                .client(&isready)
                .arg("-q")
                .status()
                .is_ok_and(|s| s.success())
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let tail = self.log_tail();
        panic!("the PostgreSQL cluster does not accept connections\n{tail}");
    }

    /// Runs one statement with `psql` and returns its unaligned output.
    fn psql(&self, sql: &str) -> String {
        let psql = client_bin(&self.bin, "psql").expect("psql is installed with the server");
        let mut cmd = self.client(&psql);
        cmd.args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql]);
        let out = self.check(&mut cmd, "psql");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A client tool's command, aimed at the cluster: clients may run as root.
    fn client(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.args(["-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-p"]);
        cmd.arg(self.port.to_string());
        clean_env(&mut cmd);
        cmd
    }

    /// A command for a server binary, run as [`PgCluster::run_as`] if set.
    fn server_command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        let mut cmd = match &self.run_as {
            Some(user) => {
                let mut cmd = Command::new("runuser");
                cmd.args(["-u", user, "--"]).arg(program);
                cmd
            }
            None => Command::new(program),
        };
        // The server's user may not be able to enter the test's directory.
        cmd.current_dir(self.dir.path());
        clean_env(&mut cmd);
        cmd
    }

    /// Runs `cmd`; panics with its output and the log's tail unless it succeeds.
    fn check(&self, cmd: &mut Command, what: &str) -> Output {
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("{what} ({cmd:?}) does not run: {e}"));
        if !out.status.success() {
            let (o, e) = (
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
            );
            panic!(
                "{what} failed ({}): {o}{e}\n{}",
                out.status,
                self.log_tail()
            );
        }
        out
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        // Errors ignored: the server may be down already (a test crashed it).
        let _ = self.stop_immediate().output();
        // The TempDir then removes the directory.
    }
}

fn clean_env(cmd: &mut Command) -> &mut Command {
    for var in PG_ENV.split_whitespace() {
        cmd.env_remove(var);
    }
    cmd
}

/// A port nobody listens on now: the kernel's pick for 127.0.0.1:0.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("a bound address").port()
}
