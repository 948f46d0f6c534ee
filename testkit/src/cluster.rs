//! A JetStream cluster of real `nats-server`s on 127.0.0.1 (Debian's package
//! `nats-server`), for tests that put faults on one: each node its own configuration file,
//! store directory (in one temporary directory), client, route and monitoring port (free
//! ports), `server_name` `n0`, `n1`, …, and routes to every other node. Every wait is on a
//! condition read from the nodes' monitoring endpoints, bounded by [`LIMIT`]; every node is
//! killed when the cluster is dropped, also when a test fails.
//!
//! [`Cluster::start_linked`] puts a [`Link`] (a TCP forwarder the test can cut) on every
//! route between two nodes, so that a node can be cut off from the others and healed
//! ([`Cluster::cut_off`], [`Cluster::heal`]): a partition on one machine, without network
//! namespaces. Clients (the host, viewers, the monitoring endpoints) reach every node
//! directly.

use crate::{Link, Proc, LIMIT};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The `nats-server` binary (Debian's package `nats-server`; `.ci/run` installs it).
///
/// # Panics
/// It is not installed.
pub fn nats_bin() -> PathBuf {
    find_nats().unwrap_or_else(|| {
        panic!("nats-server is not installed: run scripts/test, which installs it")
    })
}

/// The `nats-server` binary, if installed.
pub fn find_nats() -> Option<PathBuf> {
    [
        "/usr/sbin/nats-server",
        "/usr/bin/nats-server",
        "/usr/local/bin/nats-server",
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// One node of a [`Cluster`].
pub struct Node {
    /// Its `server_name`: `n0`, `n1`, …
    pub name: String,
    /// The port clients connect to.
    pub port: u16,
    /// The port of its routes to the other nodes.
    pub route_port: u16,
    /// The port of its monitoring endpoints (`/jsz`, `/routez`, `/healthz`).
    pub http_port: u16,
    /// Its JetStream store directory.
    pub store: PathBuf,
    conf: PathBuf,
    proc: Option<Proc>,
    paused: bool,
    cut: bool,
    log: String,
}

impl Node {
    /// `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Its process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(Proc::pid)
    }

    /// Running (started and not killed; a paused node is running).
    pub fn running(&self) -> bool {
        self.proc.is_some()
    }

    /// What the node printed (its log) in the runs that have ended ([`Cluster::kill`],
    /// [`Cluster::stop`]).
    pub fn log(&self) -> &str {
        &self.log
    }

    fn spawn(&mut self) {
        self.proc = Some(Proc::spawn(
            Command::new(nats_bin()).arg("-c").arg(&self.conf),
        ));
        self.paused = false;
    }
}

/// An N-node JetStream cluster on 127.0.0.1; every node is killed when it is dropped.
pub struct Cluster {
    pub nodes: Vec<Node>,
    dir: tempfile::TempDir,
    /// With [`Cluster::start_linked`]: the link each route from node `.0` to node `.1`
    /// goes through, and the link every node advertises to the others, cut for good (a
    /// route a node learns of by gossip would bypass the links: it is refused, and the
    /// configured routes, through the links, make the mesh).
    links: Vec<(usize, usize, Link)>,
    _sink: Option<Link>,
}

/// `GET path` on 127.0.0.1:`port`, the body as JSON; `None` when the node does not answer
/// or the body is not JSON.
pub fn monitor(port: u16, path: &str) -> Option<serde_json::Value> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf);
    let (_, body) = text.split_once("\r\n\r\n")?;
    serde_json::from_str(body).ok()
}

impl Cluster {
    /// Starts `n` nodes and waits until they form the cluster and JetStream is ready on
    /// each ([`Cluster::wait_ready`]).
    ///
    /// # Panics
    /// A node cannot be started, or the cluster is not ready within [`LIMIT`].
    pub fn start(n: usize) -> Cluster {
        Cluster::start_with(n, false).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Cluster::start`] that says why instead of panicking (for a program, not a test):
    /// nats-server is not installed, a file cannot be made, or the cluster is not ready
    /// within [`LIMIT`] (what each node last said). Every node started is killed then.
    ///
    /// # Errors
    /// That sentence.
    pub fn try_start(n: usize) -> Result<Cluster, String> {
        Cluster::start_with(n, false)
    }

    /// [`Cluster::start`] with every route between two nodes through a [`Link`], so that
    /// [`Cluster::cut_off`] can cut a node off from the others.
    ///
    /// # Panics
    /// As [`Cluster::start`].
    pub fn start_linked(n: usize) -> Cluster {
        Cluster::start_with(n, true).unwrap_or_else(|e| panic!("{e}"))
    }

    fn start_with(n: usize, linked: bool) -> Result<Cluster, String> {
        find_nats().ok_or("nats-server is not installed (apt-get install nats-server)")?;
        let dir =
            tempfile::tempdir().map_err(|e| format!("cannot make the cluster's directory: {e}"))?;
        // The nodes' ports stay bound here until the nodes start, so that the links'
        // listeners (bound meanwhile) cannot be given one of them.
        let held: Vec<std::net::TcpListener> = (0..3 * n)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("cannot find a free port on 127.0.0.1: {e}"))?;
        let port = |k: usize| held[k].local_addr().map(|a| a.port()).unwrap_or(0);
        let ports: Vec<(u16, u16, u16)> = (0..n)
            .map(|i| (port(3 * i), port(3 * i + 1), port(3 * i + 2)))
            .collect();
        let mut links = Vec::new();
        let sink = linked.then(|| {
            let sink = Link::start(0);
            sink.cut();
            sink
        });
        if linked {
            for i in 0..n {
                for (j, p) in ports.iter().enumerate() {
                    if j != i {
                        links.push((i, j, Link::start(p.1)));
                    }
                }
            }
        }
        let mut nodes = Vec::new();
        for (i, &(port, route_port, http_port)) in ports.iter().enumerate() {
            let name = format!("n{i}");
            let store = dir.path().join(&name);
            std::fs::create_dir_all(&store)
                .map_err(|e| format!("cannot make {}: {e}", store.display()))?;
            let routes: Vec<String> = if linked {
                links
                    .iter()
                    .filter(|l| l.0 == i)
                    .map(|l| format!("\"nats-route://127.0.0.1:{}\"", l.2.port()))
                    .collect()
            } else {
                ports
                    .iter()
                    .enumerate()
                    .filter(|&(j, _)| j != i)
                    .map(|(_, p)| format!("\"nats-route://127.0.0.1:{}\"", p.1))
                    .collect()
            };
            let advertise = sink
                .as_ref()
                .map(|s| format!("  advertise: \"127.0.0.1:{}\"\n", s.port()))
                .unwrap_or_default();
            let conf = dir.path().join(format!("{name}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "server_name: {name}\n\
                     listen: \"127.0.0.1:{port}\"\n\
                     http: \"127.0.0.1:{http_port}\"\n\
                     jetstream {{\n  store_dir: \"{}\"\n  max_memory_store: 64MB\n  max_file_store: 1GB\n}}\n\
                     cluster {{\n  name: ostm\n  listen: \"127.0.0.1:{route_port}\"\n{advertise}  routes: [{}]\n}}\n",
                    store.display(),
                    routes.join(", ")
                ),
            )
            .map_err(|e| format!("cannot write {}: {e}", conf.display()))?;
            nodes.push(Node {
                name,
                port,
                route_port,
                http_port,
                store,
                conf,
                proc: None,
                paused: false,
                cut: false,
                log: String::new(),
            });
        }
        drop(held);
        for node in &mut nodes {
            node.spawn();
        }
        let c = Cluster {
            nodes,
            dir,
            links,
            _sink: sink,
        };
        c.ready()?;
        Ok(c)
    }

    /// The client URLs of every node, joined by commas (`nats://127.0.0.1:P0,nats://…`):
    /// a server list as both binaries take it.
    pub fn urls(&self) -> String {
        let all: Vec<String> = self.nodes.iter().map(Node::url).collect();
        all.join(",")
    }

    /// The client URLs of the nodes `order` names, in that order, joined by commas.
    pub fn urls_of(&self, order: &[usize]) -> String {
        let all: Vec<String> = order.iter().map(|&i| self.nodes[i].url()).collect();
        all.join(",")
    }

    /// The directory the configurations and stores are in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Waits until every running node that is neither paused nor cut off has routes to
    /// every other such node, knows the JetStream meta leader, and says it is healthy
    /// (`/healthz`).
    ///
    /// # Panics
    /// Not within [`LIMIT`]: the panic gives what each node last said.
    pub fn wait_ready(&self) {
        self.ready().unwrap_or_else(|e| panic!("{e}"));
    }

    /// The running nodes that are neither paused nor cut off: those that route to each
    /// other.
    fn up(&self) -> Vec<&Node> {
        self.nodes
            .iter()
            .filter(|n| n.running() && !n.paused && !n.cut)
            .collect()
    }

    /// [`Cluster::wait_ready`], its failure a sentence.
    fn ready(&self) -> Result<(), String> {
        let up = self.up();
        let deadline = Instant::now() + LIMIT;
        loop {
            let mut why = Vec::new();
            for n in &up {
                let routes = routes(n);
                let jsz = monitor(n.http_port, "/jsz");
                let leader = jsz
                    .as_ref()
                    .and_then(|j| j["meta_cluster"]["leader"].as_str())
                    .unwrap_or("")
                    .to_string();
                let healthz = monitor(n.http_port, "/healthz");
                let health = healthz
                    .as_ref()
                    .and_then(|h| h["status"].as_str().map(str::to_string))
                    .unwrap_or_default();
                let unhealthy = healthz
                    .as_ref()
                    .and_then(|h| h["error"].as_str().map(|e| format!(" ({e})")))
                    .unwrap_or_default();
                if (routes as usize) < up.len() - 1 || leader.is_empty() || health != "ok" {
                    why.push(format!(
                        "{}: {routes} routes, meta leader {leader:?}, health {health:?}{unhealthy}",
                        n.name
                    ));
                }
            }
            if why.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("the cluster is not ready: {}", why.join("; ")));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The name of the stream's leader and of its replicas, as a running node that hosts
    /// the stream reports it (`/jsz?accounts=true&streams=true`); `None` while none does.
    /// A node cut off from the others is not asked (it may still take itself for the
    /// leader).
    pub fn stream_cluster(&self, stream: &str) -> Option<(String, Vec<String>)> {
        for i in (0..self.nodes.len()).filter(|&i| {
            let n = &self.nodes[i];
            n.running() && !n.paused && !n.cut
        }) {
            let Some(s) = self.stream_detail(i, stream) else {
                continue;
            };
            let Some(leader) = s["cluster"]["leader"].as_str() else {
                continue;
            };
            if leader.is_empty() {
                continue;
            }
            let replicas = s["cluster"]["replicas"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .filter_map(|r| r["name"].as_str().map(str::to_string))
                .collect();
            return Some((leader.to_string(), replicas));
        }
        None
    }

    /// The stream as node `i` holds it (`/jsz?accounts=true&streams=true`: its
    /// `config`, `cluster` and `state`, the state being that node's own copy: `messages`,
    /// `first_seq`, `last_seq`, `num_deleted`); `None` when the node does not answer or
    /// holds no copy.
    pub fn stream_detail(&self, i: usize, stream: &str) -> Option<serde_json::Value> {
        let j = monitor(self.nodes[i].http_port, "/jsz?accounts=true&streams=true")?;
        let accounts = j["account_details"].as_array()?;
        accounts
            .iter()
            .filter_map(|a| a["stream_detail"].as_array())
            .flatten()
            .find(|s| s["name"].as_str() == Some(stream))
            .cloned()
    }

    /// Waits until the stream has a leader among the running nodes, and returns that
    /// node's index.
    ///
    /// # Panics
    /// Not within [`LIMIT`].
    pub fn wait_stream_leader(&self, stream: &str) -> usize {
        let deadline = Instant::now() + LIMIT;
        loop {
            if let Some((leader, _)) = self.stream_cluster(stream) {
                if let Some(i) = self
                    .nodes
                    .iter()
                    .position(|n| n.name == leader && n.running() && !n.paused && !n.cut)
                {
                    return i;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the stream {stream} has no leader among the running nodes"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Kills node `i` (SIGKILL), keeping its configuration and store.
    pub fn kill(&mut self, i: usize) {
        if let Some(p) = self.nodes[i].proc.take() {
            let out = p.kill();
            let log = &mut self.nodes[i].log;
            log.push_str(&String::from_utf8_lossy(&out.stdout));
            log.push_str(&String::from_utf8_lossy(&out.stderr));
        }
        self.nodes[i].paused = false;
    }

    /// Pauses node `i` (SIGSTOP): its connections stay open and it does nothing until
    /// [`Cluster::resume`].
    pub fn pause(&mut self, i: usize) {
        if let Some(p) = &self.nodes[i].proc {
            p.signal("STOP");
            self.nodes[i].paused = true;
        }
    }

    /// Lets a paused node run again (SIGCONT).
    pub fn resume(&mut self, i: usize) {
        if let Some(p) = &self.nodes[i].proc {
            p.signal("CONT");
            self.nodes[i].paused = false;
        }
    }

    /// Starts node `i` again (killing it first if it runs) with the same configuration
    /// and store, and waits until the cluster is ready ([`Cluster::wait_ready`]).
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.nodes[i].spawn();
        self.wait_ready();
    }

    /// Kills every node at once (SIGKILL), then starts them all again on their
    /// configurations and stores, and waits until the cluster is ready.
    pub fn restart_all(&mut self) {
        self.stop();
        for node in &mut self.nodes {
            node.spawn();
        }
        self.wait_ready();
    }

    /// Starts node `i` again after [`Cluster::kill`] (on its configuration and store),
    /// and waits until the cluster is ready. Its store may have been changed meanwhile
    /// ([`Cluster::truncate_stream`], [`Cluster::flip_byte`]).
    pub fn start_again(&mut self, i: usize) {
        assert!(!self.nodes[i].running(), "{} runs", self.nodes[i].name);
        self.nodes[i].spawn();
        self.wait_ready();
    }

    /// Cuts node `i` off from the others: every route between it and another node is
    /// dropped, and every new one refused, until [`Cluster::heal`]; returns once the node
    /// reports no route. Its clients stay connected to it.
    ///
    /// # Panics
    /// The cluster was not started with [`Cluster::start_linked`].
    pub fn cut_off(&mut self, i: usize) {
        assert!(
            !self.links.is_empty(),
            "cut a node off in a cluster started with Cluster::start_linked"
        );
        for l in self.links.iter().filter(|l| l.0 == i || l.1 == i) {
            l.2.cut();
        }
        self.nodes[i].cut = true;
        // Cut off for real: the node has no route left (none bypasses the links).
        let deadline = Instant::now() + LIMIT;
        loop {
            let routes =
                monitor(self.nodes[i].http_port, "/routez").and_then(|r| r["num_routes"].as_u64());
            if routes == Some(0) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} still has {routes:?} routes after its links were cut",
                self.nodes[i].name
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Lets node `i` reach the others again after [`Cluster::cut_off`] (its routes are
    /// made again as the nodes retry them, about once a second), and waits until every
    /// running node has its routes to every other again. Not until it is healthy: a node
    /// back from a partition catches up with the stream first, and how long that takes
    /// (or whether it ends) is for the test to report, not to wait on.
    ///
    /// # Panics
    /// The routes are not all back within [`LIMIT`].
    pub fn heal(&mut self, i: usize) {
        for l in self.links.iter().filter(|l| l.0 == i || l.1 == i) {
            l.2.heal();
        }
        self.nodes[i].cut = false;
        let up = self.up();
        let deadline = Instant::now() + LIMIT;
        loop {
            let short: Vec<String> = up
                .iter()
                .filter_map(|n| {
                    let routes = routes(n);
                    ((routes as usize) < up.len() - 1)
                        .then(|| format!("{}: {routes} routes", n.name))
                })
                .collect();
            if short.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the routes are not back after the heal: {}",
                short.join("; ")
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Kills every node.
    pub fn stop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }

    /// The files of the stream's messages in node `i`'s store
    /// (`jetstream/$G/streams/STREAM/msgs/*.blk`), sorted.
    pub fn stream_files(&self, i: usize, stream: &str) -> Vec<PathBuf> {
        let dir = self.nodes[i]
            .store
            .join("jetstream")
            .join("$G")
            .join("streams")
            .join(stream)
            .join("msgs");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|d| {
                d.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "blk"))
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        files
    }

    /// Cuts each of the stream's message files in node `i`'s store to `keep` of its
    /// length (0.0 to 1.0), as a crash in the middle of a write leaves it. The node must
    /// be down.
    ///
    /// # Panics
    /// The node runs, or holds no file of the stream.
    pub fn truncate_stream(&self, i: usize, stream: &str, keep: f64) {
        assert!(
            !self.nodes[i].running(),
            "truncate a node's files while it is down"
        );
        let files = self.stream_files(i, stream);
        assert!(
            !files.is_empty(),
            "{} holds no file of {stream}",
            self.nodes[i].name
        );
        for f in files {
            let len = std::fs::metadata(&f).expect("a stream file").len();
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&f)
                .expect("open a stream file");
            file.set_len((len as f64 * keep) as u64)
                .expect("truncate a stream file");
        }
    }

    /// Flips every bit of the byte at `at` of the stream's message files (their middle,
    /// when `at` is past the end) in node `i`'s store. The node must be down. Returns the
    /// files changed.
    ///
    /// # Panics
    /// The node runs, or holds no file of the stream.
    pub fn flip_byte(&self, i: usize, stream: &str, at: Option<u64>) -> Vec<PathBuf> {
        assert!(
            !self.nodes[i].running(),
            "corrupt a node's files while it is down"
        );
        let files = self.stream_files(i, stream);
        assert!(
            !files.is_empty(),
            "{} holds no file of {stream}",
            self.nodes[i].name
        );
        let mut changed = Vec::new();
        for f in files {
            let mut bytes = std::fs::read(&f).expect("a stream file");
            if bytes.is_empty() {
                continue;
            }
            let k = at
                .filter(|&a| (a as usize) < bytes.len())
                .map_or(bytes.len() / 2, |a| a as usize);
            bytes[k] ^= 0xff;
            std::fs::write(&f, bytes).expect("write a stream file");
            changed.push(f);
        }
        changed
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The routes node `n` has (its monitor's `/routez`), 0 when it does not answer.
fn routes(n: &Node) -> u64 {
    monitor(n.http_port, "/routez")
        .and_then(|r| r["num_routes"].as_u64())
        .unwrap_or(0)
}
