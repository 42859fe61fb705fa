"""The gRPC service tests/bridge_grpc.rs bridges: library.proto compiled at
start with grpcio-tools, served with server reflection on 127.0.0.1:PORT
(argv[1], 0 for a free one); prints `listening on 127.0.0.1:PORT` once it
serves."""

import os
import sys
import tempfile
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


def main():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    library_pb2_grpc.add_LibraryServicer_to_server(Library(), server)
    names = (
        library_pb2.DESCRIPTOR.services_by_name["Library"].full_name,
        reflection.SERVICE_NAME,
    )
    reflection.enable_server_reflection(names, server)
    port = server.add_insecure_port(f"127.0.0.1:{sys.argv[1] if len(sys.argv) > 1 else 0}")
    server.start()
    print(f"listening on 127.0.0.1:{port}", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
