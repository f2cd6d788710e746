//! Cron timetables: a schedule's cron text (five fields, or six with seconds first, as DBOS's
//! `croniter(second_at_beginning=True)` reads it) evaluated in its time zone, the firing times
//! after an instant or within a range, and each firing's deterministic workflow id and input.
//!
//! Pure: it never reads the clock or the database, so it is tested with fixed instants.
//!
//! Zones come from `chrono-tz` (UTC when none); evaluation is `croner`'s. Across DST: a time in the
//! skipped hour fires once, right after the gap; a time in the repeated hour fires once, at the
//! first occurrence; interval schedules follow real time.
//!
//! **DBOS interop, checked** (the schedule tests): DBOS's client backfilling a stead schedule
//! derives the same ids, so stead's backfill over the same range enqueues nothing. Found on the
//! way: DBOS reads a schedule's context with its application's serializer (a stead schedule's JSON
//! context suits a DBOS app on the portable serializer, not one on pickle); DBOS fires only when
//! `application_versions` holds a version for the owner; DBOS writes its firings' inputs as
//! `{"args","kwargs"}` with `serialization` NULL unless its app writes portable JSON, and stead
//! refuses such rows as legacy.

use std::str::FromStr;

use chrono::{DateTime, SecondsFormat, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds};
use croner::Cron;

use crate::error::{Error, Result};

/// The most firings one catch-up or backfill call computes; a longer range is refused.
pub(crate) const MAX_FIRINGS: usize = 100_000;

/// A parsed schedule: when it fires, in which zone.
#[derive(Debug, Clone)]
pub(crate) struct Timetable {
    cron: Cron,
    tz: Tz,
}

impl Timetable {
    /// Parses `cron` (5 or 6 fields) in zone `tz` (an IANA name; UTC when `None`).
    pub(crate) fn parse(cron: &str, tz: Option<&str>) -> Result<Timetable> {
        let parsed = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(cron)
            .map_err(|e| Error::InvalidArgument(format!("invalid cron schedule {cron:?}: {e}")))?;
        Ok(Timetable {
            cron: parsed,
            tz: parse_zone(tz)?,
        })
    }

    /// The first firing strictly after `after`.
    pub(crate) fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Tz>> {
        let local = after.with_timezone(&self.tz);
        self.cron.find_next_occurrence(&local, false).ok()
    }

    /// Every firing in `[start, end)`, oldest first; an error past `MAX_FIRINGS`.
    pub(crate) fn between(
        &self,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> Result<Vec<DateTime<Tz>>> {
        let mut out = Vec::new();
        let first = self
            .cron
            .find_next_occurrence(&start.with_timezone(&self.tz), true)
            .ok();
        let mut next = first;
        while let Some(at) = next.filter(|at| at.with_timezone(&Utc) < end) {
            if out.len() == MAX_FIRINGS {
                return Err(Error::InvalidArgument(format!(
                    "the range holds more than {MAX_FIRINGS} firings"
                )));
            }
            next = self.cron.find_next_occurrence(&at, false).ok();
            out.push(at);
        }
        Ok(out)
    }
}

/// Parses an IANA zone name; `None` is UTC.
pub(crate) fn parse_zone(tz: Option<&str>) -> Result<Tz> {
    match tz {
        None => Ok(Tz::UTC),
        Some(name) => Tz::from_str(name)
            .map_err(|_| Error::InvalidArgument(format!("unknown time zone {name:?}"))),
    }
}

/// `at` as Python's `datetime.isoformat()` writes an aware time: `2025-06-15T12:30:00+02:00`,
/// with microseconds only when there are some. DBOS builds its ids and `last_fired_at` this way.
pub(crate) fn isoformat<Z: TimeZone>(at: &DateTime<Z>) -> String
where
    Z::Offset: std::fmt::Display,
{
    if at.nanosecond() / 1000 == 0 {
        at.format("%Y-%m-%dT%H:%M:%S%:z").to_string()
    } else {
        at.format("%Y-%m-%dT%H:%M:%S%.6f%:z").to_string()
    }
}

/// The workflow id of a firing, as DBOS's scheduler derives it: any executor (stead or DBOS)
/// firing the same schedule at the same instant writes the same id, so only one run is created.
pub(crate) fn firing_id(schedule: &str, at: &DateTime<Tz>) -> String {
    format!("sched-{schedule}-{}", isoformat(at))
}

/// The id of a manual trigger (DBOS's form: `sched-<name>-trigger-<now>`).
pub(crate) fn trigger_id(schedule: &str, now: &DateTime<Utc>) -> String {
    format!("sched-{schedule}-trigger-{}", isoformat(now))
}

/// A timestamp in portable JSON: RFC 3339, UTC, milliseconds, `Z`.
pub(crate) fn portable_time(at: &DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The input envelope of a firing, as DBOS writes it: the scheduled time and the schedule's
/// context as two positional arguments.
pub(crate) fn firing_inputs(at: &DateTime<Utc>, context_json: &str) -> String {
    let time = serde_json::Value::String(portable_time(at));
    format!(r#"{{"positionalArgs":[{time},{context_json}],"namedArgs":{{}}}}"#)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn six_fields_put_seconds_first_and_five_fields_mean_minutes() {
        let every_second = Timetable::parse("*/1 * * * * *", None).unwrap();
        let at = utc("2025-06-15T10:30:00.400Z");
        assert_eq!(
            every_second.next_after(at).unwrap().with_timezone(&Utc),
            utc("2025-06-15T10:30:01Z")
        );
        let second_15 = Timetable::parse("15 * * * * *", None).unwrap();
        assert_eq!(
            second_15.next_after(at).unwrap().with_timezone(&Utc),
            utc("2025-06-15T10:30:15Z")
        );
        let minutely = Timetable::parse("*/5 * * * *", None).unwrap();
        assert_eq!(
            minutely.next_after(at).unwrap().with_timezone(&Utc),
            utc("2025-06-15T10:35:00Z")
        );
    }

    #[test]
    fn bad_cron_text_and_unknown_zones_are_refused() {
        assert!(Timetable::parse("not a cron", None).is_err());
        assert!(Timetable::parse("61 * * * * *", None).is_err());
        assert!(Timetable::parse("* * * * *", Some("Mars/Olympus")).is_err());
    }

    #[test]
    fn a_daily_schedule_follows_its_zone_across_the_spring_dst_change() {
        // Paris: 2025-03-30 02:00 CET jumps to 03:00 CEST. 09:00 local is 08:00Z before the
        // change and 07:00Z after it.
        let t = Timetable::parse("0 0 9 * * *", Some("Europe/Paris")).unwrap();
        let before = t.next_after(utc("2025-03-29T00:00:00Z")).unwrap();
        assert_eq!(before.with_timezone(&Utc), utc("2025-03-29T08:00:00Z"));
        let after = t.next_after(before.with_timezone(&Utc)).unwrap();
        assert_eq!(after.with_timezone(&Utc), utc("2025-03-30T07:00:00Z"));
        assert_eq!(isoformat(&after), "2025-03-30T09:00:00+02:00");
    }

    #[test]
    fn a_time_in_the_skipped_hour_fires_once_right_after_the_gap() {
        // 02:30 does not exist in Paris on 2025-03-30: it fires at 03:00 CEST (01:00Z), once.
        let t = Timetable::parse("0 30 2 * * *", Some("Europe/Paris")).unwrap();
        let firings = t
            .between(utc("2025-03-29T12:00:00Z"), utc("2025-03-31T12:00:00Z"))
            .unwrap();
        let got: Vec<String> = firings.iter().map(isoformat).collect();
        assert_eq!(
            got,
            vec!["2025-03-30T03:00:00+02:00", "2025-03-31T02:30:00+02:00"]
        );
    }

    #[test]
    fn a_time_in_the_repeated_hour_fires_once_in_autumn() {
        // Paris: 2025-10-26 03:00 CEST falls back to 02:00 CET; 02:30 happens twice but a
        // fixed-time schedule fires once, at the first (00:30Z).
        let t = Timetable::parse("0 30 2 * * *", Some("Europe/Paris")).unwrap();
        let firings = t
            .between(utc("2025-10-25T12:00:00Z"), utc("2025-10-26T12:00:00Z"))
            .unwrap();
        assert_eq!(firings.len(), 1);
        assert_eq!(firings[0].with_timezone(&Utc), utc("2025-10-26T00:30:00Z"));
    }

    #[test]
    fn an_hourly_schedule_in_a_zone_counts_real_hours_over_a_dst_change() {
        // The spring day in Paris has 23 hours; an hourly schedule fires 23 times.
        let t = Timetable::parse("0 * * * *", Some("Europe/Paris")).unwrap();
        let day = t
            .between(utc("2025-03-29T23:00:00Z"), utc("2025-03-30T22:00:00Z"))
            .unwrap();
        assert_eq!(day.len(), 23);
    }

    #[test]
    fn between_is_start_inclusive_and_end_exclusive() {
        let t = Timetable::parse("0 * * * * *", None).unwrap();
        let got = t
            .between(utc("2025-06-15T10:00:00Z"), utc("2025-06-15T10:10:00Z"))
            .unwrap();
        assert_eq!(got.len(), 10);
        assert_eq!(got[0].with_timezone(&Utc), utc("2025-06-15T10:00:00Z"));
        assert_eq!(got[9].with_timezone(&Utc), utc("2025-06-15T10:09:00Z"));
        assert!(t
            .between(utc("2025-06-15T10:00:00Z"), utc("2025-06-15T10:00:00Z"))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn ids_and_inputs_match_dbos() {
        let t = Timetable::parse("* * * * * *", None).unwrap();
        let at = t.next_after(utc("2025-06-15T10:29:59Z")).unwrap();
        assert_eq!(
            firing_id("nightly", &at),
            "sched-nightly-2025-06-15T10:30:00+00:00"
        );
        let paris = parse_zone(Some("Europe/Paris")).unwrap();
        let local = at.with_timezone(&paris);
        assert_eq!(firing_id("n", &local), "sched-n-2025-06-15T12:30:00+02:00");
        let now = utc("2025-06-15T10:30:00.123456Z");
        assert_eq!(
            trigger_id("n", &now),
            "sched-n-trigger-2025-06-15T10:30:00.123456+00:00"
        );
        assert_eq!(
            firing_inputs(&at.with_timezone(&Utc), "null"),
            r#"{"positionalArgs":["2025-06-15T10:30:00.000Z",null],"namedArgs":{}}"#
        );
    }
}
