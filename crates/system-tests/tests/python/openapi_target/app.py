"""A bookshop HTTP API written with FastAPI, serving its own /openapi.json:
what crates/system-tests/tests/bridge_openapi.rs bridges with `toolmesh
bridge openapi`. Listens on 127.0.0.1 at the port given (argv[1], 0 for a
free one) and prints `listening on 127.0.0.1:PORT` once it accepts
connections.
"""

import asyncio
import socket
import sys
from typing import Annotated

import uvicorn
from fastapi import FastAPI, Header, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, field_validator

app = FastAPI(title="Bookshop", version="2.1.0")


class NewBook(BaseModel):
    """A book to put on the shelves."""

    title: str = Field(min_length=1, max_length=100, description="The title, capitalised.")
    pages: int = Field(gt=0, description="How many pages it has.")
    tags: list[str] = []

    @field_validator("title")
    @classmethod
    def capitalised(cls, title: str) -> str:
        if not title[:1].isupper():
            raise ValueError("the title must start with a capital letter")
        return title


class Book(NewBook):
    """A book on the shelves."""

    id: str
    reserved: bool = False


BOOKS: dict[str, Book] = {
    "b1": Book(id="b1", title="Dune", pages=412, tags=["fiction"]),
    "b2": Book(id="b2", title="SPQR", pages=608, tags=["history"]),
}


def find(book_id: str) -> Book:
    book = BOOKS.get(book_id)
    if book is None:
        raise HTTPException(status_code=404, detail=f"no book with id '{book_id}'")
    return book


@app.get("/books/{book_id}", operation_id="get_book", summary="Get one book by its id.")
def get_book(book_id: str) -> Book:
    return find(book_id)


@app.get("/books", operation_id="list_books", summary="List the books, by tag.")
def list_books(
    tag: str | None = None,
    limit: Annotated[int, Query(ge=1, le=50)] = 10,
) -> list[Book]:
    books = [b for b in BOOKS.values() if tag is None or tag in b.tags]
    return books[:limit]


@app.post("/books", operation_id="add_book", status_code=201, summary="Put a new book on the shelves.")
def add_book(book: NewBook, x_request_id: Annotated[str | None, Header()] = None) -> Book:
    book_id = x_request_id or f"b{len(BOOKS) + 1}"
    added = Book(id=book_id, **book.model_dump())
    BOOKS[book_id] = added
    return added


@app.delete("/books/{book_id}", operation_id="remove_book", status_code=204)
def remove_book(book_id: str) -> Response:
    BOOKS.pop(book_id, None)
    return Response(status_code=204)


@app.post(
    "/books/{book_id}/reserve",
    operation_id="reserve_book",
    summary="Reserve a book (reserving twice is reserving once).",
    openapi_extra={"x-idempotent": True},
)
def reserve_book(book_id: str) -> Book:
    book = find(book_id)
    book.reserved = True
    return book


@app.get("/echo/{text}", operation_id="echo", summary="Answer the path segment and query as received.")
def echo(text: str, request: Request, note: str | None = None) -> dict:
    return {"text": text, "note": note, "raw_path": request.scope.get("raw_path", b"").decode()}


@app.get("/whoami", operation_id="whoami", summary="Answer the credentials the request carried.")
def whoami(request: Request) -> dict:
    return {
        "authorization": request.headers.get("authorization"),
        "api_key": request.headers.get("x-api-key"),
    }


@app.get("/broken", operation_id="broken", summary="Always fails on the server's side.")
def broken() -> JSONResponse:
    return JSONResponse(status_code=500, content={"detail": "the shelf database is on fire"})


@app.get("/slow", operation_id="slow", summary="Answer after the seconds asked for.")
async def slow(seconds: Annotated[float, Query(ge=0, le=30)]) -> dict:
    await asyncio.sleep(seconds)
    return {"slept": seconds}


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))

    async def run() -> None:
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        print(f"listening on 127.0.0.1:{sock.getsockname()[1]}", flush=True)
        await serving

    asyncio.run(run())


if __name__ == "__main__":
    main()
