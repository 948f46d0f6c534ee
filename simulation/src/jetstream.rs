//! A simulated JetStream (docs/reliability.md, "The simulated JetStream"): one session's
//! stream on a small cluster of nodes, deterministic, on the simulation's clock.
//!
//! What it keeps of the real server: stream sequences from 1, contiguous; the duplicate
//! window keyed by `Nats-Msg-Id` (a repeat within it is acknowledged as a duplicate with
//! the first one's sequence and stored once); retention by age and by bytes (the oldest
//! discarded); a direct get of the last message on a subject; consumers reading from a
//! sequence, in order, only what is committed. The cluster: `nodes` nodes (1 or 3), the
//! stream on `replicas` of them, a leader that appends and acknowledges once a majority of
//! the replicas holds the message, followers that copy the leader's log at their own pace
//! (a follower whose log parts from the leader's drops its own from there, as Raft's
//! does). Each node flushes its log to disk every `flush_every` ms (lazy fsync): a node
//! killed loses what it had not flushed. A leader killed gives way to the replica with
//! the longest log once a majority is up again; messages only it held are gone, and if
//! every node dies at once, messages already acknowledged can be gone too. Those are the
//! losses the end-to-end hashes must expose: [`Cluster::lost_acked`] records each one.
//!
//! No clock, no randomness: the driver says what time it is and which faults happen.

use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};

/// How the stream and its cluster are set up.
#[derive(Debug, Clone)]
pub struct Config {
    /// Nodes in the cluster (1 or 3).
    pub nodes: usize,
    /// Nodes the stream is on (at most `nodes`).
    pub replicas: usize,
    /// Messages older than this are discarded (ms).
    pub max_age: u64,
    /// The stream's bytes at most: the oldest messages are discarded past it.
    pub max_bytes: u64,
    /// A publish repeating an id within this is a duplicate (ms).
    pub duplicate_window: u64,
    /// A node writes its log to disk every this many ms (lazy fsync).
    pub flush_every: u64,
    /// A leader is elected this long after the last one was lost (ms).
    pub election: u64,
    /// Messages a follower copies from the leader each time it is asked to catch up.
    pub follow_rate: usize,
}

/// One stored message.
#[derive(Debug, Clone)]
pub struct Entry {
    pub seq: u64,
    pub subject: String,
    pub id: String,
    pub payload: Bytes,
    /// When the leader stored it (ms).
    pub at: u64,
    /// Which append made it: two logs hold the same message at a sequence only if this
    /// is the same.
    uid: u64,
}

impl Entry {
    fn size(&self) -> u64 {
        (self.payload.len() + self.subject.len() + self.id.len()) as u64
    }
}

/// What a publish came to, for the publisher's driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    /// The publisher's token for the message.
    pub token: u64,
    /// Its stream sequence.
    pub seq: u64,
    /// A repeat of a message stored within the duplicate window: not stored again.
    pub duplicate: bool,
}

/// An acknowledged message the cluster lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostAck {
    pub seq: u64,
    pub id: String,
}

#[derive(Debug, Default)]
struct Node {
    log: VecDeque<Entry>,
    /// The log's bytes.
    bytes: u64,
    /// The last sequence discarded by age or bytes: the stream's sequences go on from
    /// there when every message has gone.
    floor: u64,
    /// The last sequence written to disk.
    flushed: u64,
    last_flush: u64,
    up: bool,
    /// Killed for good.
    gone: bool,
    /// Down until then, to be started again.
    restart_at: Option<u64>,
}

impl Node {
    fn last_seq(&self) -> u64 {
        self.log.back().map_or(self.floor, |e| e.seq)
    }

    fn get(&self, seq: u64) -> Option<&Entry> {
        let first = self.log.front()?.seq;
        self.log.get(usize::try_from(seq.checked_sub(first)?).ok()?)
    }

    /// What was not flushed is lost.
    fn lose_unflushed(&mut self) {
        while self.log.back().is_some_and(|e| e.seq > self.flushed) {
            self.pop_back();
        }
    }

    fn push_back(&mut self, e: Entry) {
        self.bytes += e.size();
        self.log.push_back(e);
    }

    fn pop_back(&mut self) {
        if let Some(e) = self.log.pop_back() {
            self.bytes -= e.size();
        }
    }

    fn pop_front(&mut self) {
        if let Some(e) = self.log.pop_front() {
            self.bytes -= e.size();
            self.floor = self.floor.max(e.seq);
        }
    }
}

/// The stream on its cluster: see the module's documentation.
#[derive(Debug)]
pub struct Cluster {
    pub cfg: Config,
    nodes: Vec<Node>,
    /// The nodes the stream is on.
    replicas: Vec<usize>,
    leader: Option<usize>,
    /// No leader until then (an election under way).
    election_at: Option<u64>,
    /// The highest sequence a majority holds.
    commit: u64,
    next_uid: u64,
    /// The leader's duplicate window: id → (sequence, when stored).
    ids: BTreeMap<String, (u64, u64)>,
    /// Publishes stored, waiting for a majority: (token, sequence, uid, duplicate).
    pending: Vec<(u64, u64, u64, bool)>,
    /// Acknowledgements ready for the driver.
    acks: VecDeque<Ack>,
    /// Messages acknowledged: sequence → (uid, id).
    acked: BTreeMap<u64, (u64, String)>,
    /// Acknowledged messages lost (found at each election), in order.
    pub lost_acked: Vec<LostAck>,
    /// A broken rule of the stream itself, or of its publisher (an id published again
    /// with other content).
    pub violations: Vec<String>,
}

impl Cluster {
    /// A cluster with every node up, the stream on nodes `first_replica..` (wrapping),
    /// its leader the first of them.
    pub fn new(cfg: Config, first_replica: usize) -> Cluster {
        let n = cfg.nodes.max(1);
        let replicas: Vec<usize> = (0..cfg.replicas.clamp(1, n))
            .map(|k| (first_replica + k) % n)
            .collect();
        let nodes = (0..n)
            .map(|_| Node {
                up: true,
                ..Node::default()
            })
            .collect();
        Cluster {
            leader: replicas.first().copied(),
            cfg,
            nodes,
            replicas,
            election_at: None,
            commit: 0,
            next_uid: 1,
            ids: BTreeMap::new(),
            pending: Vec::new(),
            acks: VecDeque::new(),
            acked: BTreeMap::new(),
            lost_acked: Vec::new(),
            violations: Vec::new(),
        }
    }

    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_up(&self, node: usize) -> bool {
        self.nodes.get(node).is_some_and(|n| n.up)
    }

    pub fn is_gone(&self, node: usize) -> bool {
        self.nodes.get(node).is_some_and(|n| n.gone)
    }

    pub fn leader(&self) -> Option<usize> {
        self.leader
    }

    pub fn replicas(&self) -> &[usize] {
        &self.replicas
    }

    /// Whether the stream takes publishes and serves reads now.
    pub fn available(&self) -> bool {
        self.leader.is_some()
    }

    fn majority(&self) -> usize {
        self.replicas.len() / 2 + 1
    }

    fn replicas_up(&self) -> usize {
        self.replicas.iter().filter(|&&r| self.nodes[r].up).count()
    }

    /// Replicas up, or to be started again (not gone for good).
    fn replicas_left(&self) -> usize {
        self.replicas
            .iter()
            .filter(|&&r| !self.nodes[r].gone)
            .count()
    }

    /// Whether killing `node` for good leaves the stream a majority of replicas.
    pub fn can_lose_for_good(&self, node: usize) -> bool {
        let left = self.replicas_left() - usize::from(self.replicas.contains(&node));
        !self.nodes[node].gone && left >= self.majority()
    }

    /// A publish reaching the cluster at `now`. Without a leader nobody answers (the
    /// publisher's acknowledgement times out). A repeat of an id within the duplicate
    /// window is acknowledged with the first one's sequence, not stored again; an id
    /// repeated with other content is a broken rule of the publisher.
    pub fn publish(&mut self, now: u64, token: u64, subject: &str, id: &str, payload: Bytes) {
        let Some(l) = self.leader else {
            return;
        };
        if let Some(&(seq, at)) = self.ids.get(id) {
            if now.saturating_sub(at) < self.cfg.duplicate_window {
                if let Some(e) = self.nodes[l].get(seq) {
                    if e.payload != payload || e.subject != subject {
                        self.violations.push(format!(
                            "the message id {id} was published again with other content (stored at sequence {seq} on {}, now on {subject}): the stream's duplicate window drops it",
                            e.subject
                        ));
                    }
                    let uid = e.uid;
                    self.pending.push((token, seq, uid, true));
                    self.settle();
                    return;
                }
            }
        }
        let seq = self.nodes[l].last_seq() + 1;
        let uid = self.next_uid;
        self.next_uid += 1;
        self.nodes[l].push_back(Entry {
            seq,
            subject: subject.to_string(),
            id: id.to_string(),
            payload,
            at: now,
            uid,
        });
        self.ids.insert(id.to_string(), (seq, now));
        self.pending.push((token, seq, uid, false));
        self.settle();
    }

    /// The acknowledgements ready, in the order they were made.
    pub fn poll_ack(&mut self) -> Option<Ack> {
        self.acks.pop_front()
    }

    /// Time passes to `now`: nodes due start again, an election due is held, followers
    /// copy the leader's log, the commit moves and its acknowledgements go out, logs are
    /// flushed when due and aged or trimmed to the stream's limits.
    pub fn tick(&mut self, now: u64) {
        for i in 0..self.nodes.len() {
            let n = &mut self.nodes[i];
            if !n.up && !n.gone && n.restart_at.is_some_and(|t| now >= t) {
                n.up = true;
                n.restart_at = None;
                n.last_flush = now;
            }
        }
        // A leader that no longer reaches a majority of the replicas steps down.
        if self.leader.is_some() && self.replicas_up() < self.majority() {
            self.leader = None;
            self.pending.clear();
            self.election_at = Some(now + self.cfg.election);
        }
        if self.leader.is_none() && self.election_at.is_some_and(|t| now >= t) {
            self.elect(now);
        }
        if let Some(l) = self.leader {
            for k in 0..self.replicas.len() {
                let r = self.replicas[k];
                if r != l && self.nodes[r].up {
                    self.follow(l, r);
                }
            }
            self.settle();
        }
        let (age, bytes) = (self.cfg.max_age, self.cfg.max_bytes);
        for n in self.nodes.iter_mut().filter(|n| n.up) {
            if now >= n.last_flush + self.cfg.flush_every {
                n.flushed = n.last_seq();
                n.last_flush = now;
            }
            while let Some(e) = n.log.front() {
                if now.saturating_sub(e.at) < age && n.bytes <= bytes {
                    break;
                }
                n.pop_front();
            }
        }
        // Acknowledged messages the leader discarded are gone by the stream's rules.
        if let Some(l) = self.leader {
            let floor = self.nodes[l].floor;
            if self
                .acked
                .first_key_value()
                .is_some_and(|(&s, _)| s <= floor)
            {
                self.acked = self.acked.split_off(&(floor + 1));
            }
        }
    }

    /// Follower `f` copies the leader `l`'s log: from where their logs part, at most
    /// `follow_rate` messages.
    fn follow(&mut self, l: usize, f: usize) {
        let (lead, fol) = if l < f {
            let (a, b) = self.nodes.split_at_mut(f);
            (&a[l], &mut b[0])
        } else {
            let (a, b) = self.nodes.split_at_mut(l);
            (&b[0], &mut a[f])
        };
        // Where the logs part: the follower drops its own from there.
        while let Some(e) = fol.log.back() {
            match lead.get(e.seq) {
                Some(le) if le.uid == e.uid => break,
                None if e.seq <= lead.floor => {
                    // The leader discarded it by age or bytes: the follower starts over.
                    fol.log.clear();
                    fol.bytes = 0;
                    break;
                }
                _ => {
                    fol.pop_back();
                }
            }
        }
        fol.flushed = fol.flushed.min(fol.last_seq());
        let from = if fol.log.is_empty() {
            fol.floor = fol.floor.max(lead.floor);
            lead.log.front().map_or(lead.floor + 1, |e| e.seq)
        } else {
            fol.last_seq() + 1
        };
        for seq in from..from + self.cfg.follow_rate as u64 {
            match lead.get(seq) {
                Some(e) => fol.push_back(e.clone()),
                None => break,
            }
        }
    }

    /// The commit: the highest sequence a majority of the replicas up holds, as the
    /// leader holds it; the acknowledgements of what it covers.
    fn settle(&mut self) {
        let Some(l) = self.leader else {
            return;
        };
        let lead = &self.nodes[l];
        let last = lead.last_seq();
        let majority = self.majority();
        let mut commit = self.commit.min(last);
        for seq in (commit + 1..=last).rev() {
            let uid = lead.get(seq).map(|e| e.uid);
            let holders = self
                .replicas
                .iter()
                .filter(|&&r| self.nodes[r].up && self.nodes[r].get(seq).map(|e| e.uid) == uid)
                .count();
            if holders >= majority {
                commit = seq;
                break;
            }
        }
        self.commit = self.commit.max(commit);
        let commit = self.commit;
        let lead = &self.nodes[l];
        let mut keep = Vec::new();
        for (token, seq, uid, duplicate) in std::mem::take(&mut self.pending) {
            match lead.get(seq) {
                Some(e) if e.uid == uid && seq <= commit => {
                    self.acked.insert(seq, (uid, e.id.clone()));
                    self.acks.push_back(Ack {
                        token,
                        seq,
                        duplicate,
                    });
                }
                Some(e) if e.uid == uid => keep.push((token, seq, uid, duplicate)),
                // Gone from the leader's log: never acknowledged (the publisher times out).
                _ => {}
            }
        }
        self.pending = keep;
    }

    /// A leader from the replicas up, once a majority is: the one with the longest log.
    /// Acknowledged messages it does not hold are lost.
    fn elect(&mut self, now: u64) {
        let up: Vec<usize> = self
            .replicas
            .iter()
            .copied()
            .filter(|&r| self.nodes[r].up)
            .collect();
        if up.len() < self.majority() {
            return;
        }
        let Some(&l) = up
            .iter()
            .max_by_key(|&&r| (self.nodes[r].last_seq(), usize::MAX - r))
        else {
            return;
        };
        self.leader = Some(l);
        self.election_at = None;
        let lead = &self.nodes[l];
        // What it discarded by age or bytes is not lost.
        let lost: Vec<u64> = self
            .acked
            .iter()
            .filter(|(&seq, (uid, _))| {
                seq > lead.floor && lead.get(seq).map(|e| e.uid) != Some(*uid)
            })
            .map(|(&seq, _)| seq)
            .collect();
        for seq in lost {
            if let Some((_, id)) = self.acked.remove(&seq) {
                self.lost_acked.push(LostAck { seq, id });
            }
        }
        self.commit = self.commit.min(lead.last_seq());
        // The duplicate window is the new leader's: rebuilt from the ids it stores.
        self.ids = lead
            .log
            .iter()
            .filter(|e| now.saturating_sub(e.at) < self.cfg.duplicate_window)
            .map(|e| (e.id.clone(), (e.seq, e.at)))
            .collect();
        self.pending.clear();
        self.settle();
    }

    /// Node `node` is killed at `now`, to start again at `restart_at`, or never (`None`:
    /// gone for good). With `power_cut` it loses what it had not flushed (a process killed
    /// keeps what it wrote in the machine's page cache).
    pub fn kill(&mut self, node: usize, now: u64, restart_at: Option<u64>, power_cut: bool) {
        let Some(n) = self.nodes.get_mut(node) else {
            return;
        };
        if n.gone {
            return;
        }
        if n.up && power_cut {
            n.lose_unflushed();
        }
        n.up = false;
        n.restart_at = restart_at;
        n.gone = restart_at.is_none();
        if self.leader == Some(node) {
            self.leader = None;
            self.pending.clear();
            self.election_at = Some(now + self.cfg.election);
        }
    }

    /// A direct get of the last committed message on `subject`: its sequence and payload.
    pub fn last_on(&self, subject: &str) -> Option<(u64, Bytes)> {
        let lead = &self.nodes[self.leader?];
        lead.log
            .iter()
            .rev()
            .filter(|e| e.seq <= self.commit)
            .find(|e| e.subject == subject)
            .map(|e| (e.seq, e.payload.clone()))
    }

    /// What a consumer reading from `from` is delivered, at most `max` committed messages
    /// in order (from the oldest kept, if `from` was discarded).
    pub fn read(&self, from: u64, max: usize) -> Vec<&Entry> {
        let Some(l) = self.leader else {
            return Vec::new();
        };
        let lead = &self.nodes[l];
        let first = lead.log.front().map_or(0, |e| e.seq);
        let start = usize::try_from(from.max(first) - first).unwrap_or(usize::MAX);
        lead.log
            .range(start.min(lead.log.len())..)
            .take(max)
            .take_while(|e| e.seq <= self.commit)
            .collect()
    }

    /// The stream's last sequence, as its leader (or, with none, the longest log) has it:
    /// what a stream's information says.
    pub fn last_seq(&self) -> u64 {
        match self.leader {
            Some(l) => self.nodes[l].last_seq(),
            None => self.nodes.iter().map(Node::last_seq).max().unwrap_or(0),
        }
    }

    /// The messages the leader holds now, in order (for the checks).
    pub fn stored(&self) -> impl Iterator<Item = &Entry> {
        self.leader
            .map(|l| self.nodes[l].log.iter())
            .into_iter()
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(nodes: usize, replicas: usize) -> Config {
        Config {
            nodes,
            replicas,
            max_age: 60_000,
            max_bytes: 1 << 20,
            duplicate_window: 10_000,
            flush_every: 1_000,
            election: 100,
            follow_rate: 4,
        }
    }

    fn acks(c: &mut Cluster) -> Vec<(u64, u64, bool)> {
        std::iter::from_fn(|| c.poll_ack())
            .map(|a| (a.token, a.seq, a.duplicate))
            .collect()
    }

    fn p(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn a_repeat_within_the_window_is_acknowledged_once_stored() {
        let mut c = Cluster::new(cfg(1, 1), 0);
        c.publish(0, 1, "rec", "a", p("x"));
        c.publish(1, 2, "rec", "a", p("x"));
        c.publish(2, 3, "rec", "b", p("y"));
        assert_eq!(acks(&mut c), [(1, 1, false), (2, 1, true), (3, 2, false)]);
        assert_eq!(c.read(1, 10).len(), 2);
        assert!(c.violations.is_empty());
        // After the window the same id is a new message.
        c.publish(20_000, 4, "rec", "a", p("x"));
        assert_eq!(acks(&mut c), [(4, 3, false)]);
        // An id published again with other content is a broken rule.
        c.publish(20_001, 5, "key", "a", p("z"));
        assert_eq!(c.violations.len(), 1);
    }

    #[test]
    fn acknowledged_once_a_majority_holds_it_and_read_only_then() {
        let mut c = Cluster::new(cfg(3, 3), 0);
        for t in 0..6 {
            c.publish(0, t, "rec", &format!("m{t}"), p("x"));
        }
        assert!(acks(&mut c).is_empty());
        assert!(c.read(1, 10).is_empty());
        c.tick(1);
        // Followers copied four each: a majority holds 1..4.
        assert_eq!(acks(&mut c).len(), 4);
        assert_eq!(c.read(1, 10).len(), 4);
        assert_eq!(c.last_on("rec").map(|(s, _)| s), Some(4));
        c.tick(2);
        assert_eq!(acks(&mut c).len(), 2);
    }

    #[test]
    fn retention_discards_the_oldest_by_age_and_bytes() {
        let mut c = Cluster::new(
            Config {
                max_age: 100,
                max_bytes: 20,
                ..cfg(1, 1)
            },
            0,
        );
        c.publish(0, 1, "k", "1", p("aaaaaaaa"));
        c.publish(50, 2, "k", "2", p("bbbbbbbb"));
        c.tick(60);
        // 10 bytes each: both fit.
        assert_eq!(c.read(0, 10).len(), 2);
        c.publish(70, 3, "k", "3", p("cccccccc"));
        c.tick(70);
        assert_eq!(c.read(0, 10).first().map(|e| e.seq), Some(2));
        c.tick(150);
        assert_eq!(c.read(0, 10).first().map(|e| e.seq), Some(3));
    }

    #[test]
    fn a_leader_killed_gives_way_to_the_longest_log_and_unacknowledged_may_be_lost() {
        let mut c = Cluster::new(cfg(3, 3), 0);
        for t in 0..4 {
            c.publish(0, t, "rec", &format!("m{t}"), p("x"));
        }
        c.tick(1);
        assert_eq!(acks(&mut c).len(), 4);
        // Two more only the leader holds.
        c.publish(2, 10, "rec", "m10", p("x"));
        c.publish(2, 11, "rec", "m11", p("x"));
        c.kill(0, 3, Some(500), true);
        assert!(!c.available());
        c.tick(50);
        assert!(!c.available());
        c.tick(103);
        assert_eq!(c.leader(), Some(1));
        assert!(c.lost_acked.is_empty());
        c.publish(104, 12, "rec", "m12", p("y"));
        c.tick(105);
        assert_eq!(acks(&mut c), [(12, 5, false)]);
        // The old leader comes back without its two and follows.
        c.tick(500);
        c.tick(501);
        assert_eq!(c.read(5, 10)[0].id, "m12");
    }

    #[test]
    fn every_node_killed_at_once_loses_what_was_not_flushed_though_acknowledged() {
        let mut c = Cluster::new(cfg(3, 3), 0);
        c.publish(0, 1, "rec", "a", p("x"));
        c.tick(1);
        c.tick(1_000); // flushed
        c.publish(1_001, 2, "rec", "b", p("x"));
        c.tick(1_002);
        assert_eq!(acks(&mut c).len(), 2);
        for n in 0..3 {
            c.kill(n, 1_003, Some(1_200), true);
        }
        c.tick(1_200);
        c.tick(1_300);
        assert!(c.available());
        assert_eq!(
            c.lost_acked,
            [LostAck {
                seq: 2,
                id: "b".into()
            }]
        );
        // The next message takes the lost one's sequence.
        c.publish(1_301, 3, "rec", "c", p("z"));
        c.tick(1_302);
        assert_eq!(acks(&mut c), [(3, 2, false)]);
    }

    #[test]
    fn a_node_gone_for_good_only_while_a_majority_stays() {
        let mut c = Cluster::new(cfg(3, 3), 0);
        assert!(c.can_lose_for_good(2));
        c.kill(2, 0, None, false);
        assert!(!c.can_lose_for_good(1));
        let c1 = Cluster::new(cfg(3, 1), 1);
        assert!(!c1.can_lose_for_good(1));
        assert!(c1.can_lose_for_good(0));
    }
}
