//! In-process wake-ups for waiting durable calls. A waiter subscribes to a key (a message topic,
//! an event, a stream); a NOTIFY relayed by the listener, or a write made in this process, wakes
//! every waiter of that key, which then re-reads the database. Waiters also poll, so a lost
//! wake-up costs at most a polling interval. Evicted workflows wait here too, as entries of
//! [`Evicted`] (no subscription, no polling): a signal on their key wakes them.

use std::sync::Arc;

use dashmap::DashMap;
use tokio::sync::Notify;

use crate::engine::evict::Evicted;

/// Wake-up points by key.
#[derive(Default)]
pub(crate) struct Signals {
    keys: DashMap<String, Arc<Notify>>,
    /// Other processes' writes are heard (a LISTEN connection is up), so polling is only a
    /// fallback and may be slow.
    heard: std::sync::atomic::AtomicBool,
    /// Other processes write to this database and none of it can be heard here (no `LISTEN`
    /// behind a transaction pooler): only polling finds their messages and events.
    deaf: std::sync::atomic::AtomicBool,
    /// Workflows evicted while waiting, by wake-up key and deadline.
    pub evicted: Evicted,
}

impl Signals {
    /// Records whether other processes' announcements reach this process.
    pub(crate) fn set_heard(&self, heard: bool) {
        self.heard
            .store(heard, std::sync::atomic::Ordering::Relaxed);
    }

    /// Marks the database as shared but unheard (see `deaf`).
    pub(crate) fn set_deaf(&self) {
        self.deaf.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// True when other processes' writes can never be heard here: a wait for them must stay
    /// resident and poll, since an evicted one is woken only by announcements.
    pub(crate) fn deaf(&self) -> bool {
        self.deaf.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// True while other processes' announcements reach this process.
    pub(crate) fn heard(&self) -> bool {
        self.heard.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Wakes the waiters of `key`.
    pub(crate) fn notify(&self, key: &str) {
        if let Some(n) = self.keys.get(key) {
            n.notify_waiters();
        }
        self.evicted.wake_key(key);
    }

    /// Wakes an evicted parent awaiting workflow `id`, which ended (resident parents are woken
    /// by its completion slot or poll). Costs an atomic load when nothing is evicted.
    pub(crate) fn child_ended(&self, id: &str) {
        self.evicted.wake_key_with(|| child_key(id));
    }

    /// Wakes every waiter (after a lost connection, when announcements may have been missed).
    pub(crate) fn notify_all(&self) {
        for n in self.keys.iter() {
            n.notify_waiters();
        }
        self.evicted.wake_keyed();
    }

    /// A subscription to `key`, held while waiting.
    pub(crate) fn subscribe<'s>(&'s self, key: String) -> Subscription<'s> {
        let notify = self.keys.entry(key.clone()).or_default().clone();
        Subscription {
            signals: self,
            key,
            notify,
        }
    }
}

/// A waiter's hold on a key; the key is forgotten when its last waiter leaves.
pub(crate) struct Subscription<'s> {
    signals: &'s Signals,
    key: String,
    notify: Arc<Notify>,
}

impl Subscription<'_> {
    pub(crate) fn notify(&self) -> &Notify {
        &self.notify
    }

    pub(crate) fn key(&self) -> &str {
        &self.key
    }
}

impl Drop for Subscription<'_> {
    fn drop(&mut self) {
        // Two holders left (the map and this one): nobody else waits on the key.
        self.signals
            .keys
            .remove_if(&self.key, |_, n| Arc::strong_count(n) <= 2);
    }
}

/// The key of messages to `destination` on `topic`, as `dbos_notifications_channel` names it.
pub(crate) fn message_key(destination: &str, topic: &str) -> String {
    format!("n:{destination}::{topic}")
}

/// The key of event `key` of workflow `id`, as `dbos_workflow_events_channel` names it.
pub(crate) fn event_key(id: &str, key: &str) -> String {
    format!("e:{id}::{key}")
}

/// The key of workflow `id`'s end, which its parent awaits (`sysdb::CHILD_CHANNEL`).
pub(crate) fn child_key(id: &str) -> String {
    format!("c:{id}")
}

/// The key of stream `key` of workflow `id`, as `dbos_streams_channel` names it.
pub(crate) fn stream_key(id: &str, key: &str) -> String {
    format!("s:{id}::{key}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_notify_wakes_the_subscribers_of_its_key_only() {
        let signals = Signals::default();
        {
            let a = signals.subscribe(message_key("wf", "t"));
            let b = signals.subscribe(event_key("wf", "t"));
            let woken = a.notify().notified();
            let quiet = b.notify().notified();
            tokio::pin!(woken, quiet);
            woken.as_mut().enable();
            quiet.as_mut().enable();
            signals.notify(&message_key("wf", "t"));
            let wait = std::time::Duration::from_millis(100);
            tokio::time::timeout(wait, woken).await.expect("woken");
            let short = std::time::Duration::from_millis(20);
            assert!(tokio::time::timeout(short, quiet).await.is_err());
        }
        assert!(
            signals.keys.is_empty(),
            "keys are forgotten with their last waiter"
        );
    }
}
