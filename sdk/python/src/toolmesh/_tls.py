"""`TLS`: the PEM files an executor serves and dials with, as the Rust side's `--tls-*` flags and `TOOLMESH_TLS_*` variables."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import grpc


class TLSError(Exception):
    """TLS settings that cannot be used, and how to fix them."""


@dataclass(frozen=True)
class TLS:
    """PEM files, meaning what they mean to every toolmesh process.

    `ca` signs the servers' certificates: setting it makes the connection to
    the registry TLS, checked against it. `cert` and `key` are this
    executor's certificate chain and key: the executor then serves TLS, and
    presents them to the registry when it asks (mTLS). `client_ca` makes the
    executor require client certificates signed by it (only dispatchers
    holding one may call).
    """

    ca: str | os.PathLike[str] | None = None
    cert: str | os.PathLike[str] | None = None
    key: str | os.PathLike[str] | None = None
    client_ca: str | os.PathLike[str] | None = None

    @classmethod
    def from_env(cls) -> TLS:
        """`TOOLMESH_TLS_CA`, `_CERT`, `_KEY` and `_CLIENT_CA`, where set."""

        def get(name: str) -> str | None:
            return os.environ.get(f"TOOLMESH_TLS_{name}") or None

        return cls(ca=get("CA"), cert=get("CERT"), key=get("KEY"), client_ca=get("CLIENT_CA"))

    def server_credentials(self) -> grpc.ServerCredentials | None:
        """How the executor serves: TLS with `cert` and `key` (client
        certificates required with `client_ca`), or None for plaintext."""
        if (self.cert is None) != (self.key is None):
            raise TLSError(
                "TLS needs both a certificate and its key: pass cert= and key= together "
                "(or set TOOLMESH_TLS_CERT and TOOLMESH_TLS_KEY)"
            )
        if self.cert is None:
            if self.client_ca is not None:
                raise TLSError(
                    "client_ca (TOOLMESH_TLS_CLIENT_CA) requires client certificates on a TLS server: "
                    "give the executor's own cert= and key= too"
                )
            return None
        client_ca = _read(self.client_ca, "client_ca") if self.client_ca is not None else None
        return grpc.ssl_server_credentials(
            [(_read(self.key, "key"), _read(self.cert, "cert"))],
            root_certificates=client_ca,
            require_client_auth=client_ca is not None,
        )

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        """How the executor reaches the registry: TLS checked against `ca`
        (presenting `cert` when given), or None for plaintext."""
        if self.ca is None:
            return None
        if (self.cert is None) != (self.key is None):
            raise TLSError(
                "TLS needs both a certificate and its key: pass cert= and key= together "
                "(or set TOOLMESH_TLS_CERT and TOOLMESH_TLS_KEY)"
            )
        mine = (_read(self.key, "key"), _read(self.cert, "cert")) if self.cert is not None else (None, None)
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca, "ca"),
            private_key=mine[0],
            certificate_chain=mine[1],
        )


def _read(path: str | os.PathLike[str] | None, what: str) -> bytes:
    assert path is not None
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise TLSError(f"TLS file {what}={os.fspath(path)!r}: {e.strerror or e}") from None
    if b"-----BEGIN" not in data:
        raise TLSError(f"TLS file {what}={os.fspath(path)!r} holds no PEM block: give a PEM file")
    return data
