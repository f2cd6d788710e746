//! Waiting for something another writer produces (a message, an event, a stream value, a
//! child's outcome), without holding a thread or a connection.

use std::future::Future;
use std::time::Duration;

use crate::clock::now_ms;
use crate::context::Context;
use crate::error::Result;
use crate::shared::Shared;

const POLL_FIRST: Duration = Duration::from_millis(50);
const POLL_MAX: Duration = Duration::from_secs(1);

/// Runs `check` until it finds something, waking on `key`'s signal and polling as a fallback,
/// until `until` (epoch ms; `None`: no limit). A workflow's wait (`ctx`) ends when it is
/// cancelled. `Ok(None)` means the time ran out.
pub(crate) async fn until_found<T, F, Fut>(
    shared: &Shared,
    key: String,
    until: Option<i64>,
    ctx: Option<&Context>,
    mut check: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let subscription = shared.signals.subscribe(key);
    let mut poll = POLL_FIRST;
    loop {
        let woken = subscription.notify().notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        if let Some(found) = check().await? {
            return Ok(Some(found));
        }
        let nap = match until {
            Some(until) => {
                let left = until - now_ms();
                if left <= 0 {
                    return Ok(None);
                }
                poll.min(Duration::from_millis(left as u64))
            }
            None => poll,
        };
        tokio::select! {
            _ = &mut woken => {}
            _ = tokio::time::sleep(nap) => poll = (poll * 2).min(POLL_MAX),
            _ = aborted(ctx) => {}
        }
        if let Some(ctx) = ctx {
            ctx.check_live()?;
        }
    }
}

async fn aborted(ctx: Option<&Context>) {
    match ctx {
        Some(ctx) => ctx.aborted().await,
        None => std::future::pending().await,
    }
}
