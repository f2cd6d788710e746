//! `stead`: the command line for a stead (or DBOS) system database — migrate it, list and
//! manage workflows, show queues, pause and resume schedules, garbage-collect.
//!
//! It owns argument handling, the database URL lookup and the mapping of errors to one line on
//! stderr and an exit code; it never builds SQL (everything goes through `stead::Client`).
//!
//! Exit codes: 0 success; 1 any other failure; 2 bad usage (unknown flag, bad value, no
//! database URL, invalid URL); 3 the named workflow, schedule or queue does not exist; 4 the
//! database cannot be reached.
//!
//! The binary is a client (plus `Client::migrate` for `stead migrate`); it lists newest first, at
//! most 100 rows unless `--limit` says otherwise. JSON comes from `Serialize` on the public info
//! types (`WorkflowInfo` and `ScheduleInfo` flattened into one object, statuses as their stored
//! text); queues have a view in the binary (durations in ms). A pool that cannot connect retries
//! until its timeout and then says only "timed out", so one more attempt recovers the cause for the
//! message ("connection refused").

mod args;
mod commands;
mod output;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use stead::{client::ClientOptions, Client, Error};

use crate::args::{Cli, Command};
use crate::output::Rendered;

const FAILED: u8 = 1;
const USAGE: u8 = 2;
const NOT_FOUND: u8 = 3;
const UNREACHABLE: u8 = 4;

/// Why the command failed: the line printed after `error: ` and the exit code.
struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        match e {
            // Worded by the library, as the admin API words them.
            e @ (Error::NotFound(_)
            | Error::UnknownSchedule(_)
            | Error::UnknownQueue(_)
            | Error::UnknownAppVersion(_)) => Failure::new(NOT_FOUND, e.to_string()),
            Error::Connect { url, reason, .. } => Failure::new(
                UNREACHABLE,
                format!("cannot connect to database at {url}: {reason}"),
            ),
            Error::SchemaTooOld { schema, found, .. } => {
                let state = found.map_or_else(
                    || "has no stead tables".to_owned(),
                    |v| format!("is at version {v}, older than this stead needs"),
                );
                Failure::new(
                    FAILED,
                    format!("schema '{schema}' {state}: run `stead migrate` first"),
                )
            }
            e @ (Error::InvalidUrl { .. } | Error::Config(_) | Error::InvalidArgument(_)) => {
                Failure::new(USAGE, e.to_string())
            }
            other => Failure::new(FAILED, other.to_string()),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.json;
    let outcome = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(execute(cli)),
        Err(e) => Err(Failure::new(
            FAILED,
            format!("cannot start the async runtime: {e}"),
        )),
    };
    let outcome = outcome.and_then(|rendered| save(&rendered).map(|()| rendered));
    match outcome {
        // Written to files: only the note says so.
        Ok(rendered) if !rendered.files.is_empty() => {
            if let Some(note) = &rendered.note {
                eprintln!("{note}");
            }
            ExitCode::SUCCESS
        }
        Ok(rendered) => {
            print(&rendered, json);
            // Tables are read by people; a script reading JSON chose its page itself.
            if let (Some(note), false) = (&rendered.note, json) {
                eprintln!("{note}");
            }
            ExitCode::SUCCESS
        }
        Err(failure) => {
            // One line, whatever the underlying message contains.
            let line: Vec<&str> = failure.message.split_whitespace().collect();
            eprintln!("error: {}", line.join(" "));
            ExitCode::from(failure.code)
        }
    }
}

async fn execute(cli: Cli) -> Result<Rendered, Failure> {
    let url = database_url(cli.database_url)?;
    let app = cli.app.clone();
    let progress = !cli.json;
    let options = ClientOptions {
        schema: cli.schema,
        app_name: cli.app,
        connect_timeout: cli.connect_timeout,
    };
    let command = match cli.command {
        Command::Migrate => return Ok(commands::migrate(&url, &options).await?),
        Command::Client(command) => command,
    };
    let client = Client::connect_with(&url, options).await?;
    let result = commands::run(&client, app.as_deref(), command, progress).await;
    let _ = client.shutdown(std::time::Duration::from_secs(1)).await;
    Ok(result?)
}

/// `--database-url`, else `STEAD_DATABASE_URL`, else `DATABASE_URL`.
fn database_url(flag: Option<String>) -> Result<String, Failure> {
    let from_env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    flag.or_else(|| from_env("STEAD_DATABASE_URL"))
        .or_else(|| from_env("DATABASE_URL"))
        .ok_or_else(|| {
            Failure::new(
                USAGE,
                "no database URL: pass --database-url or set STEAD_DATABASE_URL or DATABASE_URL",
            )
        })
}

/// Writes the files the result names, creating their folders.
fn save(rendered: &Rendered) -> Result<(), Failure> {
    for (file, text) in &rendered.files {
        let failed = |e: std::io::Error| {
            Failure::new(FAILED, format!("cannot write {}: {e}", file.display()))
        };
        if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(failed)?;
        }
        std::fs::write(file, text).map_err(failed)?;
    }
    Ok(())
}

/// Prints the result; a closed stdout (`stead ... | head`) is not an error worth a panic.
fn print(rendered: &Rendered, json: bool) {
    let mut out = std::io::stdout().lock();
    let _ = if json {
        let text = serde_json::to_string_pretty(&rendered.json).unwrap_or_default();
        writeln!(out, "{text}")
    } else {
        out.write_all(rendered.text.as_bytes())
    };
}
