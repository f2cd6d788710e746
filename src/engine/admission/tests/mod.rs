//! The admission machine on its own: slot accounting, the fast path, claims in flight, ordering,
//! drain, retire and take-back, driven as the queue actor drives it (each input, then `settle`).

mod accounting;
mod claims;
mod fast_path;
mod lifecycle;

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
            Decision::Claim { limit, floor } => format!(
                "claim {limit}{}",
                floor.map_or(String::new(), |(p, t)| format!(" from {p}/{t}"))
            ),
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
