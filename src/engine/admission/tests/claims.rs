//! Claims and polls: a backlog announced while a claim looked, promoted or full claims, a lost
//! answer taken back, back-off under a shared limit, and the earliest wake-up kept.

use super::*;

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
