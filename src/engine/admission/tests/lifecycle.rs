//! Drain, crashes, retire and restart: nothing new runs while draining, crashed workflows keep
//! their slots until restarted or abandoned, a retired queue stops once idle, a restarted one
//! takes back before it claims.

use super::*;

#[test]
fn drain_runs_nothing_new_and_answers_once_idle() {
    let (mut a, _) = Actor::new(limited(3));
    a.answer(clear(3), &["a"]);
    let p = slot(a.m.slots().take());
    assert_eq!(a.step(|m| m.tick()), ["claim 1"]);
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
