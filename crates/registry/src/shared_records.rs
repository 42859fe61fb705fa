//! Records every replica of a registry shares besides the snapshot
//! (approval tickets, session facts): how they are kept over the key-value
//! seam ([`store`]) and the `SharedRecords` gRPC service that serves them
//! to dispatchers ([`service`]).

mod service;
pub(crate) mod store;

pub use service::SharedRecordsService;
pub use store::SharedRecord;
