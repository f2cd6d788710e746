//! Evicted workflows: runs that waited idle long enough that this process dropped their actor
//! and body. Each is an entry {id, wake deadline, wake key, what to dispatch it with, its queue
//! slot}; one task keeps one timer for all of them, and a signal on an entry's key (a local
//! write, or a NOTIFY the listener relays) wakes it. A woken entry goes back to its queue actor,
//! which runs it again by replay.
//!
//! It owns no row (an evicted workflow stays `PENDING` and owned by this executor) and never
//! runs workflow code; it names neither an actor nor `Shared` (its task is given the resume).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use crate::admission::Permit;
use crate::clock::now_ms;
use crate::dispatch::Dispatch;
use crate::sysdb::HeldRun;

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

#[derive(Default)]
struct State {
    entries: BTreeMap<Arc<str>, Entry>,
    timers: BTreeSet<(i64, Arc<str>)>,
    keys: HashMap<Arc<str>, Vec<Arc<str>>>,
    /// Woken entries for the timer task to hand back.
    ready: Vec<Parked>,
    /// Workflow and queue names, shared by every entry.
    names: HashSet<Arc<str>>,
    /// Where the cancel sweep's next batch of evicted runs begins.
    sweep_from: Option<Arc<str>>,
}

struct Entry {
    deadline: Option<i64>,
    key: Option<Arc<str>>,
    /// Set once the actor has stopped and its queue actor handed the run over.
    run: Option<Box<Parked>>,
    /// Woken before the run was handed over: the queue actor runs it again at once.
    woken: bool,
}

/// An evicted run: its dispatch, compacted, and the queue slot it keeps.
pub(crate) struct Parked {
    id: Arc<str>,
    name: Arc<str>,
    queue: Arc<str>,
    owner: Box<str>,
    attempts: i64,
    inputs: Option<Box<str>>,
    serialization: Option<Box<str>>,
    restarts: u32,
    deadline: Option<i64>,
    trace_context: Option<Box<str>>,
    slot: Permit,
}

impl Parked {
    /// The queue whose actor runs it again.
    pub(crate) fn queue(&self) -> &str {
        &self.queue
    }

    /// The dispatch that replays it, and its slot.
    pub(crate) fn into_dispatch(self) -> (Dispatch, Permit) {
        let d = Dispatch {
            id: self.id.to_string(),
            name: self.name.to_string(),
            owner: self.owner.into(),
            attempts: self.attempts,
            inputs: self.inputs.map(Into::into),
            serialization: self.serialization.map(Into::into),
            fresh: false,
            restarts: self.restarts,
            deadline: self.deadline,
            trace_context: self.trace_context.map(Into::into),
        };
        (d, self.slot)
    }
}

/// What became of a run handed over after its actor stopped.
pub(crate) enum Attach {
    /// It waits in the registry.
    Parked,
    /// It was woken meanwhile: run it again now.
    Resume(Dispatch, Permit),
    /// It was cancelled (or the registry cleared) meanwhile: free its slot.
    Gone(Permit),
}

impl Evicted {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Entries held now.
    pub(crate) fn len(&self) -> usize {
        self.lock().entries.len()
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
        let key: Option<Arc<str>> = key.map(|k| {
            let k: Arc<str> = match s.keys.get_key_value(k) {
                Some((k, _)) => k.clone(),
                None => Arc::from(k),
            };
            s.keys.entry(k.clone()).or_default().push(id.clone());
            self.keyed.fetch_add(1, Ordering::Relaxed);
            k
        });
        let entry = Entry {
            deadline,
            key,
            run: None,
            woken: false,
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
            (Some(run), Some(owner)) => &*run.owner != owner,
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

    /// Hands over the run of a stopped actor whose wait registered `d.id`.
    pub(crate) fn attach(&self, d: Dispatch, queue: &str, slot: Permit) -> Attach {
        let mut s = self.lock();
        let woken = match s.entries.get(d.id.as_str()) {
            None => return Attach::Gone(slot),
            Some(entry) => entry.woken,
        };
        if woken {
            s.entries.remove(d.id.as_str());
            let (mut d, slot) = (d, slot);
            d.fresh = false;
            return Attach::Resume(d, slot);
        }
        let parked = Box::new(Parked {
            name: s.intern(&d.name),
            queue: s.intern(queue),
            id: Arc::from(d.id.as_str()),
            owner: d.owner.into(),
            attempts: d.attempts,
            inputs: d.inputs.map(Into::into),
            serialization: d.serialization.map(Into::into),
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
        if self.keyed.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut s = self.lock();
        let Some(ids) = s.keys.get(key).cloned() else {
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
        let ids: Vec<Arc<str>> = s.keys.values().flatten().cloned().collect();
        for id in ids {
            self.wake(&mut s, &id);
        }
        drop(s);
        self.changed.notify_one();
    }

    /// Drops every entry (shutdown, or a fence: the rows stay `PENDING` for recovery).
    pub(crate) fn clear(&self) {
        let mut s = self.lock();
        let ready = std::mem::take(&mut s.ready);
        let entries = std::mem::take(&mut s.entries);
        s.timers.clear();
        s.keys.clear();
        self.keyed.store(0, Ordering::Relaxed);
        drop(s);
        drop((ready, entries));
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

    /// Wakes `id`: a handed-over run is queued to resume; one not yet handed over is marked.
    fn wake(&self, s: &mut State, id: &str) {
        let Some(mut entry) = s.entries.remove(id) else {
            return;
        };
        self.unlink(s, id, &entry);
        match entry.run.take() {
            Some(run) => s.ready.push(*run),
            None => {
                entry.woken = true;
                entry.deadline = None;
                entry.key = None;
                s.entries.insert(Arc::from(id), entry);
            }
        }
    }

    /// Removes `entry`'s timer and key.
    fn unlink(&self, s: &mut State, id: &str, entry: &Entry) {
        if let Some(at) = entry.deadline {
            s.timers.remove(&(at, Arc::from(id)));
        }
        if let Some(key) = &entry.key {
            if let Some(ids) = s.keys.get_mut(key) {
                ids.retain(|i| i.as_ref() != id);
                if ids.is_empty() {
                    s.keys.remove(key);
                }
            }
            self.keyed.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Entries whose deadline passed, and those woken, to hand back; and the next deadline.
    fn due(&self, now: i64) -> (Vec<Parked>, Option<i64>) {
        let mut s = self.lock();
        while let Some((at, id)) = s.timers.first().cloned() {
            if at > now {
                break;
            }
            self.wake(&mut s, &id);
        }
        let ready = std::mem::take(&mut s.ready);
        let next = s.timers.first().map(|(at, _)| *at);
        (ready, next)
    }

    /// The timer task: hands every woken or due entry to `resume`, until dropped.
    pub(crate) async fn run<R: Fn(Parked)>(&self, resume: R) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let (ready, next) = self.due(now_ms());
            for run in ready {
                resume(run);
            }
            crate::metrics::evicted(self.len());
            let nap = next.map_or(Duration::from_secs(3600), |at| {
                Duration::from_millis((at - now_ms()).max(0) as u64)
            });
            tokio::select! {
                _ = &mut changed => {}
                _ = tokio::time::sleep(nap) => {}
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
