//! The `workflow_schedules` table and the firing statement on SQLite. Firing is one write
//! transaction (the overlap check included): runs that exist already are left alone, so a
//! firing is never enqueued twice. Waking the queue is the caller's.

use async_trait::async_trait;
use sqlx::AssertSqlSafe;

use super::Sqlite;
use crate::base::clock::now_ms;
use crate::base::overlap::Overlap;
use crate::error::DbError;
use crate::sysdb::rows::{all, bind_schedule, SCHEDULE_COLUMNS, SCHEDULE_SELECT};
use crate::sysdb::schedules::{pick, Schedules};
use crate::sysdb::{Fired, Firings, ScheduleRow};

#[async_trait]
impl Schedules for Sqlite {
    async fn list_schedules(&self, app: Option<&str>) -> Result<Vec<ScheduleRow>, DbError> {
        let sql = format!(
            "SELECT {SCHEDULE_SELECT} FROM workflow_schedules \
             LEFT JOIN stead_schedule_policies p USING (schedule_name) \
             WHERE application_name = ?1 OR application_name IS NULL ORDER BY schedule_name"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(app)
            .fetch_all(self.reader())
            .await?;
        all(&rows, ScheduleRow::from_row)
    }

    async fn get_schedule(&self, name: &str) -> Result<Option<ScheduleRow>, DbError> {
        let sql = format!(
            "SELECT {SCHEDULE_SELECT} FROM workflow_schedules \
             LEFT JOIN stead_schedule_policies p USING (schedule_name) WHERE schedule_name = ?1"
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(name)
            .fetch_optional(self.reader())
            .await?;
        Ok(row.as_ref().map(ScheduleRow::from_row).transpose()?)
    }

    async fn put_schedule(&self, s: &ScheduleRow, replace: bool) -> Result<Option<bool>, DbError> {
        let mut tx = self.write().await?;
        let exists = sqlx::query("SELECT 1 FROM workflow_schedules WHERE schedule_name = ?1")
            .bind(&s.name)
            .fetch_optional(&mut *tx)
            .await?
            .is_some();
        let sql = format!(
            "INSERT INTO workflow_schedules AS w ({SCHEDULE_COLUMNS}) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) \
             ON CONFLICT (schedule_name) DO UPDATE SET workflow_name = excluded.workflow_name, \
               workflow_class_name = excluded.workflow_class_name, schedule = excluded.schedule, \
               context = excluded.context, automatic_backfill = excluded.automatic_backfill, \
               cron_timezone = excluded.cron_timezone, queue_name = excluded.queue_name, \
               application_name = COALESCE(w.application_name, excluded.application_name) \
             WHERE ?13"
        );
        let written = bind_schedule(sqlx::query(AssertSqlSafe(sql)), s)
            .bind(replace)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            > 0;
        if written {
            // No row for DBOS's default policy.
            sqlx::query("DELETE FROM stead_schedule_policies WHERE schedule_name = ?1")
                .bind(&s.name)
                .execute(&mut *tx)
                .await?;
            if s.overlap != Overlap::AllowAll || s.jitter_ms != 0 {
                sqlx::query(
                    "INSERT INTO stead_schedule_policies (schedule_name, overlap_policy, jitter_ms) \
                     VALUES (?1, ?2, ?3)",
                )
                .bind(&s.name)
                .bind(s.overlap.as_str())
                .bind(s.jitter_ms)
                .execute(&mut *tx)
                .await?;
            }
        }
        tx.commit().await?;
        Ok(written.then_some(!exists))
    }

    async fn set_schedule_status(&self, name: &str, status: &str) -> Result<bool, DbError> {
        let mut tx = self.write().await?;
        let done =
            sqlx::query("UPDATE workflow_schedules SET status = ?2 WHERE schedule_name = ?1")
                .bind(name)
                .bind(status)
                .execute(&mut *tx)
                .await?;
        tx.commit().await?;
        Ok(done.rows_affected() > 0)
    }

    async fn delete_schedule(&self, name: &str) -> Result<bool, DbError> {
        let mut tx = self.write().await?;
        sqlx::query("DELETE FROM stead_schedule_policies WHERE schedule_name = ?1")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        let done = sqlx::query("DELETE FROM workflow_schedules WHERE schedule_name = ?1")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected() > 0)
    }

    async fn fire_schedule(&self, f: &Firings) -> Result<Fired, DbError> {
        // The single writer serializes the overlap check with the insert.
        let mut tx = self.write().await?;
        let now = now_ms();
        let mut chosen: Vec<usize> = (0..f.runs.len()).collect();
        let mut others = Vec::new();
        let mut held = 0;
        if f.overlap != Overlap::AllowAll {
            let busy: Vec<(String, String)> = sqlx::query_as(
                "SELECT workflow_uuid, status FROM workflow_status WHERE schedule_name = ?1 \
                 AND status IN ('ENQUEUED', 'PENDING', 'DELAYED')",
            )
            .bind(&f.schedule)
            .fetch_all(&mut *tx)
            .await?;
            let mut fresh = Vec::new();
            for (n, (id, _, _)) in f.runs.iter().enumerate() {
                let exists = sqlx::query("SELECT 1 FROM workflow_status WHERE workflow_uuid = ?1")
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await?
                    .is_some();
                if !exists {
                    fresh.push(n);
                }
            }
            let (pick, cancel) = pick(f.overlap, &fresh, &busy);
            held = (fresh.len() - usize::from(pick.is_some())) as u64;
            chosen = pick.into_iter().collect();
            others = cancel;
        }
        let mut created = 0;
        for n in chosen {
            let (id, inputs, due) = &f.runs[n];
            let inserted = sqlx::query(
                "INSERT INTO workflow_status (
                    workflow_uuid, status, name, class_name, queue_name, application_version,
                    application_name, schedule_name, serialization, created_at, updated_at,
                    recovery_attempts, priority, delay_until_epoch_ms)
                 VALUES (?1, CASE WHEN ?9 IS NULL THEN 'ENQUEUED' ELSE 'DELAYED' END, ?2, ?3,
                    ?4, ?5, ?6, ?7, 'portable_json', ?8, ?8, 0, 0, ?9)
                 ON CONFLICT DO NOTHING",
            )
            .bind(id)
            .bind(&f.workflow)
            .bind(&f.class_name)
            .bind(&f.queue)
            .bind(&f.app_version)
            .bind(&f.app_name)
            .bind(&f.schedule)
            .bind(now + n as i64)
            .bind(due)
            .execute(&mut *tx)
            .await?
            .rows_affected()
                > 0;
            if !inserted {
                continue;
            }
            created += 1;
            sqlx::query(
                "INSERT INTO workflow_input (workflow_uuid, inputs, retention_timestamp) \
                 VALUES (?1, ?2, ?3) ON CONFLICT (workflow_uuid) DO NOTHING",
            )
            .bind(id)
            .bind(inputs)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        if let Some(fired) = &f.last_fired_at {
            sqlx::query(
                "UPDATE workflow_schedules SET last_fired_at = ?2 WHERE schedule_name = ?1",
            )
            .bind(&f.schedule)
            .bind(fired)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        if created == 0 {
            others.clear();
        }
        Ok(Fired {
            created,
            others,
            held,
        })
    }
}
