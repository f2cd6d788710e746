//! Where a call goes on a sharded layout (`shards.rs`): the bucket of a workflow named by id,
//! every bucket for what reads or sweeps them all, and a batch split by bucket. On one bucket
//! (plain Postgres) every answer is the home, with no statement and no lookup.

use std::sync::Arc;

use sqlx::Row;

use super::shards::Shards;
use super::sql::Sql;
use super::Postgres;
use crate::error::DbError;

/// Which buckets hold workflow `$1` (read in one bucket).
const HOLDS: &str = "SELECT EXISTS (SELECT 1 FROM {s}.workflow_status WHERE workflow_uuid = $1)";

/// The children of workflows `$1` in one bucket.
const CHILDREN: &str =
    "SELECT workflow_uuid FROM {s}.workflow_status WHERE parent_workflow_id = ANY($1::text[])";

/// Finds buckets: what a store and its lanes share.
#[derive(Clone)]
pub(super) struct Router {
    pub(super) pool: sqlx::PgPool,
    pub(super) shards: Arc<Shards>,
}

impl Postgres {
    /// This store's router.
    pub(super) fn router(&self) -> Router {
        Router {
            pool: self.pool.clone(),
            shards: self.shards.clone(),
        }
    }

    /// Every bucket's statements, the home first.
    pub(super) fn buckets(&self) -> Arc<[Arc<Sql>]> {
        self.shards.all()
    }

    /// Workflow `root` and its descendants in every bucket (a child may live under another
    /// shard key than its parent), each remembered where it was found: one read per bucket and
    /// generation.
    pub(super) async fn descendants(&self, root: &str) -> Result<Vec<String>, DbError> {
        let mut all = vec![root.to_owned()];
        let mut frontier = all.clone();
        while !frontier.is_empty() {
            let mut next = Vec::new();
            for (b, sql) in self.buckets().iter().enumerate() {
                let rows = sql
                    .query(CHILDREN)
                    .bind(&frontier)
                    .fetch_all(&self.pool)
                    .await?;
                for row in rows {
                    let id: String = row.try_get(0)?;
                    if !all.contains(&id) && !next.contains(&id) {
                        self.shards.remember(&id, b as u16);
                        next.push(id);
                    }
                }
            }
            all.extend(next.iter().cloned());
            frontier = next;
        }
        Ok(all)
    }

    /// The statements of the bucket workflow `id` lives in ([`Router::locate`]).
    pub(super) async fn locate(&self, id: &str) -> Result<Arc<Sql>, DbError> {
        let b = self.router().locate(id).await?;
        Ok(self.shards.bucket(b))
    }
}

impl Router {
    /// Whether there is more than one bucket.
    pub(super) fn sharded(&self) -> bool {
        self.shards.sharded()
    }

    /// The bucket workflow `id` lives in: remembered, else the one its id hashes to if it is
    /// there, else the one bucket that holds it (each read once). An id in no bucket goes to
    /// the one it hashes to (the call then finds nothing, as on one bucket); an id in two (two
    /// shard keys) is refused.
    pub(super) async fn locate(&self, id: &str) -> Result<u16, DbError> {
        Ok(self
            .find(id)
            .await?
            .unwrap_or_else(|| self.shards.guess(id)))
    }

    /// The bucket workflow `id` lives in, as [`locate`](Router::locate) finds it; `None` when no
    /// bucket holds it (always `Some` on one bucket, which is not read).
    pub(super) async fn find(&self, id: &str) -> Result<Option<u16>, DbError> {
        let guess = self.shards.guess(id);
        if self.shards.knows(id) {
            return Ok(Some(guess));
        }
        if self.holds(&self.shards.bucket(guess), id).await? {
            self.shards.remember(id, guess);
            return Ok(Some(guess));
        }
        let mut found = Vec::new();
        for (b, sql) in self.shards.all().iter().enumerate() {
            if b as u16 != guess && self.holds(sql, id).await? {
                found.push(b as u16);
            }
        }
        match found.as_slice() {
            [] => Ok(None),
            [b] => {
                self.shards.remember(id, *b);
                Ok(Some(*b))
            }
            _ => Err(DbError::AmbiguousWorkflow {
                id: id.to_owned(),
                buckets: found,
            }),
        }
    }

    /// The buckets of `ids`, in order.
    pub(super) async fn locate_all<'a>(
        &self,
        ids: impl Iterator<Item = &'a str>,
    ) -> Result<Vec<u16>, DbError> {
        let mut out = Vec::new();
        for id in ids {
            out.push(self.locate(id).await?);
        }
        Ok(out)
    }

    async fn holds(&self, sql: &Sql, id: &str) -> Result<bool, DbError> {
        Ok(sql
            .query(HOLDS)
            .bind(id)
            .fetch_one(&self.pool)
            .await?
            .try_get(0)?)
    }
}

/// `items` split by bucket (`bucket_of`), each group with the places its items had, in order
/// of first appearance: the calls of a batch that go to one bucket, and where their answers go.
pub(super) fn split<T: Copy>(
    items: &[T],
    mut bucket_of: impl FnMut(T) -> u16,
) -> Vec<(u16, Vec<usize>, Vec<T>)> {
    let mut groups: Vec<(u16, Vec<usize>, Vec<T>)> = Vec::new();
    for (i, &item) in items.iter().enumerate() {
        let b = bucket_of(item);
        match groups.iter_mut().find(|(g, _, _)| *g == b) {
            Some((_, places, group)) => {
                places.push(i);
                group.push(item);
            }
            None => groups.push((b, vec![i], vec![item])),
        }
    }
    groups
}

/// [`split`] by buckets known beforehand, one per item.
pub(super) fn split_by<T: Copy>(items: &[T], buckets: &[u16]) -> Vec<(u16, Vec<usize>, Vec<T>)> {
    let mut at = 0;
    split(items, |_| {
        at += 1;
        buckets[at - 1]
    })
}

/// The answers of `groups` (from [`split`]) put back in the places their items had.
pub(super) fn merge<A>(len: usize, groups: Vec<(Vec<usize>, Vec<A>)>) -> Result<Vec<A>, DbError> {
    let mut out: Vec<Option<A>> = (0..len).map(|_| None).collect();
    for (places, answers) in groups {
        if places.len() != answers.len() {
            return Err(DbError::Query("a bucket answered a batch short".into()));
        }
        for (i, a) in places.into_iter().zip(answers) {
            out[i] = Some(a);
        }
    }
    out.into_iter()
        .map(|a| a.ok_or_else(|| DbError::Query("a batch went unanswered".into())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_splits_by_bucket_and_its_answers_come_back_in_place() {
        let items = [("a", 0u16), ("b", 2), ("c", 0), ("d", 1), ("e", 2)];
        let groups = split(&items, |(_, b)| b);
        let buckets: Vec<u16> = groups.iter().map(|(b, _, _)| *b).collect();
        assert_eq!(buckets, [0, 2, 1]);
        let answered = groups
            .into_iter()
            .map(|(_, places, group)| {
                (
                    places,
                    group.iter().map(|(id, _)| id.to_uppercase()).collect(),
                )
            })
            .collect();
        assert_eq!(
            merge(items.len(), answered).unwrap(),
            ["A", "B", "C", "D", "E"]
        );
    }
}
