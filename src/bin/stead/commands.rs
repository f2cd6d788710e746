//! Runs each command through `stead::Client` (or `Client::migrate`) and renders its result.
//! Every database access goes through the library; this module builds no SQL.
//!
//! **Paging** (CLI and dashboard). `workflow list` reads one row past `--limit` to know whether
//! another page exists; only when it does is the total counted (`count_workflows`, one `GROUP BY
//! status` query with the list's filters), so its hint says "showing N of M from offset O; use
//! --offset N+O", on stderr and only under tables. The dashboard's pages work the same way (Older
//! is disabled on a short page); its status chips show `GET /api/counts` under the name and queue
//! filters, and the heading the total of the checked statuses. The list's error column (CLI and
//! API) loads the rows' payloads; JSON output shows inputs and outputs only with `--payloads`.
//! `queue list`, `GET /api/queues` and the dashboard's queue table read every application's
//! definitions (`list_all_queues`), each with its app; `--app` / `?app=` narrow them to one
//! application's and shared ones.
//!
//! **Batches** (`workflow cancel|resume|delete|move --where ...`) run through
//! `Client::run_batch`; each page's progress goes to stderr as it happens (not under `--json`),
//! the totals to stdout.
//!
//! `workflow steps` pages the same way, by function id (`client::steps`): at most `--limit`
//! steps after `--after`, and when more follow, a note naming the `--after` of the next page.

use serde_json::json;
use stead::{
    client::Batch, client::ClientOptions, client::ForkOptions, client::ListSteps,
    client::ListWorkflows, client::Retention, client::UpdateOptions, client::WorkflowInfo,
    workflow::Attributes, Client, Error, WorkflowOptions,
};

use crate::args::{
    BatchArgs, ClientCommand, ExecutorCommand, ForkArgs, GcArgs, ListArgs, QueueCommand,
    ScheduleCommand, StepsArgs, WorkflowCommand,
};
use crate::output::{self, QueueView, Rendered};

/// Migrates the schema named in `options`; needs no client (the schema may not exist yet).
pub async fn migrate(url: &str, options: &ClientOptions) -> stead::Result<Rendered> {
    let report = Client::migrate(url, options).await?;
    let found = report
        .found_version
        .map_or_else(|| "none".to_owned(), |v| v.to_string());
    let text = if report.applied {
        format!(
            "migrated schema '{}' to version {} (was: {found})\n",
            report.schema, report.version
        )
    } else {
        format!(
            "schema '{}' is already at version {}; nothing to do\n",
            report.schema, report.version
        )
    };
    let value = json!({
        "schema": report.schema,
        "found_version": report.found_version,
        "version": report.version,
        "applied": report.applied,
    });
    Ok(Rendered::new(&value, text))
}

/// Runs a command on a connected client; a batch prints a line per page on stderr when
/// `progress` is set.
pub async fn run(
    client: &Client,
    app: Option<&str>,
    command: ClientCommand,
    progress: bool,
) -> stead::Result<Rendered> {
    match command {
        ClientCommand::Workflow(cmd) => workflow(client, cmd, progress).await,
        ClientCommand::Queue(cmd) => queue(client, app, cmd).await,
        ClientCommand::Schedule(cmd) => schedule(client, cmd).await,
        ClientCommand::Gc(args) => gc(client, args).await,
        ClientCommand::Executor(ExecutorCommand::List) => {
            let executors = client.list_executors().await?;
            Ok(Rendered::new(&executors, output::executors(&executors)))
        }
    }
}

async fn queue(
    client: &Client,
    app: Option<&str>,
    command: QueueCommand,
) -> stead::Result<Rendered> {
    let (action, name, changed) = match command {
        QueueCommand::List => {
            // With --app, that application's queues (and shared ones); else every application's.
            let paused = client.paused_queues().await?;
            let views: Vec<QueueView> = client
                .all_queues()
                .await?
                .iter()
                .filter(|(owner, _)| app.is_none() || owner.is_none() || owner.as_deref() == app)
                .map(|(owner, q)| {
                    let since = paused.iter().find(|p| p.name == q.name());
                    QueueView::new(owner.as_deref(), q, since.map(|p| p.paused_at_ms))
                })
                .collect();
            return Ok(Rendered::new(&views, output::queues(&views)));
        }
        QueueCommand::Pause { name } => {
            let changed = client.pause_queue(&name).await?;
            ("paused", name, changed)
        }
        QueueCommand::Resume { name } => {
            let changed = client.resume_queue(&name).await?;
            ("resumed", name, changed)
        }
    };
    let value = json!({ "action": action, "queue": name, "changed": changed });
    let text = if changed {
        format!("{action} queue '{name}'\n")
    } else {
        format!("queue '{name}' was already {action}\n")
    };
    Ok(Rendered::new(&value, text))
}

async fn workflow(
    client: &Client,
    command: WorkflowCommand,
    progress: bool,
) -> stead::Result<Rendered> {
    match command {
        WorkflowCommand::List(args) => list(client, *args).await,
        WorkflowCommand::Get { id } => {
            let found = get(client, &id).await?;
            Ok(Rendered::new(&found, output::workflow(&found)))
        }
        WorkflowCommand::Steps(args) => steps(client, args).await,
        #[cfg(feature = "testing")]
        WorkflowCommand::Export { id, output } => {
            let history = client.export_history(&id).await?;
            let mut rendered = Rendered::new(&history, history.to_json() + "\n");
            if let Some(file) = output {
                rendered.note = Some(format!(
                    "exported workflow '{id}' ({} calls) to {}",
                    history.steps.len(),
                    file.display()
                ));
                rendered.files = vec![(file, rendered.text.clone())];
            }
            Ok(rendered)
        }
        #[cfg(feature = "testing")]
        WorkflowCommand::ExportAll { dir, filters } => export_all(client, dir, *filters).await,
        WorkflowCommand::Cancel {
            id: Some(id),
            children,
            ..
        } => {
            if children {
                client.cancel_with_children(&id).await?;
            } else {
                client.cancel(&id).await?;
            }
            changed(client, "cancel", &id).await
        }
        WorkflowCommand::Cancel {
            id: None, batch, ..
        } => run_batch(client, Batch::cancel, batch, progress).await,
        WorkflowCommand::Pause { id } => {
            client.pause_workflow(&id).await?;
            changed(client, "pause", &id).await
        }
        WorkflowCommand::Resume { id: Some(id), .. } => {
            client.resume(&id).await?;
            changed(client, "resume", &id).await
        }
        WorkflowCommand::Resume { id: None, batch } => {
            run_batch(client, Batch::resume, batch, progress).await
        }
        WorkflowCommand::Move { id, to, mut batch } => {
            // One workflow is a batch of one: the same rules, the same report.
            batch.filters.extend(id.map(|id| format!("id={id}")));
            run_batch(client, |f| Batch::move_to(f, to), batch, progress).await
        }
        WorkflowCommand::Fork(args) => fork(client, args).await,
        WorkflowCommand::Stranded { move_to: None } => {
            let found = client.stranded_workflows().await?;
            Ok(Rendered::new(&found, output::stranded(&found)))
        }
        WorkflowCommand::Stranded {
            move_to: Some(version),
        } => {
            let moved = client.move_stranded(&version).await?;
            let value = json!({ "action": "move", "moved": moved, "app_version": version });
            let text = format!("moved {moved} stranded workflow(s) onto version '{version}'\n");
            Ok(Rendered::new(&value, text))
        }
        WorkflowCommand::Attributes {
            id,
            pairs,
            merge,
            clear,
        } => attributes(client, &id, pairs, merge, clear).await,
        WorkflowCommand::Rewind { id, step } => {
            client.rewind(&id, step).await?;
            changed(client, "rewind", &id).await
        }
        WorkflowCommand::Update {
            id,
            name,
            input,
            update_id,
            timeout,
        } => {
            let update_id = update_id.unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
            let options = UpdateOptions::with_id(&update_id).timeout(timeout);
            let answer = client.update_json(&id, &name, &input, options).await?;
            let value = json!({ "action": "update", "id": id, "update_id": update_id,
                                "output": answer });
            let text = format!("update '{update_id}' of workflow '{id}' answered: {answer}\n");
            Ok(Rendered::new(&value, text))
        }
        WorkflowCommand::SignalWithStart {
            id,
            workflow,
            input,
            message,
            topic,
            queue,
        } => {
            let options = WorkflowOptions::with_id(&id);
            let topic = topic.as_deref();
            client
                .signal_with_start(&queue, workflow.as_str(), input, options, &message, topic)
                .await?;
            changed(client, "signal-with-start", &id).await
        }
        WorkflowCommand::Delete {
            id: None, batch, ..
        } => run_batch(client, Batch::delete, batch, progress).await,
        WorkflowCommand::Delete {
            id: Some(id),
            children,
            ..
        } => {
            if children {
                client.delete_with_children(&id).await?;
            } else {
                client.delete(&id).await?;
            }
            let value = json!({ "action": "delete", "id": id });
            Ok(Rendered::new(&value, format!("deleted workflow '{id}'\n")))
        }
    }
}

/// A batch by filter (`--where`), a page at a time, each page's progress on stderr.
async fn run_batch(
    client: &Client,
    make: impl FnOnce(ListWorkflows) -> Batch,
    args: BatchArgs,
    progress: bool,
) -> stead::Result<Rendered> {
    let mut filter = ListWorkflows::new();
    for clause in &args.filters {
        filter = filter.with_where(clause)?;
    }
    let mut batch = make(filter).page_size(args.page_size);
    if args.all {
        batch = batch.all();
    }
    if args.dry_run {
        batch = batch.dry_run();
    }
    if let Some(n) = args.max_pages {
        batch = batch.max_pages(n);
    }
    let action = batch.action();
    let totals = client
        .run_batch(batch, |p| {
            if progress {
                eprintln!("{}", output::batch_page(action, p));
            }
        })
        .await?;
    let mut value = serde_json::to_value(totals).unwrap_or_default();
    value["action"] = action.into();
    Ok(Rendered {
        json: value,
        ..Rendered::new(&(), output::batch_done(action, &totals))
    })
}

/// `workflow export-all`: one file per selected workflow, named by its id.
#[cfg(feature = "testing")]
async fn export_all(
    client: &Client,
    dir: std::path::PathBuf,
    filters: ListArgs,
) -> stead::Result<Rendered> {
    if filters.queued {
        return Err(Error::InvalidArgument(
            "--queued does not apply to export-all; select by --status instead".into(),
        ));
    }
    let histories = client.export_histories(filter(filters)).await?;
    let files: Vec<_> = histories
        .iter()
        .map(|h| (dir.join(h.file_name()), h.to_json() + "\n"))
        .collect();
    let ids: Vec<&str> = histories.iter().map(|h| h.workflow.id.as_str()).collect();
    let mut rendered = Rendered::new(&ids, String::new());
    rendered.note = Some(format!(
        "exported {} workflow(s) to {}",
        ids.len(),
        dir.display()
    ));
    rendered.files = files;
    Ok(rendered)
}

/// The filters and order of `workflow list`: newest first unless asked otherwise.
fn filter(args: ListArgs) -> ListWorkflows {
    let mut f = ListWorkflows::new().offset(args.offset);
    if !args.oldest_first {
        f = f.newest_first();
    }
    if args.limit > 0 {
        f = f.limit(args.limit);
    }
    if !args.ids.is_empty() {
        f = f.ids(args.ids);
    }
    for status in args.statuses {
        f = f.status(status);
    }
    if let Some(name) = args.name {
        f = f.name(name);
    }
    if let Some(queue) = args.queue {
        f = f.queue(queue);
    }
    if let Some(version) = args.app_version {
        f = f.app_version(version);
    }
    if let Some(executor) = args.executor {
        f = f.executor(executor);
    }
    if let Some(parent) = args.parent {
        f = f.parent(parent);
    }
    if let Some(id) = args.forked_from {
        f = f.forked_from(id);
    }
    if !args.attributes.is_empty() {
        f = f.attributes(args.attributes.into_iter().collect());
    }
    if let Some(t) = args.since {
        f = f.created_after(t);
    }
    if let Some(t) = args.until {
        f = f.created_before(t);
    }
    if args.payloads {
        f = f.with_payloads();
    }
    f
}

/// One page of workflows, and a note naming the next page when more match (one more row is
/// read to know; only then are the matches counted, for the note's total).
async fn list(client: &Client, mut args: ListArgs) -> stead::Result<Rendered> {
    let (queued, payloads, limit, offset) = (args.queued, args.payloads, args.limit, args.offset);
    if limit > 0 {
        args.limit = limit.saturating_add(1);
    }
    // The table's error column needs the errors; JSON shows payloads only when asked.
    args.payloads = true;
    let f = filter(args);
    let mut found = if queued {
        client.list_queued_workflows(f.clone()).await?
    } else {
        client.list_workflows(f.clone()).await?
    };
    let more = limit > 0 && found.len() > limit as usize;
    found.truncate(if limit > 0 {
        limit as usize
    } else {
        found.len()
    });
    let text = output::workflows(&found);
    if !payloads {
        for w in &mut found {
            (w.input, w.output, w.error) = (None, None, None);
        }
    }
    let mut rendered = Rendered::new(&found, text);
    if more {
        let counts = if queued {
            client.count_queued_workflows(f).await?
        } else {
            client.count_workflows(f).await?
        };
        let total: u64 = counts.values().sum();
        let next = offset.saturating_add(limit);
        rendered.note = Some(format!(
            "showing {limit} of {total} from offset {offset}; \
             use --offset {next} for the next page"
        ));
    }
    Ok(rendered)
}

/// One page of a workflow's steps, and a note naming the next page when more follow.
async fn steps(client: &Client, args: StepsArgs) -> stead::Result<Rendered> {
    let mut listing = ListSteps::new();
    if args.no_outputs {
        listing = listing.without_outputs();
    }
    if let Some(after) = args.after {
        listing = listing.after(after);
    }
    if args.limit > 0 {
        listing = listing.limit(args.limit);
    }
    let page = client.list_steps(&args.id, listing).await?;
    if page.steps.is_empty() {
        get(client, &args.id).await?;
    }
    let mut rendered = Rendered::new(&page.steps, output::steps(&page.steps));
    rendered.note = page.next.map(|last| {
        format!(
            "showing {} steps up to {last}; use --after {last} for the next page",
            page.steps.len()
        )
    });
    Ok(rendered)
}

/// One workflow with its payloads, or `NotFound`.
async fn get(client: &Client, id: &str) -> stead::Result<WorkflowInfo> {
    let f = ListWorkflows::new().ids([id]).with_payloads();
    client
        .list_workflows(f)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| Error::NotFound(id.to_owned()))
}

/// `workflow attributes`: changes them when asked, then shows them.
async fn attributes(
    client: &Client,
    id: &str,
    pairs: Vec<(String, serde_json::Value)>,
    merge: bool,
    clear: bool,
) -> stead::Result<Rendered> {
    let given: Attributes = pairs.into_iter().collect();
    if clear {
        client.update_workflow_attributes(id, None).await?;
    } else if merge {
        client.merge_workflow_attributes(id, given).await?;
    } else if !given.is_empty() {
        client.update_workflow_attributes(id, Some(given)).await?;
    }
    let now = get(client, id).await?.status.attributes;
    let text = match &now {
        Some(value) => format!("{value}\n"),
        None => format!("workflow '{id}' has no attributes\n"),
    };
    let value = json!({ "id": id, "attributes": now });
    Ok(Rendered::new(&value, text))
}

/// After a cancel, a pause or a resume: the workflow's status now (`PAUSED` while paused; the
/// JSON keeps the stored status and adds `paused`).
async fn changed(client: &Client, action: &str, id: &str) -> stead::Result<Rendered> {
    let now = client.handle(id).status().await?;
    let value =
        json!({ "action": action, "id": id, "status": now.status, "paused": now.is_paused() });
    let text = format!("{action}: workflow '{id}' is now {}\n", now.status_label());
    Ok(Rendered::new(&value, text))
}

async fn fork(client: &Client, args: ForkArgs) -> stead::Result<Rendered> {
    let mut options = ForkOptions::new();
    if let Some(id) = args.new_id {
        options = options.id(id);
    }
    if let Some(version) = args.app_version {
        options = options.app_version(version);
    }
    if let Some(queue) = args.queue {
        options = options.queue(queue);
    }
    let copy = client.fork(&args.id, args.step, options).await?;
    let value = json!({ "action": "fork", "id": args.id, "new_id": copy.id(), "step": args.step });
    let text = format!(
        "forked workflow '{}' from step {} as '{}'\n",
        args.id,
        args.step,
        copy.id()
    );
    Ok(Rendered::new(&value, text))
}

async fn schedule(client: &Client, command: ScheduleCommand) -> stead::Result<Rendered> {
    let (action, name) = match command {
        ScheduleCommand::List => {
            let list = client.schedules().await?;
            return Ok(Rendered::new(&list, output::schedules(&list)));
        }
        ScheduleCommand::Pause { name } => {
            client.pause_schedule(&name).await?;
            ("paused", name)
        }
        ScheduleCommand::Resume { name } => {
            client.resume_schedule(&name).await?;
            ("resumed", name)
        }
    };
    let value = json!({ "action": action, "schedule": name });
    Ok(Rendered::new(
        &value,
        format!("{action} schedule '{name}'\n"),
    ))
}

async fn gc(client: &Client, args: GcArgs) -> stead::Result<Rendered> {
    let mut policy = Retention::default();
    if let Some(age) = args.older_than {
        policy = policy.older_than(age);
    }
    if let Some(rows) = args.keep {
        policy = policy.max_rows(rows);
    }
    let deleted = client.garbage_collect(&policy).await?;
    let value = json!({ "deleted": deleted });
    let text = format!("deleted {deleted} finished workflow(s)\n");
    Ok(Rendered::new(&value, text))
}
