//! Keeps any upstream and the mesh in step ([`ToolSource`]: an MCP server, a gRPC service, an HTTP API): registers its tools and goes SERVING, registers them again when they change or a [`Refresh`] finds them changed, goes NOT_SERVING at once when the upstream goes away, then reconnects with backoff.

use crate::error::BridgeError;
use crate::mapping::UpstreamKind;
use crate::refresh::Refresh;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolmesh_executor::{Backoff, DynamicTool, ExecutorControl};
use tracing::{debug, error, info, warn};

/// First wait before reconnecting to an upstream that went away.
pub const BACKOFF_INITIAL: Duration = Duration::from_millis(200);
/// Longest wait between reconnection attempts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// Jittered, doubling waits between reconnections to an upstream, from
/// [`BACKOFF_INITIAL`] to [`BACKOFF_MAX`].
pub(crate) fn reconnections() -> Backoff {
    Backoff::new(BACKOFF_INITIAL, BACKOFF_MAX)
}

/// A connection that lived this long was healthy: the next failure starts
/// the backoff over.
pub(crate) const STABLE_AFTER: Duration = Duration::from_secs(30);

/// An upstream that lists tools and calls one: what the bridge follows.
///
/// Its tools call the upstream through whatever the connection holds;
/// the supervisor only opens, lists, watches and closes.
pub(crate) trait ToolSource: Send + Sync + 'static {
    /// One open connection (a session, a channel with its descriptors).
    type Connection: Send + Sync + 'static;

    /// What it offers, for the words and flags messages use.
    fn kind(&self) -> UpstreamKind;

    /// How messages name the upstream ("the MCP server `cmd`").
    fn describe(&self) -> String;

    /// The word for reaching it again: a child started again, a server
    /// reconnected to.
    fn again(&self) -> &'static str {
        "reconnecting"
    }

    /// Opens a connection; calls may use it from now on.
    fn connect(&self) -> impl Future<Output = Result<Self::Connection, BridgeError>> + Send;

    /// The tools the connection offers as the executor serves them, each
    /// calling the upstream; one that cannot join is left out with an
    /// error in the log.
    fn tools(
        &self,
        connection: &Self::Connection,
    ) -> impl Future<Output = Result<Vec<DynamicTool>, BridgeError>> + Send;

    /// Reads again what the upstream offers (its descriptors, its
    /// document) into `connection`, for [`ToolSource::tools`] to map; by
    /// default nothing, for an upstream whose tools are listed afresh each
    /// time. An error leaves what was read before in place.
    fn reread(
        &self,
        _connection: &mut Self::Connection,
    ) -> impl Future<Output = Result<(), BridgeError>> + Send {
        async { Ok(()) }
    }

    /// Waits for what matters next: the tools changed, the upstream went
    /// away, or `stop`. Dropped, between probes or during one, when a
    /// refresh comes due.
    fn watch(
        &self,
        connection: &mut Self::Connection,
        stop: &CancellationToken,
    ) -> impl Future<Output = Event> + Send;

    /// Ends a connection no longer served (calls fail fast from now on).
    fn close(&self, connection: Self::Connection) -> impl Future<Output = ()> + Send;
}

/// What [`ToolSource::watch`] saw.
pub(crate) enum Event {
    /// The upstream's tools changed: list and register them again.
    Changed,
    /// The upstream went away, and why.
    Gone(String),
    /// The bridge is stopping.
    Stopped,
}

/// How one connection ended.
enum Ended {
    /// The bridge is stopping.
    Stopped,
    /// The upstream went away.
    Gone(String),
}

/// Follows `source` until `stop`: serves `first` (the connection the
/// bridge started with), then every connection after it, reading the
/// upstream again whenever `refresh` says.
pub(crate) async fn supervise<S: ToolSource>(
    source: S,
    control: ExecutorControl,
    first: S::Connection,
    mut refresh: Refresh,
    stop: CancellationToken,
) {
    let upstream = source.describe();
    let mut backoff = reconnections();
    let mut connection = Some(first);
    // Failed attempts since the upstream went away: the first is a
    // warning, the others are not news until it is back.
    let mut failures = 0u32;
    loop {
        let current = match connection.take() {
            Some(current) => current,
            None => match source.connect().await {
                Ok(current) => {
                    if failures > 0 {
                        info!(%upstream, attempts = failures + 1, "reached the upstream again");
                    }
                    failures = 0;
                    current
                }
                Err(e) => {
                    let wait = backoff.next_wait();
                    if failures == 0 {
                        warn!(error = %e, wait_ms = wait.as_millis() as u64, "cannot reach the upstream; trying again with backoff");
                    } else {
                        debug!(error = %e, wait_ms = wait.as_millis() as u64, "cannot reach the upstream yet");
                    }
                    failures += 1;
                    if !pause(&stop, wait).await {
                        return;
                    }
                    continue;
                }
            },
        };
        let began = Instant::now();
        match serve(&source, &control, current, &mut refresh, &stop).await {
            Ended::Stopped => return,
            Ended::Gone(why) => {
                if began.elapsed() > STABLE_AFTER {
                    backoff.reset();
                }
                let wait = backoff.next_wait();
                let again = source.again();
                warn!(%upstream, why, wait_ms = wait.as_millis() as u64, "the upstream went away; its tools are out of rotation, {again} after the wait");
                if !pause(&stop, wait).await {
                    return;
                }
            }
        }
    }
}

/// Serves one connection: register its tools, SERVING, register again on
/// each change; NOT_SERVING as soon as it ends, then close it.
async fn serve<S: ToolSource>(
    source: &S,
    control: &ExecutorControl,
    mut connection: S::Connection,
    refresh: &mut Refresh,
    stop: &CancellationToken,
) -> Ended {
    let ended = follow(source, control, &mut connection, refresh, stop).await;
    control.set_serving(false).await;
    source.close(connection).await;
    ended
}

async fn follow<S: ToolSource>(
    source: &S,
    control: &ExecutorControl,
    connection: &mut S::Connection,
    refresh: &mut Refresh,
    stop: &CancellationToken,
) -> Ended {
    let upstream = source.describe();
    if let Err(e) = register(source, control, connection).await {
        return Ended::Gone(e.to_string());
    }
    control.set_serving(true).await;
    info!(%upstream, tools = control.specs().len(), "serving the upstream's tools");
    loop {
        let next = tokio::select! {
            event = source.watch(connection, stop) => Ok(event),
            cause = refresh.due() => Err(cause),
        };
        match next {
            Ok(Event::Stopped) => return Ended::Stopped,
            Ok(Event::Gone(why)) => return Ended::Gone(why),
            Ok(Event::Changed) => {
                info!(%upstream, "the upstream's tools changed; listing them again");
                if let Err(e) = register(source, control, connection).await {
                    return Ended::Gone(e.to_string());
                }
            }
            Err(cause) => {
                let cause = cause.as_str();
                debug!(%upstream, cause, "reading the upstream again");
                if let Err(e) = source.reread(connection).await {
                    warn!(%upstream, cause, error = %e, "cannot read the upstream again; serving the tools read before");
                    continue;
                }
                match register(source, control, connection).await {
                    Ok(true) => {
                        info!(%upstream, cause, tools = control.specs().len(), "the upstream's tools changed; registered them again");
                    }
                    Ok(false) => debug!(%upstream, cause, "the upstream's tools are unchanged"),
                    Err(e) => return Ended::Gone(e.to_string()),
                }
            }
        }
    }
}

/// Lists the connection's tools and serves them in place of the current
/// set; true when they differ from those served (only then are they
/// registered again).
async fn register<S: ToolSource>(
    source: &S,
    control: &ExecutorControl,
    connection: &S::Connection,
) -> Result<bool, BridgeError> {
    let tools = source.tools(connection).await?;
    match control.replace_tools(tools) {
        Ok(changed) => Ok(changed),
        Err(e) => {
            // Mapped specs are validated: this is a bridge defect.
            error!(upstream = %source.describe(), error = %e, "the upstream's tools could not be served");
            Ok(false)
        }
    }
}

/// Waits `wait` unless `stop` comes first (then false).
pub(crate) async fn pause(stop: &CancellationToken, wait: Duration) -> bool {
    tokio::select! {
        () = tokio::time::sleep(wait) => true,
        () = stop.cancelled() => false,
    }
}
