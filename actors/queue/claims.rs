//! The queue actor's database side: claims and their answers, surveys of the waiting rows (the
//! depth and lag gauges, a row below the floor), and take-backs after a restart. Each runs as a
//! task of the actor and answers it by message; the admission machine decides, these only ask.

use std::time::Instant;

use ractor::ActorRef;

use super::{QueueMsg, QueueState, SURVEY_GAP};
use crate::base::clock::now_ms;
use crate::base::queue::INTERNAL_QUEUE;
use crate::engine::admission::{ClaimAnswer, Decision};
use crate::engine::dispatch::Dispatch;
use crate::error::DbError;
use crate::sysdb::{ClaimOutcome, ClaimRequest, Claimed, QueueKey, Waiting};

impl QueueState {
    pub(super) fn claimed(
        &mut self,
        result: Result<ClaimOutcome, DbError>,
        began: Instant,
    ) -> Vec<Decision<Dispatch>> {
        let out = match result {
            Ok(out) => out,
            Err(e) => {
                tracing::warn!(queue = %self.def.name, error = %e, "claim failed");
                return self.admission.claim_failed(e.is_transient());
            }
        };
        let (now, ready) = (now_ms(), out.claimed.iter().map(|c| c.ready_at));
        self.metrics
            .claimed(began.elapsed(), out.rate_limited, ready, now);
        // It took every waiting row it saw: the gauges must not keep an older survey.
        if out.seen <= out.claimed.len() as i64 {
            self.waiting(began, 0, None);
        }
        let answer = ClaimAnswer {
            allowed: out.allowed,
            rate_limited: out.rate_limited,
            rate_free_at: out.rate_free_at,
            promoted: out.promoted,
            next_due: out.next_due,
            seen: out.seen,
            head: out.head,
            paused: out.paused,
        };
        let rows = out.claimed.into_iter().map(Dispatch::from).collect();
        self.admission.claimed(&answer, rows)
    }

    pub(super) fn took_back(
        &mut self,
        result: Result<Vec<Claimed>, DbError>,
    ) -> Vec<Decision<Dispatch>> {
        let rows = match result {
            Ok(rows) => {
                let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
                tracing::debug!(queue = %self.def.name, ?ids, "took back");
                rows.into_iter().map(Dispatch::from).collect()
            }
            Err(e) => {
                tracing::error!(queue = %self.def.name, error = %e,
                    "take-back failed; those workflows wait for the next launch's recovery");
                Vec::new()
            }
        };
        self.admission.took_back(rows)
    }

    /// Sends a claim of up to `limit` workflows to the database, once this process is below its
    /// resident bound and for no more than the room left (`engine::residents`; the machine sees a
    /// slow claim that took fewer rows than it saw).
    pub(super) fn claim(
        &mut self,
        myself: &ActorRef<QueueMsg>,
        limit: i64,
        floor: Option<QueueKey>,
    ) {
        let config = &self.shared.config;
        let mut request = ClaimRequest {
            queue: self.def.clone(),
            limit,
            floor,
            executor_id: config.executor_id.clone(),
            app_version: config.app_version.clone(),
            app_name: config.app_name.clone(),
            now: now_ms(),
        };
        let (db, myself) = (self.shared.db.clone(), myself.clone());
        let residents = self.shared.residents.clone();
        self.tasks.spawn(async move {
            if residents.full() {
                drop(residents.room().await);
                request.now = now_ms();
            }
            request.limit = request.limit.min(residents.headroom().max(1));
            let began = Instant::now();
            let result = db.claim(request).await;
            let _ = myself.send_message(QueueMsg::Claimed(result, began));
        });
    }

    /// Shows a view of the waiting rows read at `read`, unless a newer one is shown already.
    pub(super) fn waiting(&mut self, read: Instant, depth: i64, oldest: Option<i64>) {
        if read >= self.gauges_read {
            self.gauges_read = read;
            self.metrics.waiting(depth, oldest, now_ms());
        }
    }

    /// Surveys the queue's waiting rows, unless a survey is in flight or was sent less than
    /// [`SURVEY_GAP`] ago.
    pub(super) fn survey(&mut self, myself: &ActorRef<QueueMsg>, floor: Option<QueueKey>) {
        let read = Instant::now();
        if self.surveying || self.surveyed.is_some_and(|at| read - at < SURVEY_GAP) {
            return;
        }
        (self.surveying, self.surveyed) = (true, Some(read));
        let (db, myself, queue) = (
            self.shared.db.clone(),
            myself.clone(),
            self.def.name.clone(),
        );
        self.tasks.spawn(async move {
            let result = db
                .call_with(queue, move |sys, queue| async move {
                    sys.waiting(&queue, floor).await
                })
                .await;
            let _ = myself.send_message(QueueMsg::Surveyed(result, read, floor));
        });
    }

    /// A survey answered: the gauges show it, and a row below the floor sends the next claim to
    /// the front.
    pub(super) fn surveyed(
        &mut self,
        result: Result<Waiting, DbError>,
        read: Instant,
        floor: Option<QueueKey>,
    ) -> Vec<Decision<Dispatch>> {
        self.surveying = false;
        let waiting = match result {
            Ok(waiting) => waiting,
            Err(e) => {
                tracing::debug!(queue = %self.def.name, error = %e, "cannot survey the queue");
                return Vec::new();
            }
        };
        self.waiting(read, waiting.enqueued, waiting.oldest);
        match floor {
            Some(floor) if waiting.below_floor => self.admission.below_floor(floor),
            _ => Vec::new(),
        }
    }

    pub(super) fn take_back(&mut self, myself: &ActorRef<QueueMsg>) {
        let (db, shared, myself) = (self.shared.db.clone(), self.shared.clone(), myself.clone());
        let queue = self.def.name.clone();
        // Runs held here, resident or evicted, are not taken back (an evicted one would replay).
        let mut running: Vec<String> = self.running.keys().cloned().collect();
        running.extend(self.shared.signals.evicted.ids_in_queue(&self.def.name));
        // Rows being written as this process's own whose run has not reached an actor yet.
        running.extend(self.shared.starting.iter().map(|id| id.key().clone()));
        // Runs started after this snapshot (the statement may wait out an outage meanwhile) are
        // not in it: the statement leaves rows written since alone.
        let decided = crate::sysdb::stamped_until();
        self.tasks.spawn(async move {
            let result = db
                .call_with(
                    (shared, queue, running),
                    move |sys, (shared, queue, running)| async move {
                        let me = shared.config.executor();
                        let direct = queue == INTERNAL_QUEUE;
                        sys.redispatch(&me, &queue, direct, &running, decided).await
                    },
                )
                .await;
            let _ = myself.send_message(QueueMsg::TookBack(result));
        });
    }
}
