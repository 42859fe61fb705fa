//! Following a registry that runs in another process: WatchSnapshots, with
//! reconnects; the last snapshot keeps serving while the registry is away.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use toolmesh::Snapshot;
use toolmesh::grpc::{BadAddress, MAX_SNAPSHOT_MESSAGE_BYTES, channel};
use toolmesh::pb::{WatchSnapshotsRequest, registry_client::RegistryClient};
use tracing::{info, warn};

const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Starts following the registry at `address`; the receiver holds the
/// newest snapshot seen (an empty one until the first arrives).
pub fn follow_registry(address: &str) -> Result<watch::Receiver<Arc<Snapshot>>, BadAddress> {
    let channel = channel(address)?;
    let (tx, rx) = watch::channel(Arc::new(Snapshot::empty("")));
    let address = address.to_owned();
    tokio::spawn(async move {
        let mut backoff = FIRST_BACKOFF;
        let mut connected_once = false;
        let mut outage_logged = false;
        loop {
            let mut client = RegistryClient::new(channel.clone())
                .max_decoding_message_size(MAX_SNAPSHOT_MESSAGE_BYTES);
            // Always from 0: a restarted registry counts versions anew, and
            // the first message is its newest snapshot.
            match client
                .watch_snapshots(WatchSnapshotsRequest { after_version: 0 })
                .await
            {
                Ok(stream) => {
                    let mut stream = stream.into_inner();
                    loop {
                        match stream.message().await {
                            Ok(Some(wire)) => {
                                if !connected_once || outage_logged {
                                    info!(registry = %address, epoch = %wire.epoch, version = wire.version, "following registry");
                                    connected_once = true;
                                    outage_logged = false;
                                }
                                backoff = FIRST_BACKOFF;
                                let previous = tx.borrow().clone();
                                let newer = wire.epoch != previous.epoch()
                                    || wire.version > previous.version();
                                if !newer {
                                    continue;
                                }
                                let (snapshot, skipped) = Snapshot::from_pb(&wire, Some(&previous));
                                for (tool, error) in skipped {
                                    warn!(%tool, %error, "snapshot entry left out");
                                }
                                if tx.send(Arc::new(snapshot)).is_err() {
                                    return;
                                }
                            }
                            Ok(None) => break,
                            Err(status) => {
                                if !outage_logged {
                                    warn!(registry = %address, %status, "snapshot stream broke; serving the last snapshot");
                                    outage_logged = true;
                                }
                                break;
                            }
                        }
                    }
                }
                Err(status) => {
                    if !outage_logged {
                        warn!(registry = %address, %status, "registry unreachable; serving the last snapshot");
                        outage_logged = true;
                    }
                }
            }
            if tx.is_closed() {
                return;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    });
    Ok(rx)
}
