//! The connection a dispatcher keeps to one executor, which its attempts
//! are sent on: the mesh's [`Connector`](toolmesh_transport::Connector), in
//! plaintext or TLS, each call on the connection of the runtime it runs on.

/// A client connection to one executor, cheap to clone.
pub(crate) type ExecutorConnection = toolmesh_transport::Connector;
