//! Reads a gRPC service's descriptors by server reflection: `grpc.reflection.v1`, else `v1alpha` (the same messages under another path), the services it lists and every file they need.

use prost::Message;
use prost_reflect::DescriptorPool;
use prost_types::FileDescriptorProto;
use std::collections::{BTreeMap, BTreeSet};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::{Code, Status, Streaming};
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::{ServerReflectionRequest, ServerReflectionResponse};
use toolmesh_transport::Connector;

/// The reflection method of each revision, newest first: their messages
/// are the same on the wire.
const REFLECTION_PATHS: [&str; 2] = [
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];

/// What a service says of itself.
pub(crate) struct Described {
    /// Every service it lists.
    pub(crate) services: Vec<String>,
    /// The files of the services asked for, with all they import.
    pub(crate) pool: DescriptorPool,
}

/// The names of the services `connector`'s server serves.
pub(crate) async fn list_services(connector: &Connector) -> Result<Vec<String>, Status> {
    let mut stream = open(connector).await?;
    stream.services().await
}

/// The services `connector`'s server serves and the descriptors of those `wanted`
/// says to describe.
pub(crate) async fn describe(
    connector: &Connector,
    wanted: impl Fn(&str) -> bool,
) -> Result<Described, String> {
    let mut stream = open(connector).await.map_err(|s| reason(&s))?;
    let services = stream.services().await.map_err(|s| reason(&s))?;
    let mut files: BTreeMap<String, FileDescriptorProto> = BTreeMap::new();
    for service in services.iter().filter(|s| wanted(s)) {
        let request = MessageRequest::FileContainingSymbol(service.clone());
        for file in stream.files(request).await.map_err(|s| reason(&s))? {
            files.insert(file.name().to_owned(), file);
        }
    }
    // A server sends the files a symbol needs, but may leave out those it
    // sent before on another stream: ask for each one missing by name.
    let mut asked: BTreeSet<String> = BTreeSet::new();
    loop {
        let missing: Vec<String> = files
            .values()
            .flat_map(|f| f.dependency.iter())
            .filter(|d| !files.contains_key(*d) && !asked.contains(*d))
            .cloned()
            .collect();
        if missing.is_empty() {
            break;
        }
        for name in missing {
            asked.insert(name.clone());
            let request = MessageRequest::FileByFilename(name);
            for file in stream.files(request).await.map_err(|s| reason(&s))? {
                files.insert(file.name().to_owned(), file);
            }
        }
    }
    let mut pool = DescriptorPool::new();
    pool.add_file_descriptor_protos(files.into_values())
        .map_err(|e| format!("its descriptors do not fit together: {e}"))?;
    Ok(Described { services, pool })
}

/// A status as a short reason.
fn reason(status: &Status) -> String {
    if status.message().is_empty() {
        format!("{:?}", status.code())
    } else {
        format!("{:?}: {}", status.code(), status.message())
    }
}

/// One reflection stream: requests sent one by one, each answered.
struct ReflectionStream {
    requests: mpsc::Sender<ServerReflectionRequest>,
    responses: Streaming<ServerReflectionResponse>,
}

/// A reflection stream of the newest revision the server answers.
async fn open(connector: &Connector) -> Result<ReflectionStream, Status> {
    let mut last = Status::unimplemented("no reflection revision tried");
    for path in REFLECTION_PATHS {
        match open_at(connector, path).await {
            Ok(stream) => return Ok(stream),
            Err(status) if status.code() == Code::Unimplemented => last = status,
            Err(status) => return Err(status),
        }
    }
    Err(last)
}

/// A reflection stream on `path`, checked by listing the services (a
/// server answers a revision it lacks with UNIMPLEMENTED then).
async fn open_at(connector: &Connector, path: &'static str) -> Result<ReflectionStream, Status> {
    let (requests, queued) = mpsc::channel(4);
    // Queued before the call: some servers send their headers only with
    // the first answer.
    let _ = requests.send(list_request()).await;
    let mut grpc = tonic::client::Grpc::with_origin(connector.clone(), connector.origin());
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(toolmesh::error_chain(&*e)))?;
    let responses = grpc
        .streaming(
            tonic::Request::new(ReceiverStream::new(queued)),
            PathAndQuery::from_static(path),
            tonic_prost::ProstCodec::default(),
        )
        .await?
        .into_inner();
    let mut stream = ReflectionStream {
        requests,
        responses,
    };
    stream.answer().await?;
    Ok(stream)
}

fn list_request() -> ServerReflectionRequest {
    ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    }
}

impl ReflectionStream {
    /// The next answer, as its message or the error the server sent.
    async fn answer(&mut self) -> Result<MessageResponse, Status> {
        let response = self
            .responses
            .message()
            .await?
            .ok_or_else(|| Status::unavailable("the reflection stream ended"))?;
        match response.message_response {
            Some(MessageResponse::ErrorResponse(error)) => Err(Status::new(
                Code::from(error.error_code),
                error.error_message,
            )),
            Some(message) => Ok(message),
            None => Err(Status::internal("an empty reflection answer")),
        }
    }

    async fn ask(&mut self, request: MessageRequest) -> Result<MessageResponse, Status> {
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(request),
        };
        self.requests
            .send(request)
            .await
            .map_err(|_| Status::unavailable("the reflection stream closed"))?;
        self.answer().await
    }

    async fn services(&mut self) -> Result<Vec<String>, Status> {
        match self
            .ask(MessageRequest::ListServices(String::new()))
            .await?
        {
            MessageResponse::ListServicesResponse(list) => {
                Ok(list.service.into_iter().map(|s| s.name).collect())
            }
            _ => Err(Status::internal("listing services got another answer")),
        }
    }

    async fn files(&mut self, request: MessageRequest) -> Result<Vec<FileDescriptorProto>, Status> {
        match self.ask(request).await? {
            MessageResponse::FileDescriptorResponse(files) => files
                .file_descriptor_proto
                .iter()
                .map(|bytes| {
                    FileDescriptorProto::decode(bytes.as_slice()).map_err(|e| {
                        Status::internal(format!("a file descriptor does not decode: {e}"))
                    })
                })
                .collect(),
            _ => Err(Status::internal("asking for files got another answer")),
        }
    }
}
