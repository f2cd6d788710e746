//! Model checks (loom) of admission's lock-free part: enqueues on other threads take offered
//! slots or go to the table while the machine offers, withdraws, claims and frees slots. The
//! machine itself runs on the model's main thread, as its actor runs it; claims are answered
//! from a table under a lock. Run with
//! `RUSTFLAGS="--cfg stead_loom" CARGO_TARGET_DIR=target/loom cargo test --profile loom --lib admission`.

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;

use super::*;

/// Explores every interleaving, within `LOOM_MAX_PREEMPTIONS` (default 3) preemptions.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(f);
}

/// The queue's rows in the table: waiting ones (in queue order) and those a claim took.
#[derive(Default)]
struct Table {
    waiting: Vec<&'static str>,
    claimed: Vec<&'static str>,
}

/// A queue actor with its machine, its children's slots, its claim in flight (answered from the
/// table in a later step, as the database answers) and the table its claims read.
struct Actor {
    m: Admission<&'static str>,
    children: Vec<(&'static str, Permit)>,
    in_flight: Option<i64>,
    table: Arc<Mutex<Table>>,
}

impl Actor {
    fn new(limit: u32, table: &Arc<Mutex<Table>>) -> Actor {
        let mut actor = Actor {
            m: Admission::new(&Queue::new("q").worker_concurrency(limit), 1000),
            children: Vec::new(),
            in_flight: None,
            table: table.clone(),
        };
        actor.step(|m| m.start(false));
        actor.answer_claims();
        actor
    }

    /// Feeds one input, performs what it decided, then settles.
    fn step(
        &mut self,
        input: impl FnOnce(&mut Admission<&'static str>) -> Vec<Decision<&'static str>>,
    ) {
        let decided = input(&mut self.m);
        self.perform(decided);
        let settled = self.m.settle(self.children.len());
        self.perform(settled);
    }

    fn perform(&mut self, decisions: Vec<Decision<&'static str>>) {
        for decision in decisions {
            match decision {
                Decision::Run { workflow, slot, .. } => self.children.push((workflow, slot)),
                Decision::Claim { limit, .. } => self.in_flight = Some(limit),
                _ => {}
            }
        }
    }

    /// Answers the claim in flight, and any it leads to.
    fn answer_claims(&mut self) {
        while let Some(limit) = self.in_flight.take() {
            let (answer, rows) = self.claim(limit);
            self.step(|m| m.claimed(&answer, rows));
        }
    }

    fn claim(&self, limit: i64) -> (ClaimAnswer, Vec<&'static str>) {
        let mut table = self.table.lock().unwrap();
        let seen = table.waiting.len() as i64;
        let n = table.waiting.len().min(limit as usize);
        let rows: Vec<_> = table.waiting.drain(..n).collect();
        table.claimed.extend(&rows);
        let answer = ClaimAnswer {
            allowed: limit,
            seen,
            ..ClaimAnswer::default()
        };
        (answer, rows)
    }

    fn exit(&mut self, workflow: &str) {
        let i = self.children.iter().position(|(w, _)| *w == workflow);
        let (w, slot) = self.children.remove(i.expect("a running child"));
        self.step(|m| m.exited(w, slot, false));
        self.answer_claims();
    }

    /// Handles a pending wake-up, else a poll, and answers the claims they make.
    fn wake_or_tick(&mut self, woken: &AtomicBool) {
        if woken.swap(false, Ordering::AcqRel) {
            self.step(|m| m.woken());
        } else {
            self.step(|m| m.tick());
        }
        self.answer_claims();
    }
}

#[test]
fn offered_slots_are_taken_at_most_once_and_all_come_back() {
    model(|| {
        let slots = Slots::new();
        assert!(slots.offer(2, 0));
        let enqueues: Vec<_> = (0..2)
            .map(|_| {
                let slots = slots.clone();
                // A slot taken runs and is freed on the enqueue's own thread.
                thread::spawn(move || matches!(slots.take(), Take::Slot(_)))
            })
            .collect();
        let tabled_then = slots.withdraw();
        let ran = enqueues
            .into_iter()
            .map(|e| u32::from(e.join().unwrap()))
            .sum::<u32>();
        let tabled = slots.withdraw();
        assert!(tabled_then <= tabled);
        assert_eq!(
            ran + tabled,
            2,
            "each enqueue got a slot or went to the table"
        );
        assert_eq!(slots.used(), 0, "every slot came back, none twice");
    });
}

#[test]
fn an_enqueue_gone_to_the_table_is_never_overtaken() {
    model(|| {
        let table = Arc::new(Mutex::new(Table::default()));
        table.lock().unwrap().waiting.extend(["a", "b"]);
        let woken = Arc::new(AtomicBool::new(false));
        // Two children hold both slots; nothing else waits.
        let mut actor = Actor::new(2, &table);
        assert_eq!(actor.children.len(), 2);
        // A user actor's two enqueues, begun one after the other.
        let producer = {
            let (slots, table, woken) = (actor.m.slots().clone(), table.clone(), woken.clone());
            thread::spawn(move || {
                let first_tabled = match slots.take() {
                    Take::Tabled(write) => {
                        table.lock().unwrap().waiting.push("e1");
                        drop(write);
                        woken.store(true, Ordering::Release);
                        true
                    }
                    Take::Slot(_) => false,
                };
                if let Take::Slot(_) = slots.take() {
                    let e1_claimed = table.lock().unwrap().claimed.contains(&"e1");
                    assert!(!first_tabled || e1_claimed, "e2 overtook e1");
                }
            })
        };
        actor.exit("a");
        actor.wake_or_tick(&woken);
        actor.exit("b");
        actor.wake_or_tick(&woken);
        producer.join().unwrap();
    });
}

#[test]
fn a_claim_in_flight_keeps_the_slots_it_asked_for() {
    model(|| {
        let table = Arc::new(Mutex::new(Table::default()));
        let mut actor = Actor::new(2, &table);
        assert_eq!(actor.m.slots().offered(), 2);
        // Another process's rows, not announced (a DBOS client's): a poll finds them while two
        // enqueues here may take the offered slots.
        table.lock().unwrap().waiting.extend(["x", "y"]);
        let producer = {
            let slots = actor.m.slots().clone();
            thread::spawn(move || {
                let taken = [slots.take(), slots.take()];
                taken
                    .into_iter()
                    .filter_map(|t| match t {
                        Take::Slot(p) => Some(p),
                        Take::Tabled(_) => None,
                    })
                    .collect::<Vec<_>>()
            })
        };
        actor.step(|m| m.tick());
        actor.answer_claims();
        let reserved = producer.join().unwrap();
        let running = actor.children.len() + reserved.len();
        assert!(running <= 2, "{running} would run with a limit of 2");
        let offered = actor.m.slots().offered() as usize;
        assert_eq!(actor.m.slots().used() as usize, running + offered);
    });
}
