//! The admission machine on its own: slot accounting, the fast path, claims in flight, ordering,
//! drain, retire and take-back, driven as the queue actor drives it (each input, then `settle`).

use std::time::Duration;

use super::*;

/// The machine and what a queue actor would hold: its children's slots, its crashed children's.
struct Actor {
    m: Admission<&'static str>,
    children: Vec<(&'static str, Permit)>,
    restarting: Vec<(&'static str, Permit)>,
}

impl Actor {
    fn new(def: Queue) -> (Actor, Vec<String>) {
        let mut a = Actor {
            m: Admission::new(&def, 1000),
            children: Vec::new(),
            restarting: Vec::new(),
        };
        let first = a.step(|m| m.start(false));
        (a, first)
    }

    /// Feeds one input, then settles, as the actor does; returns what was decided.
    fn step(
        &mut self,
        input: impl FnOnce(&mut Admission<&'static str>) -> Vec<Decision<&'static str>>,
    ) -> Vec<String> {
        let decisions = input(&mut self.m);
        let mut done: Vec<String> = decisions.into_iter().map(|d| self.perform(d)).collect();
        let settled = self.m.settle(self.children.len());
        done.extend(settled.into_iter().map(|d| self.perform(d)));
        done
    }

    fn perform(&mut self, d: Decision<&'static str>) -> String {
        match d {
            Decision::Run {
                workflow,
                slot,
                path,
            } => {
                self.children.push((workflow, slot));
                format!("run {workflow} {path:?}")
            }
            Decision::Claim { limit, with_depth } => {
                format!(
                    "claim {limit}{}",
                    if with_depth { " with depth" } else { "" }
                )
            }
            Decision::TakeBack => "take back".into(),
            Decision::Restart { workflow, slot } => {
                self.restarting.push((workflow, slot));
                format!("restart {workflow}")
            }
            Decision::Poll(after) => format!("poll {after:?}"),
            Decision::WakeAt(at) => format!("wake at {at}"),
            Decision::KillChildren => "kill children".into(),
            Decision::AnswerDrains => "answer drains".into(),
            Decision::Stop => "stop".into(),
        }
    }

    /// A child exits (normally, or crashed).
    fn exit(&mut self, workflow: &str, crashed: bool) -> Vec<String> {
        let i = self.children.iter().position(|(w, _)| *w == workflow);
        let (w, slot) = self.children.remove(i.expect("a running child"));
        self.step(|m| m.exited(w, slot, crashed))
    }

    fn answer(&mut self, answer: ClaimAnswer, rows: &[&'static str]) -> Vec<String> {
        self.step(|m| m.claimed(&answer, rows.to_vec()))
    }

    fn offered(&self) -> u64 {
        self.m.slots().offered()
    }

    fn used(&self) -> u64 {
        self.m.slots().used()
    }
}

fn limited(n: u32) -> Queue {
    Queue::new("q").worker_concurrency(n)
}

/// An answer with nothing left waiting, within what the shared limits allowed.
fn clear(allowed: i64) -> ClaimAnswer {
    ClaimAnswer {
        allowed,
        ..ClaimAnswer::default()
    }
}

fn waiting(seen: i64, allowed: i64) -> ClaimAnswer {
    ClaimAnswer {
        seen,
        ..clear(allowed)
    }
}

fn slot(take: Take) -> Permit {
    match take {
        Take::Slot(p) => p,
        Take::Tabled(_) => panic!("expected an offered slot"),
    }
}

fn tabled(take: Take) -> Tabled {
    match take {
        Take::Tabled(t) => t,
        Take::Slot(_) => panic!("expected no slot"),
    }
}

#[test]
fn a_fresh_queue_claims_and_offers_nothing_until_a_claim_found_nothing_waiting() {
    let (mut a, first) = Actor::new(limited(3));
    assert_eq!(first, ["claim 3 with depth"]);
    assert_eq!((a.offered(), a.used()), (0, 3), "the claim holds all three");
    assert_eq!(a.answer(clear(3), &[]), ["poll 1s"]);
    assert_eq!((a.offered(), a.used()), (3, 3), "free slots are offered");
    let p = slot(a.m.slots().take());
    assert_eq!(a.step(|m| m.reserved("e1", p)), ["run e1 Reserved"]);
    assert_eq!((a.offered(), a.used()), (2, 3));
}

#[test]
fn slots_are_permits_freed_when_their_holders_go() {
    let (mut a, _) = Actor::new(limited(2));
    assert_eq!(
        a.answer(clear(2), &["a", "b"]),
        ["run a Claimed", "run b Claimed", "poll 1s"],
        "a full claim tries again, but no slot is free"
    );
    assert_eq!((a.offered(), a.used()), (0, 2));
    assert!(a.exit("a", false).is_empty(), "nothing waits: no claim");
    assert_eq!((a.offered(), a.used()), (1, 2), "a's slot is offered");
    drop(a.children.pop());
    assert_eq!(
        a.used(),
        1,
        "a dropped permit frees its slot before anyone is told"
    );
    a.step(|_| Vec::new());
    assert_eq!((a.offered(), a.used()), (2, 2));
}

#[test]
fn the_fast_path_closes_while_work_waits() {
    let (mut a, _) = Actor::new(limited(2));
    assert_eq!(
        a.answer(waiting(3, 1), &["a"]),
        ["run a Claimed", "poll 1s"]
    );
    assert_eq!(
        a.offered(),
        0,
        "rows wait in the table: an enqueue must not jump them"
    );
    assert_eq!(
        a.exit("a", false),
        ["claim 2"],
        "a freed slot claims at once"
    );
    assert_eq!(a.answer(clear(2), &[]), Vec::<String>::new());
    assert_eq!(a.offered(), 2);
    assert_eq!(
        a.step(|m| m.woken()),
        ["claim 2"],
        "an announcement closes it"
    );
    assert_eq!(a.offered(), 0);
}

#[test]
fn a_shared_limit_or_partitions_keep_the_fast_path_closed() {
    for def in [
        Queue::new("q").concurrency(4),
        Queue::new("q").rate_limit(4, Duration::from_secs(1)),
        Queue::new("q").partitioned(true),
    ] {
        let (mut a, _) = Actor::new(def.clone());
        a.answer(clear(1000), &[]);
        assert_eq!(a.offered(), 0, "{def:?}");
    }
    let (mut a, _) = Actor::new(limited(2));
    a.answer(clear(2), &[]);
    assert_eq!(a.offered(), 2);
    assert_eq!(
        a.step(|m| m.configure(&limited(2).concurrency(3))),
        ["claim 2"]
    );
    assert_eq!(a.offered(), 0, "a new definition applies at once");
}

#[test]
fn an_unlimited_queue_offers_one_claims_batch_at_a_time() {
    let (mut a, first) = Actor::new(Queue::new("q"));
    assert_eq!(first, ["claim 1000 with depth"]);
    a.answer(clear(1000), &[]);
    assert_eq!(a.offered(), 1000);
}

#[test]
fn a_claim_in_flight_holds_the_slots_it_asked_for() {
    let (mut a, _) = Actor::new(limited(5));
    a.answer(clear(5), &["a"]);
    assert_eq!(a.offered(), 4);
    assert_eq!(a.step(|m| m.tick()), ["claim 2 with depth"]);
    assert_eq!(
        (a.offered(), a.used()),
        (2, 5),
        "half the free slots went to the claim, the rest stay offered"
    );
    assert!(a.exit("a", false).is_empty());
    assert_eq!(a.offered(), 3, "the slot freed since is offered too");
    let e1 = slot(a.m.slots().take());
    let e2 = slot(a.m.slots().take());
    let e3 = slot(a.m.slots().take());
    let e4 = tabled(a.m.slots().take());
    assert_eq!(
        a.answer(clear(2), &["b", "c"]),
        ["run b Claimed", "run c Claimed", "poll 1s"]
    );
    assert_eq!(
        a.used(),
        5,
        "two claimed and three reserved: never more than the limit"
    );
    assert_eq!(a.step(|m| m.reserved("e1", e1)), ["run e1 Reserved"]);
    drop((e2, e3, e4));
}

#[test]
fn a_local_producer_stays_on_the_fast_path_while_polls_look_elsewhere() {
    let (mut a, _) = Actor::new(limited(4));
    a.answer(clear(4), &[]);
    for round in 0..3 {
        assert_eq!(
            a.step(|m| m.tick()),
            ["claim 2 with depth"],
            "round {round}"
        );
        let e = slot(a.m.slots().take());
        assert_eq!(a.step(|m| m.reserved("e", e)), ["run e Reserved"]);
        assert_eq!(a.answer(clear(2), &[]), ["poll 1s"], "round {round}");
        assert_eq!(
            a.offered(),
            3,
            "round {round}: nothing waits, the offer is whole again"
        );
        a.exit("e", false);
    }
    assert_eq!(a.step(|m| m.tick()), ["claim 2 with depth"]);
    assert_eq!(
        a.answer(waiting(3, 2), &["x", "y"]),
        ["run x Claimed", "run y Claimed", "claim 2", "poll 1s"],
        "work from elsewhere closes the fast path and is claimed with every free slot"
    );
    assert_eq!(a.offered(), 0);
}

#[test]
fn an_enqueue_gone_to_the_table_is_never_overtaken() {
    let (mut a, _) = Actor::new(limited(2));
    a.answer(clear(2), &["a", "b"]);
    assert_eq!(a.offered(), 0, "both slots are taken");
    let e1 = tabled(a.m.slots().take());
    assert!(a.exit("a", false).is_empty());
    assert_eq!(
        a.offered(),
        0,
        "e1 waits in the table: a later enqueue must not take a's slot"
    );
    let e2 = tabled(a.m.slots().take());
    assert_eq!(a.step(|m| m.tick()), ["claim 1 with depth"]);
    // The claim began before e1's row landed: its answer cannot vouch for it.
    assert_eq!(a.answer(clear(1), &[]), ["poll 1s"]);
    assert_eq!(a.offered(), 0);
    drop(e1);
    assert_eq!(a.step(|m| m.woken()), ["claim 1"]);
    // e2's write is not over yet either.
    assert_eq!(a.answer(clear(1), &["e1"]), ["run e1 Claimed"]);
    assert_eq!(a.offered(), 0);
    drop(e2);
    assert_eq!(
        a.exit("b", false),
        ["claim 1"],
        "work may wait: claim, not offer"
    );
    assert_eq!(a.answer(clear(1), &["e2"]), ["run e2 Claimed"]);
    assert!(a.exit("e1", false).is_empty());
    assert_eq!(
        a.offered(),
        1,
        "every tabled enqueue was claimed: the fast path reopens"
    );
}

#[test]
fn a_producer_that_waits_for_the_claim_finds_the_fast_path_again() {
    let (mut a, _) = Actor::new(limited(4));
    a.answer(clear(4), &["a", "b", "c", "d"]);
    let e1 = tabled(a.m.slots().take());
    assert!(
        !a.m.slots().reopening(),
        "no claim in flight: nothing to wait for"
    );
    drop(e1);
    assert!(a.step(|m| m.tabled_landed()).is_empty(), "no slot is free");
    assert_eq!(a.exit("a", false), ["claim 1"]);
    assert!(
        a.m.slots().reopening(),
        "only our own rows wait: the claim may reopen the offer"
    );
    // The producer waits instead of tabling e2; meanwhile another slot frees.
    assert!(a.exit("b", false).is_empty(), "one claim at a time");
    assert_eq!(a.answer(clear(1), &["e1"]), ["run e1 Claimed", "claim 1"]);
    assert!(a.m.slots().reopening(), "the next claim may leave b's slot");
    assert_eq!(a.answer(clear(1), &[]), Vec::<String>::new());
    assert_eq!(
        a.offered(),
        1,
        "every tabled row was claimed: the fast path is open"
    );
    let e2 = slot(a.m.slots().take());
    assert_eq!(a.step(|m| m.reserved("e2", e2)), ["run e2 Reserved"]);

    // Work announced from elsewhere: waiting for a claim is no longer worth it.
    assert!(a.step(|m| m.woken()).is_empty(), "no slot is free");
    assert_eq!(a.exit("c", false), ["claim 1"]);
    assert!(!a.m.slots().reopening());
}

#[test]
fn rows_a_claim_leaves_are_our_own_while_our_tabled_enqueues_are_unaccounted() {
    let (mut a, _) = Actor::new(limited(4));
    a.answer(clear(4), &["a", "b", "c", "d"]);
    for _ in 0..2 {
        drop(tabled(a.m.slots().take()));
        a.step(|m| m.tabled_landed());
    }
    assert_eq!(a.exit("a", false), ["claim 1"]);
    assert!(a.exit("b", false).is_empty(), "one claim at a time");
    // The claim takes e1 and sees e2 behind it: a producer just ahead of its claims.
    assert_eq!(
        a.answer(waiting(2, 1), &["e1"]),
        ["run e1 Claimed", "claim 1"]
    );
    assert!(
        a.m.slots().reopening(),
        "only our own rows may be left: the producer waits for the claim"
    );
    assert_eq!(a.offered(), 0, "e2 waits: nothing is offered");
    assert_eq!(a.answer(clear(1), &["e2"]), ["run e2 Claimed"]);
    assert!(a.exit("c", false).is_empty());
    assert_eq!(a.offered(), 1, "every tabled row was claimed");

    // With none of ours in the table, a row left is work from elsewhere.
    let (mut a, _) = Actor::new(limited(4));
    a.answer(waiting(5, 4), &["a", "b", "c", "d"]);
    assert_eq!(a.exit("a", false), ["claim 1"]);
    assert!(a.exit("b", false).is_empty());
    assert_eq!(
        a.answer(waiting(2, 1), &["x"]),
        ["run x Claimed", "claim 1"]
    );
    assert!(!a.m.slots().reopening());
    assert_eq!(a.offered(), 0);
}

#[test]
fn a_tabled_write_landing_during_a_claim_is_looked_for_at_once() {
    let (mut a, _) = Actor::new(limited(2));
    a.answer(clear(2), &["a", "b"]);
    let e1 = tabled(a.m.slots().take());
    assert!(
        a.exit("a", false).is_empty(),
        "e1 has not announced itself yet"
    );
    assert_eq!(a.step(|m| m.tick()), ["claim 1 with depth"]);
    drop(e1);
    assert!(
        a.step(|m| m.tabled_landed()).is_empty(),
        "one claim at a time"
    );
    assert_eq!(
        a.answer(clear(1), &[]),
        ["claim 1", "poll 1s"],
        "e1 landed after the claim looked: claim again, not at the next poll"
    );
    assert_eq!(a.answer(clear(1), &["e1"]), ["run e1 Claimed"]);
}

#[test]
fn a_claims_answer_keeps_a_backlog_announced_after_it_looked() {
    let (mut a, _) = Actor::new(limited(2));
    a.answer(clear(2), &[]);
    assert_eq!(a.step(|m| m.tick()), ["claim 1 with depth"]);
    assert!(a.step(|m| m.woken()).is_empty(), "one claim at a time");
    assert_eq!(
        a.answer(clear(1), &[]),
        ["claim 2", "poll 1s"],
        "the wake-up came after the claim looked: claim again"
    );
    assert_eq!(a.offered(), 0);
    assert_eq!(a.answer(clear(2), &[]), Vec::<String>::new());
    assert_eq!(a.offered(), 2);
}

#[test]
fn promoted_or_full_claims_claim_again_at_once() {
    let (mut a, _) = Actor::new(limited(4));
    let promoted = ClaimAnswer {
        promoted: 1,
        ..clear(4)
    };
    assert_eq!(
        a.answer(promoted, &["a"]),
        ["run a Claimed", "claim 3", "poll 1s"]
    );
    assert_eq!(
        a.answer(clear(3), &["b", "c", "d"]),
        ["run b Claimed", "run c Claimed", "run d Claimed"],
        "full: it would claim again, but no slot is free"
    );
}

#[test]
fn a_released_slot_is_free_again_and_claims() {
    let (mut a, _) = Actor::new(limited(1));
    a.answer(clear(1), &[]);
    let p = slot(a.m.slots().take());
    assert_eq!(a.used(), 1);
    assert_eq!(a.step(|m| m.released(p)), ["claim 1"]);
}

#[test]
fn drain_runs_nothing_new_and_answers_once_idle() {
    let (mut a, _) = Actor::new(limited(3));
    a.answer(clear(3), &["a"]);
    let p = slot(a.m.slots().take());
    assert_eq!(a.step(|m| m.tick()), ["claim 1 with depth"]);
    assert!(
        a.step(|m| m.drain()).is_empty(),
        "a child and a claim are in flight"
    );
    assert_eq!(a.offered(), 0);
    assert!(
        a.answer(clear(1), &["b"]).is_empty(),
        "claimed rows stay PENDING"
    );
    assert!(
        a.step(|m| m.reserved("e1", p)).is_empty(),
        "and so do reserved ones"
    );
    assert!(a.step(|m| m.tick()).is_empty(), "no claims, no polls");
    assert!(a.step(|m| m.woken()).is_empty());
    assert!(a.step(|m| m.run("direct")).is_empty());
    assert_eq!(a.used(), 1, "only a's slot is held");
    assert_eq!(a.exit("a", false), ["answer drains"]);
}

#[test]
fn after_the_grace_crashed_workflows_are_not_waited_for() {
    let (mut a, _) = Actor::new(limited(2));
    a.answer(clear(2), &["a", "b"]);
    assert_eq!(a.exit("a", true), ["restart a"]);
    assert_eq!(a.used(), 2, "a crashed workflow keeps its slot");
    assert!(a.step(|m| m.drain()).is_empty());
    assert!(
        a.exit("b", true).is_empty(),
        "no restarts while draining; a's restart is still waited for"
    );
    assert_eq!(
        a.step(|m| m.grace_over()),
        ["kill children", "answer drains"]
    );
    let (w, slot) = a.restarting.pop().unwrap();
    assert!(a
        .step(|m| m.respawn(w, slot))
        .iter()
        .all(|d| d == "answer drains"));
    assert_eq!(a.used(), 0);
}

#[test]
fn a_crashed_workflow_keeps_its_slot_until_restarted_or_abandoned() {
    let (mut a, _) = Actor::new(limited(1));
    a.answer(clear(1), &["a"]);
    assert_eq!(a.exit("a", true), ["restart a"]);
    assert_eq!((a.offered(), a.used()), (0, 1));
    let (w, slot) = a.restarting.pop().unwrap();
    assert_eq!(a.step(|m| m.respawn(w, slot)), ["run a Restarted"]);
    assert_eq!(a.exit("a", true), ["restart a"]);
    let (_, slot) = a.restarting.pop().unwrap();
    a.step(|m| m.respawn_abandoned(slot));
    assert_eq!(
        (a.offered(), a.used()),
        (1, 1),
        "the abandoned slot is offered"
    );
}

#[test]
fn a_retired_queue_stops_once_its_workflows_finish() {
    let (mut a, _) = Actor::new(limited(2));
    a.answer(clear(2), &["a"]);
    a.step(|m| m.retire());
    assert!(a.step(|m| m.tick()).is_empty(), "no claims, no polls");
    assert_eq!(a.offered(), 0);
    assert_eq!(
        a.exit("a", true),
        ["restart a"],
        "its workflows still finish"
    );
    let (w, slot) = a.restarting.pop().unwrap();
    assert_eq!(a.step(|m| m.respawn(w, slot)), ["run a Restarted"]);
    assert_eq!(a.exit("a", false), ["stop"]);
}

#[test]
fn a_restarted_queue_takes_back_before_it_claims() {
    let mut a = Actor {
        m: Admission::new(&limited(2), 1000),
        children: Vec::new(),
        restarting: Vec::new(),
    };
    assert_eq!(a.step(|m| m.start(true)), ["take back"]);
    assert_eq!(a.offered(), 0);
    assert!(a.step(|m| m.tick()).is_empty(), "one request at a time");
    let e1 = tabled(a.m.slots().take());
    assert_eq!(
        a.step(|m| m.took_back(vec!["a", "b", "c"])),
        [
            "run a TakenBack",
            "run b TakenBack",
            "run c TakenBack",
            "poll 1s"
        ],
        "everything it ran comes back, even past the limit"
    );
    assert_eq!(a.used(), 3);
    drop(e1);
    a.exit("a", false);
    assert_eq!(a.exit("b", false), ["claim 1"]);
}

#[test]
fn a_lost_claim_answer_takes_back_what_it_may_have_claimed() {
    let (mut a, _) = Actor::new(limited(2));
    assert_eq!(a.step(|m| m.claim_failed(true)), ["take back", "poll 1s"]);
    assert_eq!(a.used(), 0, "the claim's slots are free");
    assert_eq!(a.step(|m| m.took_back(vec![])), ["claim 2"]);
    assert_eq!(a.step(|m| m.claim_failed(false)), Vec::<String>::new());
    assert_eq!(a.step(|m| m.tick()), ["claim 2 with depth"]);
}

#[test]
fn polls_back_off_while_other_executors_use_up_the_shared_limit() {
    let (mut a, _) = Actor::new(limited(2).concurrency(2));
    let mut polls = Vec::new();
    for _ in 0..5 {
        polls.extend(a.answer(clear(0), &[]));
        a.step(|m| m.tick());
    }
    assert_eq!(
        polls,
        ["poll 2s", "poll 4s", "poll 8s", "poll 8s", "poll 8s"]
    );
    let rated = ClaimAnswer {
        rate_limited: true,
        rate_free_at: Some(500),
        ..clear(0)
    };
    assert_eq!(
        a.answer(rated, &[]),
        ["wake at 500", "poll 1s"],
        "a rate limit is not contention: it retries when the window frees a start"
    );
}

#[test]
fn a_wake_up_is_kept_for_the_earliest_due_time() {
    let (mut a, _) = Actor::new(Queue::new("q"));
    let due = |at| ClaimAnswer {
        next_due: Some(at),
        ..clear(1000)
    };
    assert_eq!(a.answer(due(70), &[]), ["wake at 70", "poll 1s"]);
    a.step(|m| m.tick());
    assert_eq!(a.answer(due(50), &[]), ["wake at 50", "poll 1s"]);
    a.step(|m| m.tick());
    assert_eq!(a.answer(due(60), &[]), ["poll 1s"], "50 comes first");
    assert_eq!(a.step(|m| m.due()), ["claim 1000"]);
    assert_eq!(a.answer(due(60), &[]), ["wake at 60"]);
}

#[test]
fn a_direct_start_runs_whatever_the_offer() {
    let (mut a, _) = Actor::new(Queue::new("q"));
    assert_eq!(a.step(|m| m.run("d")), ["run d Direct"]);
}

#[test]
fn a_machine_that_is_gone_offers_nothing() {
    let (mut a, _) = Actor::new(limited(2));
    a.answer(clear(2), &[]);
    let slots = a.m.slots().clone();
    assert_eq!(slots.offered(), 2);
    drop(a);
    assert_eq!((slots.offered(), slots.used()), (0, 0));
    assert!(matches!(slots.take(), Take::Tabled(_)));
}
