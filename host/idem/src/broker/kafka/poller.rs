//! The task that polls the consumer all the time: a consumer not polled
//! within `max.poll.interval.ms` is taken out of the group by librdkafka,
//! and rebalances, commit answers and errors are heard only while it is
//! polled; but `idem consume` asks for messages only when a slot is free,
//! which a long effect may not leave for minutes. What is read ahead of
//! the consumer's asking waits here, bounded: past `read_ahead` the
//! assigned partitions are paused (still polled, delivering nothing) and
//! resumed once half of it has been taken. The positions settled are
//! committed every [`COMMIT_EVERY`].

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use rdkafka::Message;
use rdkafka::consumer::{CommitMode, Consumer};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::{COMMIT_EVERY, Consumed, Inbound, Shared, positions};

/// The running poller; it polls until the source is dropped.
pub(super) struct Poller {
    /// Dropped with the poller, which ends the loop if it is between polls.
    _stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Poller {
    /// Polls `consumer` until stopped; messages come out of the receiver.
    pub(super) fn start(
        consumer: Arc<Consumed>,
        shared: Arc<Shared>,
        read_ahead: usize,
    ) -> (Poller, mpsc::Receiver<Inbound>) {
        let read_ahead = read_ahead.max(1);
        let (tx, rx) = mpsc::channel(read_ahead);
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(poll(consumer, shared, tx, stopped, read_ahead));
        (Poller { _stop: stop, task }, rx)
    }

    /// Stops polling now: the source is dropped, and the consumer closes
    /// once the task has let it go.
    pub(super) fn abort(self) {
        self.task.abort();
    }
}

async fn poll(
    consumer: Arc<Consumed>,
    shared: Arc<Shared>,
    tx: mpsc::Sender<Inbound>,
    mut stopped: oneshot::Receiver<()>,
    read_ahead: usize,
) {
    let mut ahead: VecDeque<Inbound> = VecDeque::new();
    let mut paused = false;
    let mut tick = tokio::time::interval(COMMIT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            read = consumer.recv() => match read {
                Ok(message) => {
                    let partition = (message.topic().to_string(), message.partition());
                    // A message of a partition no longer assigned here is
                    // its new owner's (librdkafka drops most such already).
                    let serial = shared.offsets().serial(&partition);
                    if let Some(serial) = serial {
                        *shared.down() = None;
                        ahead.push_back(Inbound {
                            partition,
                            serial,
                            message: message.detach(),
                        });
                    }
                }
                // librdkafka goes on by itself (a partition's fetch error,
                // a broker away): said, not acted on.
                Err(e) => tracing::warn!(error = %e, "kafka: reading"),
            },
            permit = tx.reserve(), if !ahead.is_empty() => match permit {
                Ok(permit) => permit.send(ahead.pop_front().expect("not empty")),
                Err(_) => break,
            },
            _ = tick.tick() => {
                let sent = shared.offsets().to_commit();
                let commit = positions(&sent);
                match consumer.commit(&commit, CommitMode::Async) {
                    _ if commit.count() == 0 => {}
                    Ok(()) => {
                        let mut offsets = shared.offsets();
                        for (partition, position) in &sent {
                            offsets.committed(partition, *position);
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "kafka: committing positions"),
                }
            }
        }
        let closing = shared.closing.load(Ordering::Relaxed);
        // Paused again after each read while over: a rebalance's new
        // assignment is resumed by `post_rebalance`.
        if ahead.len() >= read_ahead {
            if let Ok(assigned) = consumer.assignment()
                && consumer.pause(&assigned).is_ok()
            {
                paused = true;
            }
        } else if paused
            && !closing
            && ahead.len() <= read_ahead / 2
            && let Ok(assigned) = consumer.assignment()
            && consumer.resume(&assigned).is_ok()
        {
            paused = false;
        }
    }
}
