"""The gRPC service tests/bridge_grpc.rs bridges: library.proto compiled at
start with grpcio-tools, served with server reflection on 127.0.0.1:PORT
(argv[1], 0 for a free one), and the Annex service too with `annex` among
the other arguments, over TLS with `tls` (the PEM files TLS_CERT and
TLS_KEY, and TLS_CLIENT_CA to ask for a client certificate signed by it);
prints `listening on 127.0.0.1:PORT` once it serves."""

import os
import shutil
import sys
import tempfile
import threading
import time
from concurrent import futures

import grpc
from grpc_reflection.v1alpha import reflection
from grpc_tools import protoc

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = tempfile.mkdtemp(prefix="grpc-target-")
status = protoc.main(
    [
        "protoc",
        f"-I{HERE}",
        f"-I{os.path.join(os.path.dirname(protoc.__file__), '_proto')}",
        f"--python_out={OUT}",
        f"--grpc_python_out={OUT}",
        os.path.join(HERE, "library.proto"),
    ]
)
if status != 0:
    sys.exit(f"protoc failed: {status}")
sys.path.insert(0, OUT)
import library_pb2  # noqa: E402
import library_pb2_grpc  # noqa: E402

# Imported: the generated files are not needed again, and the tests end
# this process with SIGKILL, which would leave them behind.
shutil.rmtree(OUT, ignore_errors=True)

BOOKS = {
    "b1": library_pb2.Book(
        id="b1",
        title="Dune",
        genre=library_pb2.GENRE_FICTION,
        pages=9007199254740993,
        author=library_pb2.Author(name="Frank Herbert", aliases=["FH"]),
        tags=["sand", "spice"],
    ),
}
BOOKS["b1"].published.FromJsonString("1965-08-01T00:00:00Z")


RUNS = {}
RUNS_LOCK = threading.Lock()


def run(key, failures, context):
    """Counts a run under `key`; UNAVAILABLE while it ran `failures` times or fewer."""
    with RUNS_LOCK:
        RUNS[key] = RUNS.get(key, 0) + 1
        runs = RUNS[key]
    if runs <= failures:
        context.abort(grpc.StatusCode.UNAVAILABLE, f"run {runs} of {key!r} lost its shelf")
    return library_pb2.RunResponse(runs=runs)


def count(topic):
    return 1 + sum(count(child) for child in topic.children)


class Library(library_pb2_grpc.LibraryServicer):
    def GetBook(self, request, context):
        if request.id not in BOOKS:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"no book with id {request.id!r}")
        return BOOKS[request.id]

    def AddBook(self, request, context):
        which = request.WhichOneof("shelf")
        placed = f"shelf {getattr(request, which)}" if which else "no shelf"
        book_id = f"b{len(BOOKS) + 1}"
        book = library_pb2.Book()
        book.CopyFrom(request.book)
        book.id = book_id
        BOOKS[book_id] = book
        total = sum(b.pages for b in BOOKS.values())
        return library_pb2.AddBookResponse(id=book_id, placed=placed, total_pages=total)

    def CountTopics(self, request, context):
        return library_pb2.CountResponse(topics=count(request.root))

    def Unavailable(self, request, context):
        context.abort(grpc.StatusCode.UNAVAILABLE, "the shelves are being moved")

    def ListBooks(self, request, context):
        yield from BOOKS.values()

    def Countdown(self, request, context):
        for left in range(getattr(request, "from"), 0, -1):
            if left == request.fail_at:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"the countdown stopped at {left}")
            yield library_pb2.Tick(left=left)
            time.sleep(0.05)

    def Reserve(self, request, context):
        return run(request.key, request.failures, context)

    def Charge(self, request, context):
        return run(request.key, request.failures, context)

    def Whoami(self, request, context):
        metadata = dict(context.invocation_metadata())
        return library_pb2.Caller(
            authorization=metadata.get("authorization", ""), api_key=metadata.get("x-api-key", "")
        )

    def Runs(self, request, context):
        with RUNS_LOCK:
            return library_pb2.RunResponse(runs=RUNS.get(request.key, 0))


class Annex(library_pb2_grpc.AnnexServicer):
    def Hello(self, request, context):
        return library_pb2.Empty()


def main():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    library_pb2_grpc.add_LibraryServicer_to_server(Library(), server)
    names = [
        library_pb2.DESCRIPTOR.services_by_name["Library"].full_name,
        reflection.SERVICE_NAME,
    ]
    flags = sys.argv[2:]
    if "annex" in flags:
        library_pb2_grpc.add_AnnexServicer_to_server(Annex(), server)
        names.append(library_pb2.DESCRIPTOR.services_by_name["Annex"].full_name)
    reflection.enable_server_reflection(names, server)
    address = f"127.0.0.1:{sys.argv[1] if len(sys.argv) > 1 else 0}"
    if "tls" in flags:
        with open(os.environ["TLS_KEY"], "rb") as key, open(os.environ["TLS_CERT"], "rb") as cert:
            pair = (key.read(), cert.read())
        client_ca = os.environ.get("TLS_CLIENT_CA")
        roots = open(client_ca, "rb").read() if client_ca else None
        credentials = grpc.ssl_server_credentials(
            [pair], root_certificates=roots, require_client_auth=roots is not None
        )
        port = server.add_secure_port(address, credentials)
    else:
        port = server.add_insecure_port(address)
    server.start()
    print(f"listening on 127.0.0.1:{port}", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
