//! When a bridge reads again what its upstream offers: on SIGHUP and every `--refresh-secs`, one trigger for every kind of upstream.

use std::time::Duration;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tracing::warn;

/// How often the gRPC and OpenAPI bridges read their upstream's
/// descriptors or document again unless told otherwise.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(30);

/// What made a refresh due, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// The process got SIGHUP.
    Hangup,
    /// The interval passed.
    Interval,
}

impl Cause {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Cause::Hangup => "SIGHUP",
            Cause::Interval => "the refresh interval",
        }
    }
}

/// SIGHUP and an optional interval, merged into one stream of causes.
#[derive(Debug)]
pub(crate) struct Refresh {
    every: Option<Interval>,
    #[cfg(unix)]
    hangup: Option<tokio::signal::unix::Signal>,
}

impl Refresh {
    /// Listens for SIGHUP from now on (the process no longer ends on it)
    /// and ticks every `every` (none: on SIGHUP only), the first tick one
    /// interval from now. Needs a running Tokio runtime.
    pub(crate) fn new(every: Option<Duration>) -> Refresh {
        let every = every.filter(|e| !e.is_zero()).map(|period| {
            let mut interval = tokio::time::interval_at(Instant::now() + period, period);
            // A refresh that took long is not made up for with a burst.
            interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
            interval
        });
        #[cfg(unix)]
        let hangup = {
            use tokio::signal::unix::{SignalKind, signal};
            match signal(SignalKind::hangup()) {
                Ok(hangup) => Some(hangup),
                Err(e) => {
                    warn!(error = %e, "cannot listen for SIGHUP; the upstream is read again on the interval only");
                    None
                }
            }
        };
        Refresh {
            every,
            #[cfg(unix)]
            hangup,
        }
    }

    /// Waits until a refresh is due (forever when nothing can make one).
    pub(crate) async fn due(&mut self) -> Cause {
        let every = &mut self.every;
        let tick = async move {
            match every {
                Some(interval) => {
                    interval.tick().await;
                }
                None => std::future::pending().await,
            }
        };
        #[cfg(unix)]
        let signal = &mut self.hangup;
        #[cfg(unix)]
        let hangup = async move {
            match signal {
                Some(hangup) => {
                    if hangup.recv().await.is_none() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending().await,
            }
        };
        #[cfg(not(unix))]
        let hangup = std::future::pending::<()>();
        tokio::select! {
            () = hangup => Cause::Hangup,
            () = tick => Cause::Interval,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The interval's first tick is one period away, not at once; none
    /// (or zero) never ticks.
    #[tokio::test]
    async fn ticks_after_a_whole_period() {
        let mut refresh = Refresh::new(Some(Duration::from_millis(300)));
        let started = std::time::Instant::now();
        assert_eq!(refresh.due().await, Cause::Interval);
        assert!(started.elapsed() >= Duration::from_millis(290));
        for every in [None, Some(Duration::ZERO)] {
            let mut never = Refresh::new(every);
            let waited = tokio::time::timeout(Duration::from_millis(200), never.due()).await;
            assert!(waited.is_err(), "{every:?}");
        }
    }
}
