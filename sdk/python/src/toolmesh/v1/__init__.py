"""The toolmesh.v1 gRPC contract, generated from proto/toolmesh/v1 by generate_stubs.py (do not edit the *_pb2* files)."""
