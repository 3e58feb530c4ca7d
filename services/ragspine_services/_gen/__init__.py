"""Generated protobuf and gRPC stubs of the ragspine.v1 wire contract."""
