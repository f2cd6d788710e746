//! The fast path and order: closed while work waits in the table or a shared limit applies,
//! kept by a local producer, reopened once every tabled enqueue was claimed; an enqueue gone to
//! the table is never overtaken.

use super::*;

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
fn a_local_producer_stays_on_the_fast_path_while_polls_look_elsewhere() {
    let (mut a, _) = Actor::new(limited(4));
    a.answer(clear(4), &[]);
    for round in 0..3 {
        assert_eq!(a.step(|m| m.tick()), ["claim 2"], "round {round}");
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
    assert_eq!(a.step(|m| m.tick()), ["claim 2"]);
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
    assert_eq!(a.step(|m| m.tick()), ["claim 1"]);
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
    assert_eq!(a.step(|m| m.tick()), ["claim 1"]);
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
