//! `idem serve` as a real process over real HTTP: the harness the other
//! `serve_*` tests start it with ([`Server`], [`TestStore`]); the bearer
//! token; refusing to listen beyond loopback without one; and a graceful
//! shutdown that finishes a call in flight. The whole flow of calls is in
//! `serve_flow.rs`, the OpenAPI document and the fuzz of bad input in
//! `serve_contract.rs`; the client packages, and their pages' examples, in
//! `clients.rs`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use idem_store::{AttemptFilter, Store, StoreOptions};
use idem_store_conformance::{drop_postgres_schema, fresh_schema};
use idem_tests::{idem_bin, policy_path, postgres_url};
use serde_json::{Value, json};

/// A running `idem serve`, killed when dropped (unless it already exited).
pub struct Server {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// The token calls carry, if the server has one.
    pub token: Option<String>,
}

impl Server {
    /// Starts `idem serve --policy billing-charge --store STORE EXTRA…`
    /// (on `--listen 127.0.0.1:0` unless EXTRA says where) and waits for
    /// the line naming its address.
    pub fn start(store: &str, extra: &[&str], env: &[(&str, &str)]) -> Server {
        Server::start_with(store, extra, env, Launch::default())
    }

    /// [`Server::start`], launched as `launch` says.
    pub fn start_with(store: &str, extra: &[&str], env: &[(&str, &str)], launch: Launch) -> Server {
        let mut command = match launch.file_limit {
            // The shell sets the limit and becomes idem serve (same pid).
            Some(limit) => {
                let mut sh = Command::new("sh");
                sh.args(["-c", "ulimit -n \"$0\" && exec \"$@\"", &limit.to_string()])
                    .arg(idem_bin());
                sh
            }
            None => Command::new(idem_bin()),
        };
        command
            .args(["serve", "--no-cache", "--policy"])
            .arg(policy_path("billing-charge"))
            .args(["--store", store])
            .args(extra);
        if !extra.contains(&"--listen") {
            command.args(["--listen", "127.0.0.1:0"]);
        }
        command
            .env_remove("IDEM_SERVE_TOKEN")
            .env_remove("IDEM_LOG")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(match launch.stderr {
                Some(file) => Stdio::from(file),
                None => Stdio::inherit(),
            });
        let mut child = command.spawn().expect("idem serve starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("a line of stdout");
        let addr = line
            .trim()
            .strip_prefix("idem serve: listening on http://")
            .unwrap_or_else(|| panic!("idem serve did not say where it listens: {line:?}"))
            .to_string();
        let token = env
            .iter()
            .find(|(k, _)| *k == "IDEM_SERVE_TOKEN")
            .map(|(_, v)| v.to_string());
        Server { child, addr, token }
    }

    /// `POST path` with a JSON body (and the token, when there is one).
    pub fn post(&self, path: &str, body: &Value) -> Reply {
        let mut headers = vec![("Content-Type".to_string(), "application/json".to_string())];
        if let Some(t) = &self.token {
            headers.push(("Authorization".into(), format!("Bearer {t}")));
        }
        request(
            &self.addr,
            "POST",
            path,
            &headers,
            body.to_string().as_bytes(),
        )
    }

    /// `POST path`, expecting 200; its JSON.
    pub fn ok(&self, path: &str, body: &Value) -> Value {
        let reply = self.post(path, body);
        assert_eq!(reply.status, 200, "{path} {body}: {}", reply.text());
        reply.json()
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal to the server.
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {sig}");
    }

    /// Waits for the server to exit; its status.
    pub fn wait(&mut self) -> std::process::ExitStatus {
        self.child.wait().expect("reap idem serve")
    }

    /// Waits for the server to exit, failing the test if it is still
    /// running after `bound` (a hang, not a slow exit: give it ample time).
    pub fn wait_at_most(&mut self, bound: Duration, why: &str) -> std::process::ExitStatus {
        let started = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("poll idem serve") {
                return status;
            }
            assert!(
                started.elapsed() < bound,
                "idem serve is still running: {why}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// How [`Server::start_with`] launches `idem serve`.
#[derive(Default)]
pub struct Launch {
    /// Where its stderr goes (default: the test's).
    pub stderr: Option<std::fs::File>,
    /// An open-file limit (soft and hard) to run it under.
    pub file_limit: Option<u32>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Reply {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    /// Checks that this is an RFC 9457 problem with `status`, and returns
    /// it.
    pub fn problem(&self, status: u16) -> Value {
        assert_eq!(self.status, status, "{}", self.text());
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{}",
            self.text()
        );
        let p = self.json();
        assert_eq!(p["status"], status, "{p}");
        assert!(
            p["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("tag:idem.invalid,2026:problem/")),
            "{p}"
        );
        assert!(p["title"].as_str().is_some_and(|t| !t.is_empty()), "{p}");
        assert!(p["detail"].as_str().is_some_and(|t| !t.is_empty()), "{p}");
        p
    }
}

/// One HTTP/1.1 request on its own connection (`Connection: close`).
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Reply {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    send_raw(addr, &bytes)
}

/// Writes `bytes` as they are and reads the answer until the server closes.
pub fn send_raw(addr: &str, bytes: &[u8]) -> Reply {
    let mut stream = TcpStream::connect(addr).expect("connect to idem serve");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    stream.write_all(bytes).expect("send the request");
    read_reply(stream)
}

/// Reads one answer from `stream` until the server closes it.
pub fn read_reply(mut stream: TcpStream) -> Reply {
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read the answer");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP head in {:?}", String::from_utf8_lossy(&raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if let Some(len) = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
    {
        body.truncate(len);
    }
    Reply {
        status,
        headers,
        body,
    }
}

/// A billing charge for `invoice`.
pub fn op(invoice: &str, amount: &str) -> Value {
    json!({"kind": "charge", "tenant": "acme", "fields": {
        "customer": "c1", "billing_period": "2026-11", "invoice_id": invoice,
        "amount": amount, "currency": "EUR"}})
}

/// A store for one test: a SQLite file in a temporary directory, or a
/// fresh PostgreSQL schema (dropped at the end).
pub struct TestStore {
    /// The store URL.
    pub url: String,
    /// The temporary directory (SQLite file, token files).
    pub dir: tempfile::TempDir,
    postgres: bool,
}

impl TestStore {
    /// A SQLite file.
    pub fn sqlite() -> TestStore {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("idem.db").display());
        TestStore {
            url,
            dir,
            postgres: false,
        }
    }

    /// A fresh schema in the test database.
    pub fn postgres(base: &str) -> TestStore {
        let sep = if base.contains('?') { '&' } else { '?' };
        TestStore {
            url: format!("{base}{sep}idem_schema={}&idem_pool_size=4", fresh_schema()),
            dir: tempfile::tempdir().unwrap(),
            postgres: true,
        }
    }

    /// SQLite, and PostgreSQL when the environment names a database.
    pub fn each(test: &str) -> Vec<TestStore> {
        let mut stores = vec![TestStore::sqlite()];
        if let Some(url) = postgres_url(test) {
            stores.push(TestStore::postgres(&url));
        }
        stores
    }

    /// Opens the store in this process, to look at what it holds.
    pub fn open(&self) -> (tokio::runtime::Runtime, Store) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let store = rt
            .block_on(idem_store::open(&self.url, StoreOptions::default()))
            .expect("open the test store");
        (rt, store)
    }

    /// Every attempt-log event, oldest first.
    pub fn events(&self) -> Vec<String> {
        let (rt, store) = self.open();
        rt.block_on(store.records().attempts(AttemptFilter::default()))
            .unwrap()
            .iter()
            .map(|e| e.event.as_str().to_string())
            .collect()
    }
}

impl Drop for TestStore {
    fn drop(&mut self) {
        if self.postgres {
            drop_postgres_schema(&self.url);
        }
    }
}

#[test]
fn the_token_is_required_when_set() {
    let store = TestStore::sqlite();
    let token_file = store.dir.path().join("token");
    std::fs::write(&token_file, "t0ken-from-a-file\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let mut server = Server::start(
        &store.url,
        &["--token-file", token_file.to_str().unwrap()],
        &[],
    );
    let body = json!({"operation": op("i1", "100")}).to_string();
    let json_type = ("Content-Type".to_string(), "application/json".to_string());
    for auth in [
        None,
        Some("Bearer wrong"),
        Some("Basic dDBrZW4="),
        Some("Bearer"),
    ] {
        let mut headers = vec![json_type.clone()];
        if let Some(a) = auth {
            headers.push(("Authorization".into(), a.into()));
        }
        let reply = request(
            &server.addr,
            "POST",
            "/v1/derive",
            &headers,
            body.as_bytes(),
        );
        reply.problem(401);
        assert_eq!(
            reply.header("www-authenticate"),
            Some("Bearer realm=\"idem\"")
        );
    }
    server.token = Some("t0ken-from-a-file".into());
    server.ok("/v1/derive", &json!({"operation": op("i1", "100")}));
    drop(server);

    // From the environment, on every address.
    let env = [("IDEM_SERVE_TOKEN", "t0ken-from-env")];
    let mut local = Server::start(&store.url, &["--listen", "0.0.0.0:0"], &env);
    assert!(local.addr.starts_with("0.0.0.0:"), "{}", local.addr);
    local.addr = local.addr.replace("0.0.0.0", "127.0.0.1");
    local.ok("/v1/derive", &json!({"operation": op("i1", "100")}));
    local.token = Some("t0ken-from-a-file".into());
    local
        .post("/v1/derive", &json!({"operation": op("i1", "100")}))
        .problem(401);
}

#[test]
fn no_token_no_listening_beyond_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("idem.db");
    let out = Command::new(idem_bin())
        .args(["serve", "--no-cache", "--policy"])
        .arg(policy_path("billing-charge"))
        .args(["--store", &format!("sqlite:{}", db.display())])
        .args(["--listen", "0.0.0.0:0"])
        .env_remove("IDEM_SERVE_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("refusing to listen on 0.0.0.0:0 without a token")
            && stderr.contains("--token-file"),
        "{stderr}"
    );
    assert!(!db.exists(), "nothing was opened");
    // An empty token file is refused too, naming the file.
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    let out = Command::new(idem_bin())
        .args(["serve", "--no-cache", "--policy"])
        .arg(policy_path("billing-charge"))
        .args(["--store", &format!("sqlite:{}", db.display())])
        .args(["--token-file", empty.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the token is empty"), "{stderr}");
}

// A call running when SIGTERM comes (its claim waits for a store another
// program locks) finishes and is answered; the sidecar then exits 0 with
// every answer in the attempt log. (A request whose body is still
// arriving is answered 503 at once instead: serve_connections.rs.)
#[test]
fn sigterm_lets_the_call_in_flight_finish() {
    let store = TestStore::sqlite();
    let log_path = store.dir.path().join("stderr.log");
    let mut server = Server::start_with(
        &format!("{}?busy_timeout_ms=600000", store.url),
        &[],
        &[],
        Launch {
            stderr: Some(std::fs::File::create(&log_path).unwrap()),
            ..Launch::default()
        },
    );
    // A replay just before the end: its answer is queued for the log.
    let begun = server.ok("/v1/begin", &json!({"operation": op("i1", "100")}));
    server.ok(
        "/v1/complete",
        &json!({"key": begun["key"], "fence": begun["fence"], "body": "r"}),
    );
    assert_eq!(
        server.ok("/v1/begin", &json!({"operation": op("i1", "100")}))["answer"],
        "replay"
    );

    // A call in flight: the whole request is sent while another program
    // holds the store's write lock, then the server is told to stop, then
    // the lock is let go.
    let lock = rusqlite::Connection::open(store.url.strip_prefix("sqlite:").unwrap()).unwrap();
    lock.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let body = json!({"operation": op("i2", "100")}).to_string();
    let mut stream = TcpStream::connect(&server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let head = format!(
        "POST /v1/begin HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        server.addr,
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.flush().unwrap();
    // Time for the request to be read and reach the lock.
    std::thread::sleep(Duration::from_millis(1000));
    server.signal("-TERM");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&log_path)
        .unwrap()
        .contains("idem: stopping")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "idem serve never said it stops"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    lock.execute_batch("ROLLBACK").unwrap();
    let reply = read_reply(stream);
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["answer"], "execute");

    let status = server.wait();
    assert_eq!(status.code(), Some(0), "a graceful stop exits 0");
    // A new connection is refused once it stopped.
    assert!(TcpStream::connect(&server.addr).is_err());
    let mut events = store.events();
    events.sort();
    assert_eq!(
        events,
        ["completed", "executed", "executed", "replayed"],
        "every answer is in the attempt log"
    );
}
