//! A minimal hand-written tonic `Executor` answering `acc_echo` as the
//! fixture does (decode the arguments into a struct, echo the message,
//! count the payload's items) with no SDK: the floor the executor SDK is
//! measured against. It runs on a thread of its own with its own tokio
//! runtime (two workers, as an executor process has here), so the bench's
//! load generator does not share its scheduler.

use crate::error::BenchError;
use serde::Deserialize;
use tokio::sync::oneshot;
use tonic::{Request, Response, Status};
use toolmesh::pb::executor_server::{Executor, ExecutorServer};
use toolmesh::pb::{ExecuteRequest, ExecuteResponse, ToolResult};

/// The running server; stopped when dropped.
pub(crate) struct RawEcho {
    /// Where it listens.
    pub(crate) addr: String,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Deserialize)]
struct Args {
    message: String,
    #[serde(default)]
    payload: Option<Payload>,
}

#[derive(Deserialize)]
struct Payload {
    items: Vec<serde::de::IgnoredAny>,
}

struct Echo;

#[tonic::async_trait]
impl Executor for Echo {
    async fn execute(
        &self,
        request: Request<ExecuteRequest>,
    ) -> Result<Response<ExecuteResponse>, Status> {
        let args: Args = serde_json::from_str(&request.get_ref().arguments)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let items = args.payload.map_or(0, |p| p.items.len());
        let data = serde_json::json!({"message": args.message, "items": items}).to_string();
        Ok(Response::new(ExecuteResponse {
            result: Some(ToolResult {
                output: args.message,
                data,
                ..ToolResult::default()
            }),
        }))
    }

    type ExecuteStreamStream = tonic::codegen::BoxStream<toolmesh::pb::ExecuteEvent>;

    async fn execute_stream(
        &self,
        _: Request<ExecuteRequest>,
    ) -> Result<Response<Self::ExecuteStreamStream>, Status> {
        Err(Status::unimplemented("the raw echo does not stream"))
    }
}

impl RawEcho {
    /// Starts it on 127.0.0.1, port chosen by the system.
    pub(crate) fn start() -> Result<RawEcho, BenchError> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .map_err(|e| BenchError::io("bind the raw echo server", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| BenchError::io("read the raw echo server's address", e))?
            .to_string();
        listener
            .set_nonblocking(true)
            .map_err(|e| BenchError::io("set the raw echo listener non-blocking", e))?;
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("raw-echo".into())
            .spawn(move || serve(listener, stopped))
            .map_err(|e| BenchError::io("start the raw echo thread", e))?;
        Ok(RawEcho {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

fn serve(listener: std::net::TcpListener, stopped: oneshot::Receiver<()>) {
    let Ok(runtime) = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    else {
        return;
    };
    runtime.block_on(async move {
        let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
            return;
        };
        let _ = tonic::transport::Server::builder()
            .add_service(ExecutorServer::new(Echo))
            .serve_with_incoming_shutdown(toolmesh_transport::incoming(listener), async {
                let _ = stopped.await;
            })
            .await;
    });
}

impl Drop for RawEcho {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
