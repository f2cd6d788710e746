//! Request parameters: the query strings and bodies the endpoints accept, checked strictly so a
//! typo is a 400 naming the parameter instead of a silently ignored filter.

use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::Query;
use serde::Deserialize;

use super::reply::ApiError;
use crate::base::attributes::{parse_attribute, Attributes};
use crate::base::status::Status;
use crate::client::manage::{ForkOptions, ListWorkflows};
use crate::client::{Batch, ListSteps};
use crate::error::Error;

/// The most workflows one listing returns.
pub(super) const MAX_LIMIT: u32 = 1000;
/// A listing without `limit` returns this many.
const DEFAULT_LIMIT: u32 = 100;
/// The most steps one page returns.
const MAX_STEPS: u32 = 10_000;
/// A page of steps without `limit` holds this many.
const DEFAULT_STEPS: u32 = 1000;

/// A query string as its pairs, in order (a parameter may repeat).
pub(super) type QueryPairs = Result<Query<Vec<(String, String)>>, QueryRejection>;

/// The query string's pairs, or a 400 when it is not a query string.
pub(super) fn pairs(query: QueryPairs) -> Result<Vec<(String, String)>, ApiError> {
    query
        .map(|Query(pairs)| pairs)
        .map_err(|e| ApiError::bad_param("query", e.body_text()))
}

/// Parses `status`, `name`, `queue`, `app`, `attribute`, `limit`, `offset` and `order` (`asc` or
/// `desc`, the default: newest first). `status` may repeat or list several values separated by
/// commas; `attribute` is `KEY=VALUE` (see [`crate::workflow::parse_attribute`]) and may repeat.
pub(super) fn list_filter(pairs: &[(String, String)]) -> Result<ListWorkflows, ApiError> {
    let mut filter = ListWorkflows::new();
    let mut limit = DEFAULT_LIMIT;
    let mut newest_first = true;
    let mut attributes = Attributes::new();
    for (key, value) in pairs {
        match key.as_str() {
            "status" => {
                for text in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    filter = filter.status(status(text)?);
                }
            }
            "name" => filter = filter.name(value),
            "queue" => filter = filter.queue(value),
            "app" => filter = filter.app_name(value),
            "attribute" => {
                let (k, v) = parse_attribute(value)
                    .map_err(|e| ApiError::bad_param("attribute", e.to_string()))?;
                attributes.insert(k, v);
            }
            "limit" => limit = count("limit", value, MAX_LIMIT)?,
            "offset" => filter = filter.offset(count("offset", value, u32::MAX)?),
            "order" => newest_first = order(value)?,
            other => {
                return Err(unknown(
                    other,
                    "status, name, queue, app, attribute, limit, offset, order",
                ))
            }
        }
    }
    filter = filter.attributes(attributes).limit(limit);
    Ok(if newest_first {
        filter.newest_first()
    } else {
        filter
    })
}

/// Parses the filters of a count: a listing's, without its paging and order.
pub(super) fn count_filter(pairs: &[(String, String)]) -> Result<ListWorkflows, ApiError> {
    if let Some((key, _)) = pairs
        .iter()
        .find(|(k, _)| matches!(k.as_str(), "limit" | "offset" | "order"))
    {
        return Err(unknown(key, "status, name, queue, app, attribute"));
    }
    list_filter(pairs)
}

/// Parses a step listing's `outputs` (`true`, the default, or `false`), `after` (the function
/// id the page starts after: the previous page's `next_after`) and `limit`; and whether it
/// loads outputs.
pub(super) fn step_listing(pairs: &[(String, String)]) -> Result<(ListSteps, bool), ApiError> {
    let (mut listing, mut outputs) = (ListSteps::new(), true);
    let mut limit = DEFAULT_STEPS;
    for (key, value) in pairs {
        match key.as_str() {
            "outputs" => {
                outputs = value.parse().map_err(|_| {
                    ApiError::bad_param("outputs", format!("{value:?} is neither true nor false"))
                })?
            }
            "after" => listing = listing.after(function_id("after", value)?),
            "limit" => limit = positive("limit", value, MAX_STEPS)?,
            other => return Err(unknown(other, "outputs, after, limit")),
        }
    }
    if !outputs {
        listing = listing.without_outputs();
    }
    Ok((listing.limit(limit), outputs))
}

/// A step's function id, as a path segment or parameter named `name`.
pub(super) fn function_id(name: &str, text: &str) -> Result<i32, ApiError> {
    text.parse()
        .map_err(|_| ApiError::bad_param(name, format!("{text:?} is not a function id")))
}

/// Parses `app`, the only parameter of the queue listing.
pub(super) fn queue_app(pairs: &[(String, String)]) -> Result<Option<String>, ApiError> {
    let mut app = None;
    for (key, value) in pairs {
        match key.as_str() {
            "app" => app = Some(value.clone()),
            other => return Err(unknown(other, "app")),
        }
    }
    Ok(app)
}

/// Parses `minutes` (the window, default 15, at most a day) and `bucket` (seconds per bucket,
/// default 10).
pub(super) fn throughput(pairs: &[(String, String)]) -> Result<(Duration, Duration), ApiError> {
    let (mut minutes, mut bucket) = (15, 10);
    for (key, value) in pairs {
        match key.as_str() {
            "minutes" => minutes = positive("minutes", value, 24 * 60)?,
            "bucket" => bucket = positive("bucket", value, 3600)?,
            other => return Err(unknown(other, "minutes, bucket")),
        }
    }
    Ok((
        Duration::from_secs(u64::from(minutes) * 60),
        Duration::from_secs(u64::from(bucket)),
    ))
}

/// The body of `POST /api/stranded/move`: the version the stranded workflows move onto.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MoveBody {
    pub(super) app_version: String,
}

/// The body of `POST /api/batch`: the action (`cancel`, `resume`, `delete`, `move` with
/// `app_version`), its filters as `stead workflow cancel --where` takes them, `all` (required
/// when there is none), `dry_run`, `page_size` (at most `MAX_BATCH_PAGE`) and `max_pages`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BatchBody {
    action: String,
    #[serde(default, rename = "where")]
    filters: Vec<String>,
    #[serde(default)]
    all: bool,
    #[serde(default)]
    dry_run: bool,
    page_size: Option<u32>,
    max_pages: Option<u64>,
    app_version: Option<String>,
}

impl BatchBody {
    /// The batch it asks for, or a 400 naming the field that is wrong.
    pub(super) fn into_batch(self) -> Result<Batch, ApiError> {
        let mut filter = ListWorkflows::new();
        for clause in &self.filters {
            filter = filter.with_where(clause).map_err(|e| match e {
                Error::InvalidArgument(why) => ApiError::bad_param("where", why),
                other => other.into(),
            })?;
        }
        let mut batch = match (self.action.as_str(), self.app_version) {
            ("move", Some(version)) => Batch::move_to(filter, version),
            ("move", None) => return Err(ApiError::bad_param("app_version", "a move needs one")),
            (_, Some(_)) => {
                return Err(ApiError::bad_param("app_version", "only a move takes one"))
            }
            ("cancel", None) => Batch::cancel(filter),
            ("resume", None) => Batch::resume(filter),
            ("delete", None) => Batch::delete(filter),
            (other, None) => {
                return Err(ApiError::bad_param(
                    "action",
                    format!("{other:?} is not one of cancel, resume, delete, move"),
                ))
            }
        };
        if let Some(n) = self.page_size {
            batch = batch.page_size(n);
        }
        if let Some(n) = self.max_pages {
            batch = batch.max_pages(n);
        }
        if self.all {
            batch = batch.all();
        }
        if self.dry_run {
            batch = batch.dry_run();
        }
        Ok(batch)
    }
}

/// The body of a fork: the step to fork from (1 starts over) and optional id, queue and
/// application version of the copy.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ForkBody {
    step: u32,
    id: Option<String>,
    queue: Option<String>,
    app_version: Option<String>,
}

impl ForkBody {
    /// The step and the options, once the step is known to be valid.
    pub(super) fn into_options(self) -> Result<(u32, ForkOptions), ApiError> {
        if self.step == 0 {
            return Err(ApiError::bad_param("step", "steps count from 1"));
        }
        let mut options = ForkOptions::new();
        if let Some(id) = self.id {
            options = options.id(id);
        }
        if let Some(queue) = self.queue {
            options = options.queue(queue);
        }
        if let Some(version) = self.app_version {
            options = options.app_version(version);
        }
        Ok((self.step, options))
    }
}

/// The body of an attributes update: the new attributes (`null` clears them) and whether they
/// merge into the stored ones (top-level keys) instead of replacing them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AttributesBody {
    pub(super) attributes: Option<Attributes>,
    #[serde(default)]
    pub(super) merge: bool,
}

fn status(text: &str) -> Result<Status, ApiError> {
    Status::parse(&text.to_ascii_uppercase()).ok_or_else(|| {
        ApiError::bad_param(
            "status",
            format!(
                "unknown status {text:?}; one of PENDING, ENQUEUED, DELAYED, SUCCESS, ERROR, \
                 CANCELLED, MAX_RECOVERY_ATTEMPTS_EXCEEDED"
            ),
        )
    })
}

fn order(text: &str) -> Result<bool, ApiError> {
    match text {
        "desc" => Ok(true),
        "asc" => Ok(false),
        other => Err(ApiError::bad_param(
            "order",
            format!("{other:?} is neither \"asc\" nor \"desc\""),
        )),
    }
}

/// A whole number in `0..=max`.
fn count(name: &str, text: &str, max: u32) -> Result<u32, ApiError> {
    text.parse::<u32>()
        .ok()
        .filter(|n| *n <= max)
        .ok_or_else(|| {
            ApiError::bad_param(
                name,
                format!("{text:?} is not a whole number from 0 to {max}"),
            )
        })
}

/// A whole number in `1..=max`.
fn positive(name: &str, text: &str, max: u32) -> Result<u32, ApiError> {
    text.parse::<u32>()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| {
            ApiError::bad_param(
                name,
                format!("{text:?} is not a whole number from 1 to {max}"),
            )
        })
}

fn unknown(name: &str, known: &str) -> ApiError {
    ApiError::bad_param(name, format!("unknown parameter; known: {known}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn listing_parameters_are_checked() {
        let ok = pairs(&[
            ("status", "pending,Enqueued"),
            ("limit", "5"),
            ("order", "asc"),
            ("attribute", "customer=acme"),
        ]);
        assert!(list_filter(&ok).is_ok());
        for bad in [
            ("status", "RUNNING"),
            ("limit", "-1"),
            ("limit", "1001"),
            ("offset", "x"),
            ("order", "up"),
            ("attribute", "novalue"),
            ("colour", "red"),
        ] {
            let err = list_filter(&pairs(&[bad])).unwrap_err();
            assert!(format!("{err:?}").contains(bad.0), "{bad:?}: {err:?}");
        }
    }

    #[test]
    fn step_pages_are_checked() {
        let (_, outputs) = step_listing(&[]).unwrap();
        assert!(outputs, "outputs by default, as before pages");
        let page = pairs(&[("outputs", "false"), ("after", "40"), ("limit", "10")]);
        assert!(!step_listing(&page).unwrap().1);
        for bad in [
            ("outputs", "no"),
            ("after", "x"),
            ("limit", "0"),
            ("limit", "10001"),
            ("offset", "1"),
        ] {
            let err = step_listing(&pairs(&[bad])).unwrap_err();
            assert!(format!("{err:?}").contains(bad.0), "{bad:?}: {err:?}");
        }
    }

    #[test]
    fn throughput_defaults_and_bounds() {
        let (window, bucket) = throughput(&[]).unwrap();
        assert_eq!((window.as_secs(), bucket.as_secs()), (900, 10));
        assert!(throughput(&pairs(&[("minutes", "0")])).is_err());
        assert!(throughput(&pairs(&[("bucket", "3601")])).is_err());
    }

    #[test]
    fn fork_steps_count_from_one() {
        let body: ForkBody = serde_json::from_str(r#"{"step": 0}"#).unwrap();
        assert!(body.into_options().is_err());
        let body: ForkBody = serde_json::from_str(r#"{"step": 2, "id": "copy"}"#).unwrap();
        assert_eq!(body.into_options().unwrap().0, 2);
        assert!(serde_json::from_str::<ForkBody>(r#"{"step": 1, "stepp": 2}"#).is_err());
    }
}
