//! Evicted workflows: runs that waited idle long enough that this process dropped their actor
//! and body. Each is an entry {id, wake deadline, wake key (hashed), what to dispatch it with,
//! its queue slot}; one task keeps one timer for all of them, and a signal on an entry's key (a
//! local write, or a NOTIFY the listener relays) wakes it. A woken entry goes back to its queue
//! actor, which runs it again by replay.
//!
//! It owns no row (an evicted workflow stays `PENDING` and owned by this executor) and never
//! runs workflow code; it names neither an actor nor `Shared` (its task is given the resume).
//!
//! **Eviction of waiting workflows** (`RuntimeBuilder::evict_after`, default 60 s, `None` off). A
//! durable sleep, `recv`, `get_event`, update wait or a child's result that has waited idle for
//! `evict_after`, with at least that long left, evicts its run: the wait registers {id, wake
//! deadline, key} here (before its live subscription is dropped), looks once more (a `recv` runs
//! its op again, a `get_event` or a child's result its read; a sleep has nothing to look at; a
//! `recv` that hears sends skips the look, since every send since its last look woke it), then
//! sets `Abort::Evicted`. A child's end is announced by its finish (`sysdb::CHILD_CHANNEL`) or its
//! cancel; a child a DBOS process finishes announces nothing, so an evicted parent also wakes every
//! 10 minutes to look. The workflow actor's body task selects
//! (biased) on that and drops the body future unpolled; the actor stops with reason `evicted`, and
//! its queue actor hands the dispatch (compacted: interned names, boxed strings) and its `Permit`
//! here (`attach`), so a queued workflow keeps its concurrency slot while evicted (a direct start's
//! permit is the internal queue's, which has no limit). The row stays `PENDING` under the same
//! owner token; evicted waiters never poll the database.
//!
//! Only when safe: the `Context` counts in-flight durable activity other than waits (`busy`: a step
//! body with its record, every checkpoint and op, a child start) and waits; a run is evicted only with `busy == 0` and exactly one wait (a `select`/`join` of two
//! waits never is; user futures that are not durable calls are not seen). Replay-only runs never
//! evict. A held step record is never dropped: every wait begins with a durable call, which writes
//! it.
//!
//! Waking: the key's signal (local writes, the listener's NOTIFY; its reconnect wakes every keyed
//! entry) or the deadline (the wait's end or the workflow's own deadline, whichever is first) marks
//! the entry and queues it; the one timer task sends them, oldest first and as the resident bound
//! has room (`engine::residents`), to their queue actors, which run each by
//! replay (`fresh: false`, attempts unchanged: an eviction is not a recovery). A wake between
//! registration and the hand-over marks the entry, and the hand-over resumes it at once. Cancel
//! (client, announcement, sweep) removes the entry and frees its slot (`Shared::cancel_local`); the
//! sweep checks a rotating batch of 1,000 evicted runs per round besides the resident ones, so a
//! DBOS-tool cancel of an evicted workflow is found within n/1000 rounds, or when it wakes (its
//! replay meets the `CANCELLED` row). A pause removes the entry the same way and requeues its row
//! (`engine::pause`). A fence and shutdown drop every entry; the rows stay
//! `PENDING`, and recovery after the fence, or the next launch, runs them. An entry costs about
//! 0.75 KB (one process held 1,000,000 in 910 MB; `benches/README.md`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use crate::base::clock::now_ms;
use crate::engine::admission::Permit;
use crate::engine::dispatch::Dispatch;
use crate::engine::parked::{Parked, Token};
use crate::engine::residents::{Residents, PRESS_EVERY_MS};
use crate::sysdb::HeldRun;

/// At the resident bound, a woken run is handed back this often regardless (see [`Evicted::run`]).
const FORCE_EVERY: Duration = Duration::from_secs(1);

/// The stop reason of a workflow actor whose run was evicted (its queue actor parks it).
pub(crate) const EVICTED: &str = "evicted";

/// The registry of this process's evicted workflows.
#[derive(Default)]
pub(crate) struct Evicted {
    state: Mutex<State>,
    /// Entries with a wake-up key: a signal takes the lock only when there are some.
    keyed: AtomicUsize,
    /// Wakes the timer task (an earlier deadline, or entries ready to resume).
    changed: Notify,
}

/// Kept small: a million waiting runs are a million of these (`benches/README.md`, "Waiting
/// workflows evicted").
#[derive(Default)]
struct State {
    entries: BTreeMap<Arc<str>, Entry>,
    timers: BTreeSet<(i64, Arc<str>)>,
    /// Waiters by their key's hash, not the key: a collision only wakes a run that finds
    /// nothing and waits again.
    keys: HashMap<u64, Waiters>,
    hasher: RandomState,
    /// Woken entries whose run was handed over, oldest first, for the timer task to hand back
    /// as the resident bound has room; each stays in `entries` (marked woken) until then.
    ready: VecDeque<Arc<str>>,
    /// Workflow and queue names, shared by every entry.
    names: HashSet<Arc<str>>,
    /// Where the cancel sweep's next batch of evicted runs begins.
    sweep_from: Option<Arc<str>>,
}

struct Entry {
    deadline: Option<i64>,
    /// Its wake-up key's hash.
    key: Option<u64>,
    /// Set once the actor has stopped and its queue actor handed the run over.
    run: Option<Box<Parked>>,
    /// Woken before the run was handed over: the queue actor runs it again at once.
    woken: bool,
    /// Paused before the run was handed over: the queue actor requeues its row instead.
    paused: bool,
}

/// What became of a run handed over after its actor stopped.
pub(crate) enum Attach {
    /// It waits in the registry.
    Parked,
    /// It was woken meanwhile: run it again now.
    Resume(Dispatch, Permit),
    /// It was cancelled (or the registry cleared) meanwhile: free its slot.
    Gone(Permit),
    /// It was paused meanwhile: free its slot and put its row back on its queue.
    Paused(Dispatch, Permit),
}

impl Evicted {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Entries held now.
    pub(crate) fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether `id` is registered here.
    pub(crate) fn holds(&self, id: &str) -> bool {
        self.lock().entries.contains_key(id)
    }

    /// Registers `id` as evicting: from now on its key's signals and its deadline wake it.
    /// False when it is already registered.
    pub(crate) fn park(&self, id: &str, deadline: Option<i64>, key: Option<&str>) -> bool {
        let mut s = self.lock();
        if s.entries.contains_key(id) {
            return false;
        }
        let id: Arc<str> = Arc::from(id);
        if let Some(at) = deadline {
            s.timers.insert((at, id.clone()));
        }
        let key = key.map(|k| {
            let k = s.hasher.hash_one(k);
            match s.keys.remove(&k) {
                Some(waiters) => s.keys.insert(k, waiters.with(id.clone())),
                None => s.keys.insert(k, Waiters::One(id.clone())),
            };
            self.keyed.fetch_add(1, Ordering::Relaxed);
            k
        });
        let entry = Entry {
            deadline,
            key,
            run: None,
            woken: false,
            paused: false,
        };
        s.entries.insert(id, entry);
        drop(s);
        self.changed.notify_one();
        true
    }

    /// Forgets `id` (its wait found what it waited for before the eviction finished, or it
    /// was cancelled); true if it was registered. A handed-over run's slot is freed.
    pub(crate) fn remove(&self, id: &str) -> bool {
        let mut s = self.lock();
        let Some(entry) = s.entries.remove(id) else {
            return false;
        };
        self.unlink(&mut s, id, &entry);
        true
    }

    /// Forgets `id`'s entry unless it was handed over under an owner other than `owner`; true
    /// if it was forgotten.
    pub(crate) fn remove_run(&self, id: &str, owner: Option<&str>) -> bool {
        let mut s = self.lock();
        let other = |e: &Entry| match (&e.run, owner) {
            (Some(run), Some(owner)) => !run.owner.is(owner),
            _ => false,
        };
        match s.entries.get(id) {
            Some(entry) if !other(entry) => {}
            _ => return false,
        }
        match s.entries.remove(id) {
            Some(entry) => {
                self.unlink(&mut s, id, &entry);
                true
            }
            None => false,
        }
    }

    /// A pause of `id`: a handed-over run is forgotten and returned (its slot and row are the
    /// caller's to free and requeue); one not handed over yet is marked, so its hand-over
    /// answers [`Attach::Paused`].
    pub(crate) fn pause(&self, id: &str) -> Option<Parked> {
        let mut s = self.lock();
        let entry = s.entries.get_mut(id)?;
        if entry.run.is_none() {
            entry.paused = true;
            return None;
        }
        let mut entry = s.entries.remove(id)?;
        self.unlink(&mut s, id, &entry);
        entry.run.take().map(|run| *run)
    }

    /// Hands over the run of a stopped actor whose wait registered `d.id`.
    pub(crate) fn attach(&self, d: Dispatch, queue: &str, slot: Permit) -> Attach {
        let mut s = self.lock();
        let (id, woken, paused) = match s.entries.get_key_value(d.id.as_str()) {
            None => return Attach::Gone(slot),
            Some((id, entry)) => (id.clone(), entry.woken, entry.paused),
        };
        if paused {
            if let Some(entry) = s.entries.remove(d.id.as_str()) {
                self.unlink(&mut s, &id, &entry);
            }
            return Attach::Paused(d, slot);
        }
        if woken {
            s.entries.remove(d.id.as_str());
            let (mut d, slot) = (d, slot);
            d.fresh = false;
            return Attach::Resume(d, slot);
        }
        let parked = Box::new(Parked {
            name: s.intern(&d.name),
            queue: s.intern(queue),
            id,
            owner: Token::from(d.owner),
            attempts: d.attempts,
            inputs: d.inputs.map(Into::into),
            serialization: d.serialization.map(|z| s.intern(&z)),
            restarts: d.restarts,
            deadline: d.deadline,
            trace_context: d.trace_context.map(Into::into),
            slot,
        });
        if let Some(entry) = s.entries.get_mut(parked.id.as_ref()) {
            entry.run = Some(parked);
        }
        Attach::Parked
    }

    /// A signal on `key`: wakes the entries waiting on it.
    pub(crate) fn wake_key(&self, key: &str) {
        self.wake_key_with(|| key);
    }

    /// [`Evicted::wake_key`], building the key only when some entry has one.
    pub(crate) fn wake_key_with<K: AsRef<str>>(&self, key: impl FnOnce() -> K) {
        if self.keyed.load(Ordering::Relaxed) == 0 {
            return;
        }
        let key = key();
        let key = key.as_ref();
        let mut s = self.lock();
        let hash = s.hasher.hash_one(key);
        let Some(ids) = s.keys.get(&hash).map(Waiters::ids) else {
            return;
        };
        for id in ids {
            self.wake(&mut s, &id);
        }
        drop(s);
        self.changed.notify_one();
    }

    /// Wakes every entry with a key (announcements may have been missed).
    pub(crate) fn wake_keyed(&self) {
        if self.keyed.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut s = self.lock();
        let ids: Vec<Arc<str>> = s.keys.values().flat_map(Waiters::ids).collect();
        for id in ids {
            self.wake(&mut s, &id);
        }
        drop(s);
        self.changed.notify_one();
    }

    /// Drops every entry (shutdown, or a fence: the rows stay `PENDING` for recovery).
    pub(crate) fn clear(&self) {
        let mut s = self.lock();
        s.ready.clear();
        let entries = std::mem::take(&mut s.entries);
        s.timers.clear();
        s.keys.clear();
        self.keyed.store(0, Ordering::Relaxed);
        drop(s);
        drop(entries);
    }

    /// The ids of the evicted runs of `queue`.
    pub(crate) fn ids_in_queue(&self, queue: &str) -> Vec<String> {
        let s = self.lock();
        let runs = s
            .entries
            .iter()
            .filter_map(|(id, e)| e.run.as_ref().map(|r| (id, r)));
        runs.filter(|(_, run)| &*run.queue == queue)
            .map(|(id, _)| id.to_string())
            .collect()
    }

    /// Every evicted run whose actor has handed it over, with its owner token.
    pub(crate) fn held_all(&self) -> Vec<HeldRun> {
        let s = self.lock();
        let runs = s
            .entries
            .iter()
            .filter_map(|(id, e)| e.run.as_ref().map(|r| (id, r)));
        runs.map(|(id, run)| HeldRun {
            id: id.to_string(),
            owner: run.owner.to_string(),
        })
        .collect()
    }

    /// Up to `n` evicted runs for the cancel sweep, a different batch each time round.
    pub(crate) fn held_batch(&self, n: usize) -> Vec<HeldRun> {
        let mut s = self.lock();
        let from = s.sweep_from.take();
        let mut held = Vec::new();
        let mut last = None;
        let after = match &from {
            Some(f) => s.entries.range::<str, _>((
                std::ops::Bound::Excluded(f.as_ref()),
                std::ops::Bound::Unbounded,
            )),
            None => s.entries.range::<str, _>(..),
        };
        for (id, entry) in after.take(n) {
            last = Some(id.clone());
            if let Some(run) = &entry.run {
                held.push(HeldRun {
                    id: id.to_string(),
                    owner: run.owner.to_string(),
                });
            }
        }
        s.sweep_from = last;
        held
    }

    /// Wakes `id`: it is marked, and a handed-over run queued to resume; one not yet handed
    /// over resumes at its hand-over.
    fn wake(&self, s: &mut State, id: &str) {
        let Some((id, entry)) = s.entries.get_key_value(id) else {
            return;
        };
        if entry.woken {
            return;
        }
        let id = id.clone();
        let Some(entry) = s.entries.get_mut(&id) else {
            return;
        };
        entry.woken = true;
        let (deadline, key, handed) =
            (entry.deadline.take(), entry.key.take(), entry.run.is_some());
        self.unlink_parts(s, &id, deadline, key);
        if handed {
            s.ready.push_back(id);
        }
    }

    /// Removes `entry`'s timer and key.
    fn unlink(&self, s: &mut State, id: &str, entry: &Entry) {
        self.unlink_parts(s, id, entry.deadline, entry.key);
    }

    fn unlink_parts(&self, s: &mut State, id: &str, deadline: Option<i64>, key: Option<u64>) {
        if let Some(at) = deadline {
            s.timers.remove(&(at, Arc::from(id)));
        }
        if let Some(key) = key {
            if let Some(rest) = s.keys.remove(&key).and_then(|w| w.without(id)) {
                s.keys.insert(key, rest);
            }
            self.keyed.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Wakes the entries whose deadline passed; then up to `room` woken runs, oldest first, to
    /// hand back, the next deadline, and whether woken runs are left waiting.
    fn due(&self, now: i64, room: usize) -> (Vec<Parked>, Option<i64>, bool) {
        let mut s = self.lock();
        while s.timers.first().is_some_and(|(at, _)| *at <= now) {
            if let Some((_, id)) = s.timers.pop_first() {
                self.wake(&mut s, &id);
            }
        }
        let mut ready = Vec::new();
        while ready.len() < room {
            let Some(id) = s.ready.pop_front() else {
                break;
            };
            // Gone (cancelled, paused) or parked anew since it was woken: nothing to resume.
            if !s
                .entries
                .get(&id)
                .is_some_and(|e| e.woken && e.run.is_some())
            {
                continue;
            }
            if let Some(run) = s.entries.remove(&id).and_then(|e| e.run) {
                ready.push(*run);
            }
        }
        let next = s.timers.first().map(|(at, _)| *at);
        (ready, next, !s.ready.is_empty())
    }

    /// The timer task: hands woken and due entries to `resume` as `residents` has room, until
    /// dropped. At the bound it presses the resident waits to evict, and hands back one run a
    /// [`FORCE_EVERY`] all the same, so a bound full of runs that cannot evict (busy, or in a
    /// `select`) waiting on evicted ones never deadlocks; a wake of a million entries at once (a
    /// listener's reconnect) comes back as room frees instead of all at once.
    pub(crate) async fn run<R: Fn(Parked)>(&self, residents: &Residents, resume: R) {
        let mut forced = std::time::Instant::now();
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let mut room = usize::try_from(residents.headroom()).unwrap_or(usize::MAX);
            if room == 0 && forced.elapsed() >= FORCE_EVERY {
                room = 1;
                forced = std::time::Instant::now();
            }
            let (ready, next, waiting) = self.due(now_ms(), room);
            for run in ready {
                resume(run);
            }
            crate::base::metrics::evicted(self.len());
            if waiting {
                residents.want_room();
                tokio::time::sleep(Duration::from_millis(PRESS_EVERY_MS as u64)).await;
                continue;
            }
            // Nothing parked: look again in an hour of real time (a virtual clock must not
            // skip to it), or when something is.
            let nap = async {
                match next {
                    Some(at) => crate::base::clock::sleep_until_ms(at).await,
                    None => tokio::time::sleep(Duration::from_secs(3600)).await,
                }
            };
            tokio::select! {
                _ = &mut changed => {}
                _ = nap => {}
            }
        }
    }
}

impl State {
    fn intern(&mut self, name: &str) -> Arc<str> {
        if let Some(n) = self.names.get(name) {
            return n.clone();
        }
        let n: Arc<str> = Arc::from(name);
        self.names.insert(n.clone());
        n
    }
}

/// The runs waiting on one key: almost always one, which then costs no allocation.
enum Waiters {
    One(Arc<str>),
    Many(Vec<Arc<str>>),
}

impl Waiters {
    fn with(self, id: Arc<str>) -> Waiters {
        match self {
            Waiters::One(first) => Waiters::Many(vec![first, id]),
            Waiters::Many(mut ids) => {
                ids.push(id);
                Waiters::Many(ids)
            }
        }
    }

    /// What is left once `id` goes; `None` when nothing is.
    fn without(self, id: &str) -> Option<Waiters> {
        match self {
            Waiters::One(only) if only.as_ref() == id => None,
            Waiters::One(only) => Some(Waiters::One(only)),
            Waiters::Many(mut ids) => {
                ids.retain(|i| i.as_ref() != id);
                match ids.len() {
                    0 => None,
                    1 => ids.pop().map(Waiters::One),
                    _ => Some(Waiters::Many(ids)),
                }
            }
        }
    }

    fn ids(&self) -> Vec<Arc<str>> {
        match self {
            Waiters::One(id) => vec![id.clone()],
            Waiters::Many(ids) => ids.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiters_on_one_key_come_and_go() {
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        let w = Waiters::One(a.clone()).with(b.clone());
        assert_eq!(w.ids(), vec![a.clone(), b.clone()]);
        let w = w.without("a").expect("b is left");
        assert_eq!(w.ids(), vec![b]);
        assert!(w.without("b").is_none());
        assert!(Waiters::One(a).without("x").is_some());
    }
}
