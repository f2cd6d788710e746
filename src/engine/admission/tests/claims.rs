//! Claims and polls: a backlog announced while a claim looked, promoted or full claims, a lost
//! answer taken back, back-off under a shared limit, and the earliest wake-up kept.

use super::*;

#[test]
fn a_claims_answer_keeps_a_backlog_announced_after_it_looked() {
    let (mut a, _) = Actor::new(limited(2));
    a.answer(clear(2), &[]);
    assert_eq!(a.step(|m| m.tick()), ["claim 1"]);
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
fn a_lost_claim_answer_takes_back_what_it_may_have_claimed() {
    let (mut a, _) = Actor::new(limited(2));
    assert_eq!(a.step(|m| m.claim_failed(true)), ["take back", "poll 1s"]);
    assert_eq!(a.used(), 0, "the claim's slots are free");
    assert_eq!(a.step(|m| m.took_back(vec![])), ["claim 2"]);
    assert_eq!(a.step(|m| m.claim_failed(false)), Vec::<String>::new());
    assert_eq!(a.step(|m| m.tick()), ["claim 2"]);
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
fn claims_start_below_the_last_head() {
    let (mut a, first) = Actor::new(limited(4));
    assert_eq!(first, ["claim 4"], "the first claim starts at the front");
    let head = |created_at, seen| ClaimAnswer {
        head: Some((0, created_at)),
        ..waiting(seen, 4)
    };
    a.answer(head(10_000, 5), &["a", "b", "c", "d"]);
    assert_eq!(
        a.exit("a", false),
        ["claim 1 from 0/9750"],
        "the next claim starts a margin below the head it saw"
    );
    a.answer(head(11_000, 2), &["e"]);
    assert_eq!(a.exit("b", false), ["claim 1 from 0/10750"]);
    // No head (nothing waited above the floor): the floor stays.
    a.answer(waiting(0, 1), &[]);
    a.exit("c", false);
    assert_eq!(a.step(|m| m.woken()), ["claim 2 from 0/10750"]);
    a.answer(waiting(0, 2), &[]);
    assert_eq!(
        a.step(|m| m.tick()),
        ["claim 1 from 0/10750"],
        "a poll starts at the floor too"
    );
    // Promoted rows keep their old `created_at`: the next claim starts at the front.
    let promoted = ClaimAnswer {
        promoted: 1,
        ..head(12_000, 1)
    };
    assert_eq!(
        a.answer(promoted, &["f"]),
        ["run f Claimed", "claim 1", "poll 1s"]
    );
    a.answer(head(13_000, 2), &["g"]);
    a.step(|m| m.claim_failed(false));
    assert_eq!(
        a.exit("d", false),
        ["claim 1"],
        "a failed claim drops the floor"
    );
}

#[test]
fn a_row_found_below_the_floor_sends_the_next_claim_to_the_front() {
    let (mut a, _) = Actor::new(limited(4));
    let head = |created_at, seen| ClaimAnswer {
        head: Some((0, created_at)),
        ..waiting(seen, 4)
    };
    a.answer(head(10_000, 5), &["a", "b", "c", "d"]);
    assert_eq!(a.exit("a", false), ["claim 1 from 0/9750"]);
    // The survey's answer arrives while a claim is in flight: the claim after it goes unfloored.
    assert!(a.step(|m| m.below_floor((0, 9_750))).is_empty());
    a.answer(waiting(0, 1), &[]);
    assert_eq!(a.step(|m| m.woken()), ["claim 1"]);
    a.answer(head(12_000, 2), &["e"]);
    assert_eq!(a.exit("b", false), ["claim 1 from 0/11750"]);
    a.step(|m| m.claim_failed(false));
    assert_eq!(a.exit("c", false), ["claim 2"]);
    a.answer(head(10_000, 2), &[]);
    // A survey of a floor above today's: the claim from the front since read what it saw.
    assert!(a.step(|m| m.below_floor((0, 11_750))).is_empty());
    assert_eq!(a.step(|m| m.below_floor((0, 9_750))), ["claim 2"]);
}

#[test]
fn partitioned_claims_take_no_floor() {
    let (mut a, _) = Actor::new(limited(2).partitioned(true));
    let head = ClaimAnswer {
        head: Some((0, 10_000)),
        ..waiting(3, 2)
    };
    a.answer(head, &["a", "b"]);
    assert_eq!(a.exit("a", false), ["claim 1"]);
}
