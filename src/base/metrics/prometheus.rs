//! The optional Prometheus exporter (feature `prometheus`): installs `metrics-exporter-prometheus`
//! as the global recorder, with buckets suited to stead's histograms. It never emits metrics.

use std::net::SocketAddr;
use std::time::Duration;

pub use metrics_exporter_prometheus::PrometheusHandle;
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder};

use super::{DB_FLUSH_SIZE, QUEUE_START_DELAY};

/// Buckets of every histogram whose name ends in `_seconds`: 100 µs to 60 s.
pub const SECONDS_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
];

/// Buckets of `stead_queue_start_delay_seconds`: 1 ms to an hour (a backlog waits minutes).
pub const WAIT_BUCKETS: &[f64] = &[
    0.001, 0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0,
];

/// Buckets of `stead_db_flush_size`: powers of two up to 4096 requests.
pub const SIZE_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0,
];

/// How often histogram samples are folded into their buckets.
const UPKEEP: Duration = Duration::from_secs(5);

/// Why the exporter could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    /// Another process or listener holds the address.
    #[error("cannot serve metrics on {0}: address in use")]
    AddressInUse(SocketAddr),
    /// The address could not be listened on for another reason.
    #[error("cannot serve metrics on {addr}: {reason}")]
    Listen { addr: SocketAddr, reason: String },
    /// A global `metrics` recorder is already installed (one per process).
    #[error("a metrics recorder is already installed in this process")]
    RecorderInstalled,
    /// Called outside a tokio runtime; the listener and upkeep run as tasks on it.
    #[error("install the Prometheus exporter from within a tokio runtime")]
    NoRuntime,
    /// The exporter refused its configuration.
    #[error("cannot build the Prometheus exporter: {0}")]
    Build(String),
}

/// Installs the Prometheus recorder as the process's `metrics` recorder and serves the text
/// format over HTTP on `addr` (any path). Returns the handle, which renders the same text (for a
/// `/metrics` route of your own). Call it within a tokio runtime, before the metrics you want
/// are first emitted. Histogram buckets: [`SECONDS_BUCKETS`], [`WAIT_BUCKETS`], [`SIZE_BUCKETS`].
pub fn install_prometheus(addr: SocketAddr) -> Result<PrometheusHandle, PrometheusError> {
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| PrometheusError::NoRuntime)?;
    let (recorder, exporter) = {
        let _entered = runtime.enter();
        builder()?
            .with_http_listener(addr)
            .build()
            .map_err(|e| listen_error(addr, e))?
    };
    let handle = recorder.handle();
    // On failure the exporter is dropped unspawned, which closes its listener.
    metrics::set_global_recorder(recorder).map_err(|_| PrometheusError::RecorderInstalled)?;
    runtime.spawn(exporter);
    super::describe();
    Ok(handle)
}

/// Installs the Prometheus recorder without a listener (render the handle yourself). Call it
/// within a tokio runtime: histogram upkeep runs there.
pub fn install_prometheus_recorder() -> Result<PrometheusHandle, PrometheusError> {
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| PrometheusError::NoRuntime)?;
    let handle = builder()?
        .install_recorder()
        .map_err(|_| PrometheusError::RecorderInstalled)?;
    let upkeep = handle.clone();
    runtime.spawn(async move {
        loop {
            tokio::time::sleep(UPKEEP).await;
            upkeep.run_upkeep();
        }
    });
    super::describe();
    Ok(handle)
}

fn builder() -> Result<PrometheusBuilder, PrometheusError> {
    let build = |e: BuildError| PrometheusError::Build(e.to_string());
    PrometheusBuilder::new()
        .upkeep_timeout(UPKEEP)
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
        .map_err(build)?
        // A full name is matched before a suffix.
        .set_buckets_for_metric(Matcher::Full(QUEUE_START_DELAY.into()), WAIT_BUCKETS)
        .map_err(build)?
        .set_buckets_for_metric(Matcher::Full(DB_FLUSH_SIZE.into()), SIZE_BUCKETS)
        .map_err(build)
}

/// The exporter reports a failed bind as text; binding once more tells an address in use apart.
fn listen_error(addr: SocketAddr, e: BuildError) -> PrometheusError {
    match e {
        BuildError::FailedToCreateHTTPListener(reason) => match std::net::TcpListener::bind(addr) {
            Err(io) if io.kind() == std::io::ErrorKind::AddrInUse => {
                PrometheusError::AddressInUse(addr)
            }
            _ => PrometheusError::Listen { addr, reason },
        },
        other => PrometheusError::Build(other.to_string()),
    }
}
