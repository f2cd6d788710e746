//! Slot accounting: permits freed with their holders, what a claim in flight holds, released
//! slots, direct starts, and a machine that is gone.

use super::*;

#[test]
fn a_fresh_queue_claims_and_offers_nothing_until_a_claim_found_nothing_waiting() {
    let (mut a, first) = Actor::new(limited(3));
    assert_eq!(first, ["claim 3"]);
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
fn an_unlimited_queue_offers_one_claims_batch_at_a_time() {
    let (mut a, first) = Actor::new(Queue::new("q"));
    assert_eq!(first, ["claim 1000"]);
    a.answer(clear(1000), &[]);
    assert_eq!(a.offered(), 1000);
}

#[test]
fn a_claim_in_flight_holds_the_slots_it_asked_for() {
    let (mut a, _) = Actor::new(limited(5));
    a.answer(clear(5), &["a"]);
    assert_eq!(a.offered(), 4);
    assert_eq!(a.step(|m| m.tick()), ["claim 2"]);
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
fn a_released_slot_is_free_again_and_claims() {
    let (mut a, _) = Actor::new(limited(1));
    a.answer(clear(1), &[]);
    let p = slot(a.m.slots().take());
    assert_eq!(a.used(), 1);
    assert_eq!(a.step(|m| m.released(p)), ["claim 1"]);
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
