//! The command line `stead` accepts, parsed by clap, and the parsers of its values (durations,
//! times, statuses, attributes). It never touches the database.

use std::time::{Duration, SystemTime};

use clap::{Args, Parser, Subcommand};
use serde_json::Value;
use stead::Status;

/// Where `--help` lists the options every command takes, apart from the command's own.
const GLOBAL: &str = "Global options";

/// Inspect and manage stead (and DBOS) workflows in a system database.
#[derive(Debug, Parser)]
#[command(name = "stead", version)]
pub struct Cli {
    /// Database URL of the system database: postgres://… or sqlite://<file>
    /// [default: $STEAD_DATABASE_URL, then $DATABASE_URL]
    #[arg(short = 'd', long, global = true, value_name = "URL", help_heading = GLOBAL)]
    pub database_url: Option<String>,
    /// Schema of the system tables (Postgres)
    #[arg(long, global = true, default_value = "dbos", help_heading = GLOBAL)]
    pub schema: String,
    /// Application whose schedules are shown (rows of no application always are)
    #[arg(short = 'a', long, global = true, value_name = "NAME", help_heading = GLOBAL)]
    pub app: Option<String>,
    /// Print JSON instead of tables
    #[arg(short = 'j', long, global = true, help_heading = GLOBAL)]
    pub json: bool,
    /// How long to wait for the database (e.g. 500ms, 5s, 1m)
    #[arg(long, global = true, default_value = "5s", value_parser = parse_duration,
          help_heading = GLOBAL)]
    pub connect_timeout: Duration,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create or upgrade the system schema to the DBOS 3.4 layout
    Migrate,
    #[command(flatten)]
    Client(ClientCommand),
}

/// The commands that run on a connected client (the schema must be migrated).
#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// List, inspect, cancel, resume, fork and delete workflows
    #[command(subcommand)]
    Workflow(WorkflowCommand),
    /// Show queue definitions
    #[command(subcommand)]
    Queue(QueueCommand),
    /// List, pause and resume schedules
    #[command(subcommand)]
    Schedule(ScheduleCommand),
    /// Delete finished workflows by age or beyond a row count (never running ones)
    Gc(GcArgs),
    /// Show the fleet's executors (Postgres)
    #[command(subcommand)]
    Executor(ExecutorCommand),
}

#[derive(Debug, Subcommand)]
pub enum ExecutorCommand {
    /// List stead executors: id, host, version, application, running workflows, live or dead
    List,
}

#[derive(Debug, Subcommand)]
pub enum WorkflowCommand {
    /// List workflows, newest first
    List(Box<ListArgs>),
    /// Show one workflow with its input, output and error
    Get { id: String },
    /// List a workflow's recorded steps and other durable calls, in pages
    Steps(StepsArgs),
    /// Export a workflow's history (its status row and recorded calls) in the portable
    /// `stead.history` format, to replay against later code with `stead::testing`
    #[cfg(feature = "testing")]
    Export {
        id: String,
        /// Write the history to this file instead of standard output
        #[arg(short = 'o', long, value_name = "FILE")]
        output: Option<std::path::PathBuf>,
    },
    /// Export the histories of the workflows the filters select (as `list` selects them:
    /// newest first, at most --limit), one `<id>.json` file each, into a folder
    #[cfg(feature = "testing")]
    ExportAll {
        /// The folder the files go to (created if missing)
        #[arg(long, value_name = "DIR")]
        dir: std::path::PathBuf,
        #[command(flatten)]
        filters: Box<ListArgs>,
    },
    /// Cancel a workflow, or every one --where selects (not finished ones, nor cancelled
    /// ones); each stops before its next durable call
    Cancel {
        #[arg(required_unless_present_any = ["filters", "all"])]
        id: Option<String>,
        /// Also cancel every workflow it started, recursively
        #[arg(long, conflicts_with_all = ["filters", "all"])]
        children: bool,
        #[command(flatten)]
        batch: BatchArgs,
    },
    /// Resume a paused workflow where it stopped, a cancelled or stuck one from its last
    /// checkpoint, or every cancelled (or MAX_RECOVERY_ATTEMPTS_EXCEEDED) one --where selects
    Resume {
        #[arg(required_unless_present_any = ["filters", "all"])]
        id: Option<String>,
        #[command(flatten)]
        batch: BatchArgs,
    },
    /// Move a workflow, or every one --where selects, onto application version --to: waiting
    /// (enqueued, delayed) and parked (cancelled, max recovery attempts) ones; running and
    /// finished ones are skipped
    Move {
        #[arg(required_unless_present_any = ["filters", "all"])]
        id: Option<String>,
        /// The application version they move onto
        #[arg(long, value_name = "VERSION")]
        to: String,
        #[command(flatten)]
        batch: BatchArgs,
    },
    /// Pause a workflow: it stops before its next durable call and no executor runs it until
    /// resumed (`resume` continues it where it stopped)
    Pause { id: String },
    /// Copy a workflow into a new one that replays the steps before --step and runs the rest
    Fork(ForkArgs),
    /// List workflows of dead executors that no live executor can run (a version nobody
    /// serves), or move them onto a version that runs
    Stranded {
        /// Move every stranded workflow onto this application version (resumed from its
        /// checkpoints, for executors of that version to claim)
        #[arg(long, value_name = "VERSION")]
        move_to: Option<String>,
    },
    /// Show a workflow's attributes, or change them: KEY=VALUE pairs replace them all (or,
    /// with --merge, set only those keys); --clear removes them. A VALUE that parses as JSON is
    /// that JSON (3, true, {"a":1}); anything else is a string
    Attributes {
        id: String,
        #[arg(value_name = "KEY=VALUE", value_parser = parse_attribute)]
        pairs: Vec<(String, Value)>,
        /// Set the given keys and keep the others
        #[arg(long, requires = "pairs", conflicts_with = "clear")]
        merge: bool,
        /// Remove every attribute
        #[arg(long, conflicts_with = "pairs")]
        clear: bool,
    },
    /// Run a finished workflow again under its own id: replay the steps before --step, run
    /// the rest
    Rewind {
        id: String,
        /// The first step that runs again (1 starts over)
        #[arg(long, default_value_t = 1)]
        step: u32,
    },
    /// Send update NAME to a running workflow and print its answer (the workflow accepts it
    /// with `Context::accept_update`); the same --id again returns the same answer
    Update {
        id: String,
        name: String,
        /// The update's input, as JSON
        #[arg(long, value_name = "JSON", default_value = "null", value_parser = parse_json,
              allow_hyphen_values = true)]
        input: Value,
        /// The update id (default: a new UUID, printed); retry with it after a failure
        #[arg(long = "id", value_name = "UPDATE_ID")]
        update_id: Option<String>,
        /// How long to wait for the answer
        #[arg(long, default_value = "60s", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// Send a message to workflow ID, first enqueueing WORKFLOW under that id with --input if
    /// no workflow has it
    SignalWithStart {
        id: String,
        /// The workflow's registered name
        workflow: String,
        /// The workflow's input, as JSON
        #[arg(long, value_name = "JSON", default_value = "null", value_parser = parse_json,
              allow_hyphen_values = true)]
        input: Value,
        /// The message, as JSON
        #[arg(long, value_name = "JSON", value_parser = parse_json, allow_hyphen_values = true)]
        message: Value,
        /// The topic it is received on (default: none)
        #[arg(long)]
        topic: Option<String>,
        /// The queue the workflow is enqueued on
        #[arg(long, default_value = "_dbos_internal_queue")]
        queue: String,
    },
    /// Delete a workflow, or every one --where selects, and everything recorded for it
    Delete {
        #[arg(required_unless_present_any = ["filters", "all"])]
        id: Option<String>,
        /// Also delete every workflow it started, recursively
        #[arg(long, conflicts_with_all = ["filters", "all"])]
        children: bool,
        #[command(flatten)]
        batch: BatchArgs,
    },
}

/// A batch instead of one ID: the filters, the pages, a dry run.
#[derive(Debug, Args)]
pub struct BatchArgs {
    /// Instead of ID, every workflow matching FILTER (repeat: all must hold): KEY=VALUE with
    /// KEY one of id, status, name, queue, version, app, executor, parent, forked_from,
    /// attr.<KEY>; or created>=TIME, created<TIME (RFC 3339 or epoch ms)
    #[arg(long = "where", value_name = "FILTER", conflicts_with = "id")]
    pub filters: Vec<String>,
    /// Instead of ID, every workflow (required when no --where is given)
    #[arg(long, conflicts_with = "id")]
    pub all: bool,
    /// Change nothing: count the matches and how many would change
    #[arg(long, conflicts_with = "id")]
    pub dry_run: bool,
    /// Workflows per page, each page one transaction (1 to 1000)
    #[arg(long, value_name = "N", default_value_t = 100, conflicts_with = "id")]
    pub page_size: u32,
    /// Stop after N pages (run the same command again to go on)
    #[arg(long, value_name = "N", conflicts_with = "id")]
    pub max_pages: Option<u64>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only this status (repeat for several): pending, enqueued, delayed, success, error,
    /// cancelled, max_recovery_attempts_exceeded
    #[arg(short = 's', long = "status", value_name = "STATUS", value_parser = parse_status)]
    pub statuses: Vec<Status>,
    /// Only workflows of this name
    #[arg(short = 'n', long)]
    pub name: Option<String>,
    /// Only workflows enqueued on this queue
    #[arg(short = 'q', long)]
    pub queue: Option<String>,
    /// Only workflows waiting on or running from a queue (enqueued, delayed, pending)
    #[arg(long)]
    pub queued: bool,
    /// Only this id (repeat for several)
    #[arg(long = "id", value_name = "ID")]
    pub ids: Vec<String>,
    /// Only workflows of this application version
    #[arg(long, value_name = "VERSION")]
    pub app_version: Option<String>,
    /// Only workflows last dispatched to this executor
    #[arg(long, value_name = "ID")]
    pub executor: Option<String>,
    /// Only children of this workflow
    #[arg(long, value_name = "ID")]
    pub parent: Option<String>,
    /// Only forks of this workflow
    #[arg(long, value_name = "ID")]
    pub forked_from: Option<String>,
    /// Only workflows with this attribute (repeat for several; VALUE as in `attributes`)
    #[arg(long = "attribute", value_name = "KEY=VALUE", value_parser = parse_attribute)]
    pub attributes: Vec<(String, Value)>,
    /// Only workflows created at or after this time (RFC 3339, or a duration ago: 2h)
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub since: Option<SystemTime>,
    /// Only workflows created before this time (RFC 3339, or a duration ago: 2h)
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub until: Option<SystemTime>,
    /// At most this many workflows (0: no limit)
    #[arg(short = 'l', long, default_value_t = 100)]
    pub limit: u32,
    /// Skip this many matches first (for pages)
    #[arg(short = 'o', long, default_value_t = 0)]
    pub offset: u32,
    /// Oldest first
    #[arg(long)]
    pub oldest_first: bool,
    /// Include inputs, outputs and errors (in --json output)
    #[arg(long)]
    pub payloads: bool,
}

#[derive(Debug, Args)]
pub struct StepsArgs {
    pub id: String,
    /// Show each output's and error's size instead of its value (the database does not read
    /// them)
    #[arg(long)]
    pub no_outputs: bool,
    /// At most this many steps (0: no limit)
    #[arg(short = 'l', long, default_value_t = 1000)]
    pub limit: u32,
    /// Only steps after this function id (a page's last; --after N-1 --limit 1 shows step N)
    #[arg(long, value_name = "FUNCTION_ID", allow_negative_numbers = true)]
    pub after: Option<i32>,
}

#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The workflow to copy
    pub id: String,
    /// The first step that runs again (1 starts over)
    #[arg(short = 's', long, value_parser = clap::value_parser!(u32).range(1..))]
    pub step: u32,
    /// The copy's id [default: a new UUID]
    #[arg(long, value_name = "ID")]
    pub new_id: Option<String>,
    /// Run the copy on executors of this application version
    #[arg(long, value_name = "VERSION")]
    pub app_version: Option<String>,
    /// Enqueue the copy on this queue [default: the internal queue]
    #[arg(long)]
    pub queue: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// List queue definitions, their limits and whether each is paused
    List,
    /// Stop every executor from claiming work from a queue (enqueues are still accepted;
    /// running workflows finish)
    Pause { name: String },
    /// Let executors claim from a paused queue again
    Resume { name: String },
}

#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// List schedules
    List,
    /// Stop a schedule from firing
    Pause { name: String },
    /// Let a paused schedule fire again
    Resume { name: String },
}

#[derive(Debug, Args)]
#[group(required = true, multiple = true)]
pub struct GcArgs {
    /// Delete finished workflows created longer ago than this (e.g. 7d, 12h)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub older_than: Option<Duration>,
    /// Keep only this many newest finished workflows
    #[arg(long, value_name = "ROWS")]
    pub keep: Option<u64>,
}

/// A duration as one or more `<number><unit>` parts (`ms`, `s`, `m`, `h`, `d`, `w`), e.g.
/// `1h30m`; a bare number is seconds.
/// A JSON value (`--input`, `--message`).
pub fn parse_json(text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))
}

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration (e.g. 500ms, 30s, 5m, 2h, 7d, 1w)");
    if let Ok(secs) = text.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let number: u64 = rest[..digits].parse().map_err(|_| bad())?;
        let tail = &rest[digits..];
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(tail.len());
        let unit_ms: u64 = match &tail[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 604_800_000,
            _ => return Err(bad()),
        };
        let part = number.checked_mul(unit_ms).ok_or_else(bad)?;
        total = total
            .checked_add(Duration::from_millis(part))
            .ok_or_else(bad)?;
        rest = &tail[unit_len..];
    }
    Ok(total)
}

/// A point in time: RFC 3339 (`2026-11-29T12:00:00Z`) or a duration ago (`2h`).
pub fn parse_time(text: &str) -> Result<SystemTime, String> {
    if let Ok(at) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(at.into());
    }
    let ago = parse_duration(text)
        .map_err(|_| format!("{text:?} is neither an RFC 3339 time nor a duration ago"))?;
    SystemTime::now()
        .checked_sub(ago)
        .ok_or_else(|| format!("{text:?} reaches before the epoch"))
}

/// `KEY=VALUE` (see [`stead::workflow::parse_attribute`]).
pub fn parse_attribute(text: &str) -> Result<(String, Value), String> {
    stead::workflow::parse_attribute(text).map_err(|e| e.to_string())
}

/// A workflow status, in any letter case.
pub fn parse_status(text: &str) -> Result<Status, String> {
    Status::parse(&text.to_ascii_uppercase()).ok_or_else(|| {
        format!(
            "{text:?} is not a status (pending, enqueued, delayed, success, error, cancelled, \
             max_recovery_attempts_exceeded)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units_and_sums() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        for bad in ["", "h", "5x", "1.5h", "-3s", "99999999999999999999w"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn times_are_rfc3339_or_a_duration_ago() {
        let at = parse_time("2026-01-02T03:04:05Z").unwrap();
        let secs = at.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
        assert_eq!(secs, 1_767_323_045);
        let hour_ago = parse_time("1h").unwrap();
        let ago = SystemTime::now().duration_since(hour_ago).unwrap();
        assert!(ago >= Duration::from_secs(3600) && ago < Duration::from_secs(3660));
        assert!(parse_time("yesterday").is_err());
    }

    #[test]
    fn statuses_ignore_case() {
        assert_eq!(parse_status("success"), Ok(Status::Success));
        assert_eq!(
            parse_status("Max_Recovery_Attempts_Exceeded"),
            Ok(Status::MaxRecoveryAttemptsExceeded)
        );
        assert!(parse_status("running").is_err());
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
