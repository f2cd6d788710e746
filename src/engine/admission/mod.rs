//! Admission: who may start a workflow of one queue in this process, on which path, in which
//! slot. A synchronous state machine that the queue actor feeds (woken, tick, a claim answered,
//! a child exited, a local enqueue arrived, drain, retire, ...) and whose [`Decision`]s it
//! performs (claim, take back, run, restart, timers, drain answers, stop).
//!
//! It owns the queue's [`Slots`]: every workflow it admits comes with a [`Permit`] that the
//! actor keeps with the child, so a slot is freed exactly when its holder goes. Two paths lead
//! in: the claim path (a claim holds the slots it asked for while in flight and hands them to
//! the rows it got) and the fast path (an enqueue from this process takes an offered slot
//! without a message). The fast path is open only while nothing it could jump is waiting: no
//! known backlog, no enqueue of this process gone to the table since a claim last saw it all,
//! and only this executor's own limit applies.
//!
//! Never touches tokio, actors or the database, and never blocks.
//!
//! Lifecycle: `Running` → `Retiring` (deleted) or `Draining` (shutdown; children killed after the
//! grace) → `Stopped`; one database request at a time. A child keeps its own permit (a crashed one
//! through its restart backoff), so no count drifts.
//!
//! **Polls keep half the offer.** While the fast path is open, a claim (a poll for work from other
//! processes) takes half the free slots and leaves the other half offered, so an awaited local
//! producer does not meet a withdrawn offer at every poll, go to the table and, behind its own
//! tabled rows, stay off the fast path (W3f before: 4.15 statements per workflow). Polling backs
//! off only when the shared limits allowed less than the claim itself asked.
//!
//! **An awaited enqueue waits for the claim in flight, not the table.** Offers resume only after a
//! claim no tabled write overlapped, so a producer that went to the table once (all slots busy for
//! a moment) and then wrote a tabled row every millisecond overlapped every claim and stayed off
//! the fast path for good (W3f, 2026-12-02: from a stall 5 s in, every later enqueue was tabled,
//! claims tripled at 1.2–3.6 ms each, ~750 → ~500 wf/s). Now, while a claim is in flight and only
//! this process's own enqueues are known to wait (no announcement from elsewhere since, the last
//! answer took all it saw), the machine marks the slots `reopening`; an awaited enqueue that finds
//! no slot waits for the actor's next settles (a `Notify` in the directory's `Offer`), at most 20
//! ms, before it takes a slot or goes to the table. Enqueues sent as queue-actor messages never
//! wait (their `begin` runs in the actor). Own tabled rows are not wake-ups a claim must have heard
//! (`QueueRequest::TabledLanded`: the tabled count says whether a claim saw them), and the listener
//! skips this process's own announcements. The enqueue tests: 0 of the last 200 enqueues on the
//! fast path before, 170–195 after. A row a claim leaves behind (it saw more than it took) counts
//! as work from elsewhere only while no enqueue of ours that went to the table is unaccounted for:
//! on a faster image (2026-12-03) a producer one row ahead of each claim made every later enqueue
//! tabled again (0 of 200 in 5 runs of 5; 137–150 after). The cost, when a silent enqueuer
//! elsewhere keeps rows waiting while ours are unaccounted: an awaited enqueue that finds no slot
//! waits for the claim in flight (at most 20 ms) before it goes to the table.
//!
//! **Claims start at a floor.** Each claim's answer reports the first waiting row it saw (its
//! head); the next claim starts [`FLOOR_MARGIN_MS`] below it, so it does not pass the versions
//! of every row claimed since the oldest open snapshot began (`sysdb::claim`, "Why a floor").
//! Polls start at the floor too: the queue actor's survey, off the claim path, looks below it
//! and reports a row there ([`Admission::below_floor`]); the next claim then starts from the
//! front, as does the claim after a promotion (its rows keep their old `created_at`), a
//! take-back or a change of definition. A partitioned queue's claims take no floor.

mod decision;
mod slots;

#[cfg(all(test, stead_loom))]
mod loom_models;
#[cfg(all(test, not(stead_loom)))]
mod tests;

use std::time::Duration;

pub(crate) use decision::{ClaimAnswer, Decision, Path, Phase};
use slots::Snapshot;
pub(crate) use slots::{Permit, Slots, Tabled, Take};

use crate::base::queue::Queue;
use crate::sysdb::QueueKey;

/// How far below the last head (ms of `created_at`) a claim starts: enqueues committed this much
/// after rows enqueued later are still seen by the next claim.
pub(crate) const FLOOR_MARGIN_MS: i64 = 250;

/// The limits the machine applies, from the queue's definition.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// Slots in this process; `None`: one claim's batch at a time, unbounded in total.
    worker: Option<u32>,
    /// Only this executor's limit applies, so an enqueue from here may take a slot directly.
    local_only: bool,
    /// Claims may start at a floor (not on a partitioned queue).
    floored: bool,
    polling: Duration,
}

impl Limits {
    fn of(def: &Queue) -> Limits {
        Limits {
            worker: def.worker_concurrency,
            local_only: !def.shared_limits() && !def.partitioned,
            floored: !def.partitioned,
            polling: def.polling_interval,
        }
    }
}

/// The one database request a queue has in flight.
#[derive(Debug)]
enum Request {
    /// A claim, holding the slots it asked for; the wake-ups and tabled enqueues there were when
    /// it began, so its answer clears no backlog announced after it looked.
    Claim {
        slots: Permit,
        wakes: u64,
        tabled: Snapshot,
    },
    TakeBack,
}

/// The admission state of one queue actor. `W` is the workflow the actor runs (its `Dispatch`).
#[derive(Debug)]
pub(crate) struct Admission<W> {
    limits: Limits,
    claim_batch: i64,
    slots: Slots,
    phase: Phase,
    request: Option<Request>,
    /// Work may be waiting that a free slot could take: claim as soon as one frees, offer none.
    backlog: bool,
    /// A take-back was asked for while another request was in flight: it goes next.
    take_back_next: bool,
    /// Some of it may be from elsewhere (announced, promoted, not yet looked for, or seen beyond
    /// what a claim took while every enqueue of ours gone to the table was accounted for), not
    /// only this process's own enqueues gone to the table.
    foreign: bool,
    /// The tabled count up to which a claim has seen every enqueue that went to the table.
    accounted: u32,
    /// Wake-ups so far.
    wakes: u64,
    /// Crashed workflows waiting for their restart (they keep their slots).
    restarting: usize,
    poll_armed: bool,
    /// Consecutive claims held back by limits other executors use up: polls back off.
    contended: u32,
    /// The last claim found the queue paused: local enqueues go to the table (no fast path)
    /// until a claim finds it resumed.
    paused: bool,
    next_due: Option<i64>,
    /// Where the next claim starts.
    floor: Option<QueueKey>,
    /// A survey found a row below the floor: the next claim starts at the front.
    unfloor_next: bool,
    out: Vec<Decision<W>>,
}

impl<W> Admission<W> {
    /// A queue's machine, before its first request ([`Admission::start`]).
    pub(crate) fn new(def: &Queue, claim_batch: i64) -> Admission<W> {
        Admission {
            limits: Limits::of(def),
            claim_batch,
            slots: Slots::new(),
            phase: Phase::Running,
            request: None,
            backlog: true,
            take_back_next: false,
            foreign: true,
            accounted: 0,
            wakes: 0,
            restarting: 0,
            poll_armed: false,
            contended: 0,
            paused: false,
            next_due: None,
            floor: None,
            unfloor_next: false,
            out: Vec::new(),
        }
    }

    /// The slots enqueues from this process take from.
    pub(crate) fn slots(&self) -> &Slots {
        &self.slots
    }

    /// The first request: a claim, or, for an actor replacing one that crashed, taking back the
    /// workflows the old one ran.
    pub(crate) fn start(&mut self, restarted: bool) -> Vec<Decision<W>> {
        if restarted {
            self.take_back();
        } else {
            self.claim();
        }
        self.decided()
    }

    /// This executor proved it is alive again after its lease ran out: take back its workflows
    /// of the queue that no run here holds (runs that crashed while it could not), as the next
    /// request.
    pub(crate) fn retake(&mut self) -> Vec<Decision<W>> {
        self.take_back_next = true;
        self.claim();
        self.decided()
    }

    /// A direct start (its row is already ours).
    pub(crate) fn run(&mut self, workflow: W) -> Vec<Decision<W>> {
        let slot = self.slots.acquire(1);
        self.admit(workflow, slot, Path::Direct);
        self.decided()
    }

    /// An enqueue that took an offered slot has written its row.
    pub(crate) fn reserved(&mut self, workflow: W, slot: Permit) -> Vec<Decision<W>> {
        self.admit(workflow, slot, Path::Reserved);
        self.decided()
    }

    /// An enqueue that took an offered slot wrote no row (a duplicate, or a failure).
    pub(crate) fn released(&mut self, slot: Permit) -> Vec<Decision<W>> {
        drop(slot);
        self.claim();
        self.decided()
    }

    /// Work was announced (by another process, or written here outside the slots).
    pub(crate) fn woken(&mut self) -> Vec<Decision<W>> {
        self.wakes += 1;
        self.foreign = true;
        self.backlog = true;
        self.claim();
        self.decided()
    }

    /// An enqueue of this process that went to the table has landed. Not a wake-up a claim must
    /// have heard: the tabled count tells whether a claim saw its row.
    pub(crate) fn tabled_landed(&mut self) -> Vec<Decision<W>> {
        self.backlog = true;
        self.claim();
        self.decided()
    }

    /// The time asked for by [`Decision::WakeAt`] came.
    pub(crate) fn due(&mut self) -> Vec<Decision<W>> {
        self.next_due = None;
        self.woken()
    }

    /// The polling timer fired.
    pub(crate) fn tick(&mut self) -> Vec<Decision<W>> {
        self.poll_armed = false;
        self.claim();
        self.decided()
    }

    /// The floor claims start at now, for a survey of what waits below it.
    pub(crate) fn floor(&self) -> Option<QueueKey> {
        self.floor
    }

    /// A survey found a waiting row below `floor`: the next claim starts at the front.
    pub(crate) fn below_floor(&mut self, floor: QueueKey) -> Vec<Decision<W>> {
        // A floor dropped since the survey was sent has had its unfloored claim already.
        if self.floor.is_some_and(|f| f >= floor) {
            self.unfloor_next = true;
            self.backlog = true;
            self.claim();
        }
        self.decided()
    }

    /// The claim in flight answered with `rows` (in queue order).
    pub(crate) fn claimed(&mut self, answer: &ClaimAnswer, rows: Vec<W>) -> Vec<Decision<W>> {
        let (mut slots, wakes, tabled) = match self.request.take() {
            Some(Request::Claim {
                slots,
                wakes,
                tabled,
            }) => (slots, wakes, tabled),
            other => {
                self.request = other;
                return self.decided();
            }
        };
        // What the claim asked for; slots kept offered or freed meanwhile are not part of it.
        let asked = i64::from(slots.len());
        let took = rows.len() as i64;
        for workflow in rows {
            let slot = slots.split().unwrap_or_else(|| self.slots.acquire(1));
            self.admit(workflow, slot, Path::Claimed);
        }
        drop(slots);
        // Another executor uses up the shared concurrency: back off the polling a little. A rate
        // limit is not contention: the claim retries when the window frees a start.
        let contended = took == 0 && answer.allowed < asked && !answer.rate_limited;
        self.contended = if contended { self.contended + 1 } else { 0 };
        self.paused = answer.paused;
        if let Some(free_at) = answer.rate_free_at {
            self.wake_at(free_at);
        }
        let woken_since = self.wakes != wakes;
        // It saw every tabled enqueue's row only if all had landed before it and none went to
        // the table since.
        let unseen = !tabled.all_landed() || self.slots.tabled().tabled != tabled.tabled;
        // Rows left waiting are this process's own as far as it knows when some of its
        // enqueues went to the table before the claim and no claim has seen them all since: a
        // producer just ahead of its claims is not work from elsewhere.
        let left = answer.seen > took;
        let own_unaccounted = tabled.tabled != self.accounted;
        self.foreign = (left && !own_unaccounted) || answer.promoted > 0 || woken_since;
        self.backlog = self.foreign || unseen || left;
        if !self.backlog {
            self.accounted = tabled.tabled;
        }
        if let Some(due) = answer.next_due {
            self.wake_at(due);
        }
        self.floor = match answer.head {
            // Promoted rows keep their `created_at`: they may sit below any floor.
            _ if answer.promoted > 0 || !self.limits.floored => None,
            Some((priority, created_at)) => Some((priority, created_at - FLOOR_MARGIN_MS)),
            None => self.floor,
        };
        // Tabled writes that landed during the claim announced themselves while it was in
        // flight: look for them now (one still being written announces itself when it lands).
        let landed_unseen = unseen && self.slots.tabled().all_landed();
        let more =
            answer.promoted > 0 || woken_since || landed_unseen || (took > 0 && took >= asked);
        if more || self.take_back_next {
            self.claim();
        }
        self.arm_poll();
        self.decided()
    }

    /// The claim in flight failed; a transient failure may have committed it, so take back.
    pub(crate) fn claim_failed(&mut self, transient: bool) -> Vec<Decision<W>> {
        self.request = None;
        self.floor = None;
        if transient || std::mem::take(&mut self.take_back_next) {
            self.take_back();
        }
        self.arm_poll();
        self.decided()
    }

    /// The take-back answered with `rows` (none if it failed).
    pub(crate) fn took_back(&mut self, rows: Vec<W>) -> Vec<Decision<W>> {
        self.request = None;
        self.floor = None;
        for workflow in rows {
            let slot = self.slots.acquire(1);
            self.admit(workflow, slot, Path::TakenBack);
        }
        self.backlog = true;
        self.foreign = true;
        self.claim();
        self.decided()
    }

    /// A child exited; `crashed` if it should be restarted.
    pub(crate) fn exited(&mut self, workflow: W, slot: Permit, crashed: bool) -> Vec<Decision<W>> {
        if crashed && !self.draining() {
            self.restarting += 1;
            self.out.push(Decision::Restart { workflow, slot });
        } else {
            drop(slot);
            if self.backlog {
                // A slot freed and work may be waiting: take it now, not at the next poll.
                self.claim();
            }
        }
        self.decided()
    }

    /// A crashed workflow's backoff passed and its restart was counted.
    pub(crate) fn respawn(&mut self, workflow: W, slot: Permit) -> Vec<Decision<W>> {
        self.restarting = self.restarting.saturating_sub(1);
        self.admit(workflow, slot, Path::Restarted);
        self.decided()
    }

    /// A crashed workflow will not be restarted here (no longer ours, or the database failed).
    pub(crate) fn respawn_abandoned(&mut self, slot: Permit) -> Vec<Decision<W>> {
        self.restarting = self.restarting.saturating_sub(1);
        drop(slot);
        self.decided()
    }

    /// The queue's definition changed.
    pub(crate) fn configure(&mut self, def: &Queue) -> Vec<Decision<W>> {
        self.limits = Limits::of(def);
        self.floor = None;
        self.backlog = true;
        self.foreign = true;
        self.claim();
        self.decided()
    }

    /// The queue was deleted.
    pub(crate) fn retire(&mut self) -> Vec<Decision<W>> {
        if self.phase == Phase::Running {
            self.phase = Phase::Retiring;
        }
        self.decided()
    }

    /// The runtime stops: claim nothing more and run nothing new.
    pub(crate) fn drain(&mut self) -> Vec<Decision<W>> {
        if !matches!(self.phase, Phase::Draining { .. }) {
            self.phase = Phase::Draining {
                deadline_passed: false,
            };
        }
        self.decided()
    }

    /// The drain's grace is over.
    pub(crate) fn grace_over(&mut self) -> Vec<Decision<W>> {
        self.phase = Phase::Draining {
            deadline_passed: true,
        };
        self.out.push(Decision::KillChildren);
        self.decided()
    }

    /// After every input: offers the free slots to local enqueues when they may skip the queue;
    /// answers drains, or stops a retired queue, once idle (`children` are running).
    pub(crate) fn settle(&mut self, children: usize) -> Vec<Decision<W>> {
        self.offer();
        self.slots.set_reopening(self.reopening());
        let idle = children == 0 && self.request.is_none();
        match self.phase {
            Phase::Draining { deadline_passed }
                if idle && (self.restarting == 0 || deadline_passed) =>
            {
                self.out.push(Decision::AnswerDrains);
            }
            Phase::Retiring if idle && self.restarting == 0 => {
                self.phase = Phase::Stopped;
                self.out.push(Decision::Stop);
            }
            _ => {}
        }
        self.decided()
    }

    fn decided(&mut self) -> Vec<Decision<W>> {
        std::mem::take(&mut self.out)
    }

    /// Nothing new runs: draining, or stopped.
    fn draining(&self) -> bool {
        matches!(self.phase, Phase::Draining { .. } | Phase::Stopped)
    }

    /// Runs `workflow` in `slot`, unless nothing new may run (the slot is then freed and the
    /// workflow stays `PENDING` for the next launch to recover).
    fn admit(&mut self, workflow: W, slot: Permit, path: Path) {
        if !self.draining() {
            self.out.push(Decision::Run {
                workflow,
                slot,
                path,
            });
        }
    }

    fn free(&self) -> i64 {
        match self.limits.worker {
            Some(limit) => i64::from(limit) - self.slots.used() as i64,
            None => self.claim_batch,
        }
    }

    /// Claims as many workflows as there are free slots, unless a request is in flight.
    fn claim(&mut self) {
        if self.request.is_some() || self.phase != Phase::Running {
            return;
        }
        if std::mem::take(&mut self.take_back_next) {
            self.take_back();
            return;
        }
        // Slots offered to local enqueues are not free for a claim.
        self.withdraw();
        let free = self.free();
        // While the fast path is open, a claim only looks for work from elsewhere: half the free
        // slots stay offered meanwhile, so a local producer keeps skipping the queue instead of
        // falling into the table (and, behind its own tabled rows, off the fast path).
        let kept = if self.fast_path_open() { free / 2 } else { 0 };
        let limit = (free - kept).min(self.claim_batch);
        if limit <= 0 {
            self.arm_poll();
            return;
        }
        self.request = Some(Request::Claim {
            slots: self.slots.acquire(u32::try_from(limit).unwrap_or(u32::MAX)),
            wakes: self.wakes,
            tabled: self.slots.tabled(),
        });
        self.out.push(Decision::Claim {
            limit,
            floor: if std::mem::take(&mut self.unfloor_next) {
                None
            } else {
                self.floor
            },
        });
    }

    fn take_back(&mut self) {
        self.request = Some(Request::TakeBack);
        self.out.push(Decision::TakeBack);
    }

    /// Withdraws the offer; an enqueue gone to the table since a claim last saw them all is a
    /// backlog.
    fn withdraw(&mut self) {
        if self.slots.withdraw() != self.accounted {
            self.backlog = true;
        }
    }

    /// Whether local enqueues may skip the queue: nothing they could jump is known to wait.
    fn fast_path_open(&self) -> bool {
        self.phase == Phase::Running && !self.backlog && !self.paused && self.limits.local_only
    }

    /// A claim is in flight and nothing but this process's own enqueues is known to wait: an
    /// awaited enqueue that finds no slot and waits for the claim's answer, instead of going to
    /// the table, may find a slot offered then. Tabling meanwhile keeps the offer closed: a
    /// claim that overlaps a tabled write cannot vouch for it, so a producer that keeps tabling
    /// would never see the fast path again.
    fn reopening(&self) -> bool {
        self.phase == Phase::Running
            && self.limits.local_only
            && !self.foreign
            && matches!(self.request, Some(Request::Claim { .. }))
    }

    fn offer(&mut self) {
        self.withdraw();
        let n = if self.fast_path_open() {
            self.free()
        } else {
            0
        };
        if n > 0
            && !self
                .slots
                .offer(u32::try_from(n).unwrap_or(u32::MAX), self.accounted)
        {
            self.backlog = true;
        }
    }

    /// Keeps the polling timer running: the queue's interval, doubled per contended claim (up
    /// to 8×).
    fn arm_poll(&mut self) {
        if self.poll_armed || self.phase != Phase::Running {
            return;
        }
        self.poll_armed = true;
        let factor = 1u32 << self.contended.min(3);
        self.out.push(Decision::Poll(self.limits.polling * factor));
    }

    fn wake_at(&mut self, due_ms: i64) {
        if self.next_due.is_some_and(|at| at <= due_ms) {
            return;
        }
        self.next_due = Some(due_ms);
        self.out.push(Decision::WakeAt(due_ms));
    }
}

impl<W> Drop for Admission<W> {
    /// An actor that is gone offers nothing: its enqueues go to the table for its successor.
    fn drop(&mut self) {
        self.slots.withdraw();
        self.slots.set_reopening(false);
    }
}
