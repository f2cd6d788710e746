//! Errors: [`Error`] for the public surface, [`DbError`] for the system-database layer.
//!
//! Each variant is something a caller can act on; none carries a driver type, so the
//! surface stays stable when the driver changes.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Result alias used across the public surface.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything the public API can fail with.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The runtime was configured inconsistently (a bad schema name, no database URL, ...).
    #[error("configuration error: {0}")]
    Config(String),
    /// The database URL is not one stead can use. A URL that does not parse may hold a
    /// password anywhere, so `url` is only its scheme (`mysql:…`); `reason` says what was wrong.
    #[error("invalid database URL {url}: {reason}")]
    InvalidUrl { url: String, reason: String },
    /// The system database could not be reached. `url` has its password redacted (also one
    /// given as a query parameter); `reason` is the cause's message, and the cause itself is
    /// the error's [`source`](std::error::Error::source).
    #[error("cannot connect to the system database at {url}: {reason}")]
    Connect {
        url: String,
        reason: String,
        #[source]
        source: Option<Arc<dyn std::error::Error + Send + Sync>>,
    },
    /// The database's schema is older than this version of stead needs (a client never
    /// migrates: run `stead migrate`, or launch a runtime, first).
    #[error(
        "schema {schema:?} is at version {found:?}; stead needs {needed} (run `stead migrate`)"
    )]
    SchemaTooOld {
        schema: String,
        found: Option<i64>,
        needed: i64,
    },
    /// Bringing the schema to the DBOS layout failed.
    #[error("migrating schema {schema:?} failed: {reason}")]
    Migration { schema: String, reason: String },
    /// No workflow of this name is registered with the runtime.
    #[error("no workflow named {0:?} is registered")]
    UnknownWorkflow(String),
    /// Two registrations used the same workflow name.
    #[error("workflow {0:?} is registered twice")]
    DuplicateWorkflow(String),
    /// A workflow with this id already exists under another workflow name.
    #[error("workflow id {id:?} already belongs to workflow {existing:?}, not {requested:?}")]
    WorkflowConflict {
        id: String,
        existing: String,
        requested: String,
    },
    /// The input given to a workflow does not deserialize into the type it was registered with.
    #[error("input for workflow {workflow:?} does not fit its type: {reason}")]
    Input { workflow: String, reason: String },
    /// A value could not be turned into portable JSON.
    #[error("cannot encode {what} as portable JSON: {reason}")]
    Encode { what: String, reason: String },
    /// A stored payload could not be decoded into the requested type.
    #[error("cannot decode {what}: {reason}")]
    Decode { what: String, reason: String },
    /// A stored payload uses a serialization format stead does not read: a DBOS custom
    /// serializer's name, or none at all (a legacy row, which DBOS reads with whatever its app
    /// configured).
    #[error(
        "{what} is stored as {format:?}; stead reads \"portable_json\", \"py_pickle\" and \
         \"js_superjson\""
    )]
    UnsupportedSerialization { what: String, format: String },
    /// A stored payload in a format stead reads besides its own (DBOS Python's `py_pickle`,
    /// DBOS TypeScript's `js_superjson`) holds something stead does not decode: `refusal` names
    /// it (a pickled class or callable, an opcode, a value JSON cannot hold, a size past the
    /// limits) without quoting the payload. Nothing in the payload was run. Have the sender pass
    /// plain data, or write portable JSON.
    #[error("cannot decode {what} stored as {format:?}: {refusal}")]
    PayloadRefused {
        what: String,
        format: String,
        refusal: Refusal,
    },
    /// Replay found a different durable call at this position than the code now makes.
    #[error(
        "non-deterministic workflow {workflow_id}: call #{function_id} was recorded as \
         {recorded:?} but the code now calls {called:?}"
    )]
    NonDeterminism {
        workflow_id: String,
        function_id: u32,
        recorded: String,
        called: String,
    },
    /// `Context::patch` or `Context::deprecate_patch` ran while another durable call of the
    /// same workflow took a number, so the marker's position would depend on scheduling; call
    /// it from sequential workflow code.
    #[error(
        "patch {patch:?} of workflow {workflow_id} was called concurrently with other durable \
         calls; call it from sequential workflow code"
    )]
    PatchNondeterminism { workflow_id: String, patch: String },
    /// A rewind found the workflow still running (`PENDING`, `ENQUEUED` or `DELAYED`): only
    /// a finished workflow can be rewound, so cancel it first.
    #[error("cannot rewind workflow {id} ({status}): only a finished workflow can be rewound")]
    StillActive { id: String, status: String },
    /// A start refused an id that already exists (`WorkflowOptions::reject_existing`).
    #[error("workflow id {0:?} already exists")]
    WorkflowExists(String),
    /// A step failed (after its retries, if any).
    #[error(transparent)]
    Step(#[from] StepError),
    /// A step's last attempt ran past the step's timeout (its body was dropped).
    #[error(transparent)]
    StepTimeout(#[from] StepTimeout),
    /// The workflow finished with an error; `error` is what it returned, as stored.
    #[error("workflow {id} failed: {error}")]
    WorkflowFailed {
        id: String,
        error: Box<PortableError>,
    },
    /// The workflow was cancelled.
    #[error("workflow {id} was cancelled")]
    Cancelled { id: String },
    /// The workflow crashed more often than its recovery budget allows and was parked.
    #[error("workflow {id} exceeded its recovery attempts and was parked")]
    MaxRecoveryAttemptsExceeded { id: String },
    /// No workflow with this id exists.
    #[error("workflow {0:?} not found")]
    NotFound(String),
    /// Another execution took the workflow over (it was recovered or resumed elsewhere).
    #[error("workflow {id} is no longer owned by this execution")]
    NotOwner { id: String },
    /// The queue's deduplication id is held by a workflow that has not finished.
    #[error("queue {queue:?} already holds deduplication id {dedup_id:?} (workflow {holder})")]
    Duplicate {
        queue: String,
        dedup_id: String,
        holder: String,
    },
    /// No queue of this name is defined for the application (or this executor does not serve
    /// it). An enqueue to a queue defined later elsewhere opts out with
    /// [`WorkflowOptions::allow_undefined_queue`](crate::WorkflowOptions::allow_undefined_queue).
    #[error("queue {0:?} not found")]
    UnknownQueue(String),
    /// A queue of this name already exists.
    #[error("queue {0:?} already exists")]
    QueueExists(String),
    /// The queue was not deleted: workflows still wait on it and nothing else would run them
    /// (cancel them, or delete with [`WaitingWork::Cancel`](crate::queues::WaitingWork::Cancel)).
    #[error("queue {queue:?} still has {waiting} waiting workflow(s); cancel them first")]
    QueueNotEmpty { queue: String, waiting: i64 },
    /// No schedule of this name exists.
    #[error("schedule {0:?} not found")]
    UnknownSchedule(String),
    /// No application version of this name is registered.
    #[error("application version {0:?} not found")]
    UnknownAppVersion(String),
    /// A schedule of this name already exists.
    #[error("schedule {0:?} already exists")]
    ScheduleExists(String),
    /// Another live process holds this executor id (its liveness lock): a launch under an id
    /// in use elsewhere is refused before it touches anything.
    #[error(
        "executor id {executor_id:?} is live in another process; give each executor its own id"
    )]
    ExecutorInUse { executor_id: String },
    /// An update went to a workflow that has finished (it accepts no more updates); `status`
    /// is its final status.
    #[error("workflow {id} has finished ({status}) and accepts no updates")]
    WorkflowFinished { id: String, status: String },
    /// The workflow's validator refused the update; nothing was recorded in its history.
    /// Retrying with the same update id returns this again: send a new id to try again.
    #[error("update {update_id} of workflow {workflow_id} was rejected: {reason}")]
    UpdateRejected {
        workflow_id: String,
        update_id: String,
        reason: String,
    },
    /// The workflow accepted the update and its handler failed; the failure is the update's
    /// recorded answer.
    #[error("update {update_id} of workflow {workflow_id} failed: {error}")]
    UpdateFailed {
        workflow_id: String,
        update_id: String,
        error: String,
    },
    /// No answer came within the caller's timeout. The request stays delivered: calling again
    /// with the same update id waits for the same answer.
    #[error("update {update_id} of workflow {workflow_id} got no answer in time")]
    UpdateTimeout {
        workflow_id: String,
        update_id: String,
    },
    /// A run's history reached its limit ([`HistoryLimits`](crate::HistoryLimits)): the durable
    /// call that would have gone past it recorded nothing. Continue the workflow as a new run
    /// ([`Context::continue_as_new`](crate::Context::continue_as_new)) to start from an empty
    /// history, or raise the limit.
    #[error(
        "workflow {workflow_id} reached its history limit of {max} {limit} ({used} recorded); \
         continue it as new or raise the limit"
    )]
    HistoryLimit {
        workflow_id: String,
        limit: crate::base::limits::HistoryLimit,
        used: u64,
        max: u64,
    },
    /// A value was larger than the runtime's limit
    /// ([`RuntimeBuilder::max_value_bytes`](crate::RuntimeBuilder::max_value_bytes)); nothing
    /// of it was recorded. `call` names what would have recorded it.
    #[error("{call} is {bytes} bytes, over the limit of {limit} bytes; nothing was recorded")]
    ValueTooLarge {
        call: String,
        bytes: usize,
        limit: usize,
    },
    /// The run continued as a new run (`next`): returned by
    /// [`Context::continue_as_new`](crate::Context::continue_as_new) for the body to return, and
    /// by any durable call after it. The continued run's own outcome is already recorded.
    #[error("workflow {id} continued as {next}")]
    ContinuedAsNew { id: String, next: String },
    /// An argument was malformed (an empty id, a name with a NUL byte, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The system database failed.
    #[error("system database error: {0}")]
    Database(#[from] DbError),
    /// The runtime was shut down.
    #[error("the runtime has shut down")]
    Shutdown,
    /// The runtime stopped because a permanent actor kept failing.
    #[error("the runtime stopped after a fatal error: {0}")]
    Fatal(String),
}

impl Error {
    /// A short, stable name for the kind of error, stored as the `name` of a portable error.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Config(_) => "ConfigError",
            Error::InvalidUrl { .. } => "InvalidUrl",
            Error::Connect { .. } => "ConnectError",
            Error::Migration { .. } => "MigrationError",
            Error::SchemaTooOld { .. } => "SchemaTooOld",
            Error::UnknownWorkflow(_) => "UnknownWorkflow",
            Error::DuplicateWorkflow(_) => "DuplicateWorkflow",
            Error::WorkflowConflict { .. } => "WorkflowConflict",
            Error::Input { .. } => "InputError",
            Error::Encode { .. } => "EncodeError",
            Error::Decode { .. } => "DecodeError",
            Error::UnsupportedSerialization { .. } => "UnsupportedSerialization",
            Error::PayloadRefused { .. } => "PayloadRefused",
            Error::NonDeterminism { .. } => "NonDeterminism",
            Error::PatchNondeterminism { .. } => "PatchNondeterminism",
            Error::WorkflowExists(_) => "WorkflowExists",
            Error::StillActive { .. } => "StillActive",
            Error::Step(_) => "StepError",
            Error::StepTimeout(_) => "StepTimeout",
            Error::WorkflowFailed { .. } => "WorkflowFailed",
            Error::Cancelled { .. } => "Cancelled",
            Error::MaxRecoveryAttemptsExceeded { .. } => "MaxRecoveryAttemptsExceeded",
            Error::NotFound(_) => "NotFound",
            Error::NotOwner { .. } => "NotOwner",
            Error::Duplicate { .. } => "Duplicate",
            Error::UnknownQueue(_) => "UnknownQueue",
            Error::UnknownAppVersion(_) => "UnknownAppVersion",
            Error::QueueExists(_) => "QueueExists",
            Error::QueueNotEmpty { .. } => "QueueNotEmpty",
            Error::UnknownSchedule(_) => "UnknownSchedule",
            Error::ScheduleExists(_) => "ScheduleExists",
            Error::ExecutorInUse { .. } => "ExecutorInUse",
            Error::WorkflowFinished { .. } => "WorkflowFinished",
            Error::UpdateRejected { .. } => "UpdateRejected",
            Error::UpdateFailed { .. } => "UpdateFailed",
            Error::UpdateTimeout { .. } => "UpdateTimeout",
            Error::HistoryLimit { .. } => "HistoryLimit",
            Error::ValueTooLarge { .. } => "ValueTooLarge",
            Error::ContinuedAsNew { .. } => "ContinuedAsNew",
            Error::InvalidArgument(_) => "InvalidArgument",
            Error::Database(_) => "DatabaseError",
            Error::Shutdown => "Shutdown",
            Error::Fatal(_) => "Fatal",
        }
    }

    /// The stored form of this error when a workflow returns it.
    pub(crate) fn to_portable(&self) -> PortableError {
        match self {
            Error::Step(step) => step.to_portable(),
            Error::StepTimeout(timeout) => timeout.to_portable(),
            other => PortableError::new(other.kind(), other.to_string()),
        }
    }
}

/// Why a payload in DBOS Python's pickle or DBOS TypeScript's SuperJSON was not decoded
/// ([`Error::PayloadRefused`]). Each names what the payload asked for (an opcode, a
/// `module.name`, an annotation, a type) and never quotes its data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The pickle names a class or function outside the plain-data set stead decodes (a class
    /// instance, `os.system`, `builtins.eval`, ...). It was never imported or called.
    #[error("it names {module}.{name}, which stead never imports or calls")]
    UnsupportedGlobal { module: String, name: String },
    /// A pickle opcode stead does not decode (persistent ids, extension codes, out-of-band
    /// buffers, protocol 0-1 text opcodes).
    #[error("pickle opcode {0} is not decoded")]
    UnsupportedOpcode(String),
    /// Not a pickle of protocol 2 to 5.
    #[error("it is not a pickle of protocol 2 to 5")]
    UnsupportedProtocol,
    /// A SuperJSON type annotation stead does not decode (a registered class, a symbol, a
    /// custom type other than `Buffer`); the annotation is quoted as stored.
    #[error("SuperJSON annotation {0} is not decoded")]
    UnsupportedAnnotation(String),
    /// A value of a type with no JSON form stead reads (e.g. a `timedelta`, a datetime in a
    /// named time zone), or the wrong shape for its column.
    #[error("it holds {0}")]
    UnsupportedValue(String),
    /// A dictionary or map key that is neither a string nor an integer (named by its type).
    #[error("it has a key of type {0}; keys must be strings or integers")]
    UnsupportedKey(String),
    /// NaN or an infinity, which JSON cannot represent (stead refuses to write them too).
    #[error("it holds the non-finite number {0}, which JSON cannot represent")]
    NonFiniteFloat(String),
    /// Decoding would pass a limit (values once shared references are copied, text, digits).
    #[error("it is too large: {0}")]
    TooLarge(String),
    /// Nested deeper than the decoder's limit.
    #[error("it nests deeper than {0} levels")]
    TooDeep(usize),
    /// The value contains itself; `0` says where (a SuperJSON path, or "a pickled container").
    #[error("it contains itself ({0})")]
    Recursive(String),
    /// Not a well-formed payload of its format (truncated, bad base64, no SuperJSON marker, a
    /// path to nothing, ...).
    #[error("it is malformed: {0}")]
    Malformed(String),
}

/// Failures of system-database calls. `Transient` ones are retried by the caller; the others
/// are permanent (sorted once, in `sysdb/classify.rs`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DbError {
    /// The connection was lost or the server is restarting; the call is safe to retry.
    #[error("transient: {0}")]
    Transient(String),
    /// The statement itself failed; retrying it would fail again.
    #[error("query failed: {0}")]
    Query(String),
    /// The database refused the values written (a data exception such as a NUL byte or an
    /// over-long NOTIFY payload, a constraint, an index row too big): the same write is refused
    /// every time, so a durable call fails with this error instead of being retried.
    #[error("the system database refused the write ({code}): {reason}")]
    Refused {
        /// The database's error code (a Postgres SQLSTATE, a SQLite result code).
        code: String,
        /// The database's message.
        reason: String,
    },
    /// The runtime shut down; its database actor takes no more calls.
    #[error("the runtime's database actor has stopped")]
    Closed,
    /// A row refers to one that does not exist (e.g. a message to an unknown workflow).
    #[error("foreign key {constraint} violated")]
    MissingReference { constraint: String },
    /// Sharded mode: this workflow id names workflows under more than one shard key, and the
    /// call did not say which.
    #[error("workflow id {id:?} exists under more than one shard key (buckets {buckets:?})")]
    AmbiguousWorkflow { id: String, buckets: Vec<u16> },
}

impl DbError {
    /// True when retrying the same idempotent call may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, DbError::Transient(_))
    }
}

/// A step's failure: which step, and what each attempt reported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("step {step:?} (call #{function_id}) failed after {} attempt(s): {}", attempts.len(), attempts.last().map(String::as_str).unwrap_or(""))]
pub struct StepError {
    /// The step's name as passed to `ctx.step`.
    pub step: String,
    /// Its 1-based position among the workflow's durable calls.
    pub function_id: u32,
    /// The error message of every attempt, oldest first.
    pub attempts: Vec<String>,
    /// The last attempt's error in its stored form, when its type was registered with
    /// [`RuntimeBuilder::typed_error`](crate::RuntimeBuilder::typed_error) (read it back with
    /// [`Error::user_error`] or [`PortableError::decode`]).
    pub error: Option<Box<PortableError>>,
}

impl StepError {
    /// Stored as `{"name":"StepError","message":..,"data":{"step","function_id","attempts"}}`,
    /// and `"error"` in the data when the last attempt's error was typed.
    pub(crate) fn to_portable(&self) -> PortableError {
        let mut data = serde_json::json!({
            "step": self.step,
            "function_id": self.function_id,
            "attempts": self.attempts,
        });
        if let (Some(error), Some(fields)) = (&self.error, data.as_object_mut()) {
            fields.insert("error".into(), serde_json::json!(error));
        }
        PortableError {
            data: Some(data),
            ..PortableError::new("StepError", self.to_string())
        }
    }

    /// Rebuilds a recorded step failure; errors recorded by other writers keep their message
    /// as the only attempt.
    pub(crate) fn from_portable(p: &PortableError, step: &str, function_id: u32) -> StepError {
        let error = p
            .data
            .as_ref()
            .and_then(|d| d.get("error"))
            .and_then(|e| serde_json::from_value(e.clone()).ok());
        StepError {
            step: step.to_owned(),
            function_id,
            attempts: attempts_of(p),
            error,
        }
    }
}

/// A step attempt that ran past the step's timeout: its body's future was dropped. It is the
/// error a [`RetryPolicy`](crate::RetryPolicy)'s predicate sees for that attempt, and the
/// step's outcome ([`Error::StepTimeout`]) when the last attempt timed out.
///
/// Stored as DBOS 3.4 stores its `DBOSStepTimeoutError` (error code 18), so other SDKs read it
/// as a step timeout: `{"name":"DBOSStepTimeoutError","message":"DBOS Error 18: Step <name> was
/// cancelled after exceeding its timeout of <s> seconds","code":18,"data":{..}}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("step {step:?} (call #{function_id}) was cancelled after exceeding its timeout of {} seconds", timeout.as_secs_f64())]
pub struct StepTimeout {
    /// The step's name as passed to `ctx.step`.
    pub step: String,
    /// Its 1-based position among the workflow's durable calls.
    pub function_id: u32,
    /// The timeout each attempt had.
    pub timeout: std::time::Duration,
    /// The error message of every attempt, oldest first (empty in the per-attempt error).
    pub attempts: Vec<String>,
}

/// DBOS's name for a step timeout, and its `DBOSErrorCode.StepTimeout`.
const STEP_TIMEOUT_NAME: &str = "DBOSStepTimeoutError";
const STEP_TIMEOUT_CODE: i64 = 18;

impl StepTimeout {
    pub(crate) fn to_portable(&self) -> PortableError {
        let seconds = self.timeout.as_secs_f64();
        // Python's float text: `1.0`, not `1`, so the message reads as DBOS's own.
        let text = match seconds.fract() == 0.0 {
            true => format!("{seconds:.1}"),
            false => seconds.to_string(),
        };
        PortableError {
            code: Some(STEP_TIMEOUT_CODE.into()),
            data: Some(serde_json::json!({
                "step": self.step,
                "function_id": self.function_id,
                "timeout_seconds": seconds,
                "attempts": self.attempts,
            })),
            ..PortableError::new(
                STEP_TIMEOUT_NAME,
                format!(
                    "DBOS Error {STEP_TIMEOUT_CODE}: Step {} was cancelled after exceeding its \
                     timeout of {text} seconds",
                    self.step
                ),
            )
        }
    }

    /// Rebuilds a recorded timeout (also one DBOS recorded, whose data is absent: the timeout
    /// is then read from the message).
    fn from_portable(p: &PortableError, step: &str, function_id: u32) -> StepTimeout {
        let data = p.data.as_ref();
        let seconds = data
            .and_then(|d| d.get("timeout_seconds"))
            .and_then(serde_json::Value::as_f64)
            .or_else(|| {
                let tail = p.message.rsplit("timeout of ").next()?;
                tail.split_whitespace().next()?.parse().ok()
            })
            .filter(|s| s.is_finite() && *s >= 0.0)
            .unwrap_or(0.0);
        StepTimeout {
            step: step.to_owned(),
            function_id,
            timeout: std::time::Duration::from_secs_f64(seconds),
            attempts: attempts_of(p),
        }
    }
}

/// A recorded step failure as the error the step's caller sees: a timeout when it was stored
/// as one (by stead or DBOS), else a [`StepError`].
pub(crate) fn step_failure(p: &PortableError, step: &str, function_id: u32) -> Error {
    if p.name == STEP_TIMEOUT_NAME {
        Error::StepTimeout(StepTimeout::from_portable(p, step, function_id))
    } else {
        Error::Step(StepError::from_portable(p, step, function_id))
    }
}

/// The attempts a stored step failure lists; another writer's message is the only attempt.
fn attempts_of(p: &PortableError) -> Vec<String> {
    p.data
        .as_ref()
        .and_then(|d| d.get("attempts"))
        .and_then(|a| serde_json::from_value::<Vec<String>>(a.clone()).ok())
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| vec![p.message.clone()])
}

/// An error as DBOS stores it: `{"name", "message", "code", "data"}` in portable JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortableError {
    /// A short kind, e.g. the error type's name.
    pub name: String,
    /// The human-readable message.
    pub message: String,
    /// An optional machine-readable code (number or string).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<serde_json::Value>,
    /// Optional structured details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
}

impl PortableError {
    /// An error with a name and a message only.
    pub fn new(name: impl Into<String>, message: impl Into<String>) -> Self {
        PortableError {
            name: name.into(),
            message: message.into(),
            code: None,
            data: None,
        }
    }
}

impl std::fmt::Display for PortableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.name, self.message)
    }
}

impl std::error::Error for PortableError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_error_names_step_attempts_and_last_message() {
        let e = StepError {
            step: "charge".into(),
            function_id: 2,
            attempts: vec!["timeout".into(), "refused".into()],
            error: None,
        };
        assert_eq!(
            e.to_string(),
            "step \"charge\" (call #2) failed after 2 attempt(s): refused"
        );
    }

    #[test]
    fn step_errors_survive_their_stored_form() {
        let e = StepError {
            step: "charge".into(),
            function_id: 3,
            attempts: vec!["a".into(), "b".into()],
            error: Some(Box::new(PortableError::new("PaymentError", "b"))),
        };
        assert_eq!(StepError::from_portable(&e.to_portable(), "charge", 3), e);
        let foreign = PortableError::new("ValueError", "bad");
        assert_eq!(
            StepError::from_portable(&foreign, "s", 1).attempts,
            vec!["bad".to_string()]
        );
    }

    #[test]
    fn step_timeouts_survive_their_stored_form_and_dbos_reads_as_one() {
        let t = StepTimeout {
            step: "slow".into(),
            function_id: 2,
            timeout: std::time::Duration::from_millis(200),
            attempts: vec!["a".into(), "b".into()],
        };
        let p = t.to_portable();
        assert_eq!(
            p.message,
            "DBOS Error 18: Step slow was cancelled after exceeding its timeout of 0.2 seconds"
        );
        assert!(matches!(step_failure(&p, "slow", 2), Error::StepTimeout(back) if back == t));
        // DBOS 3.4's own record of a timeout: no data, no code.
        let dbos = PortableError::new(STEP_TIMEOUT_NAME, p.message.clone());
        match step_failure(&dbos, "slow", 2) {
            Error::StepTimeout(back) => {
                assert_eq!(back.timeout, std::time::Duration::from_millis(200));
                assert_eq!(back.attempts, vec![p.message.clone()]);
            }
            other => panic!("{other:?}"),
        }
    }
}
