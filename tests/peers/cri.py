"""A CRI client: one call of containerd's CRI gRPC API (runtime.v1), the
kubelet's path, as JSON in and out.

Usage: cri.py SOCKET STUBS METHOD [REQUEST_JSON]

  SOCKET        containerd's gRPC socket
  STUBS         a directory for the Python stubs; compiled there from
                PROTO (env VHU_CRI_PROTO, the vendored tests/peers/proto/api.proto)
                with grpcio-tools' own protoc when missing
  METHOD        a RuntimeService method, e.g. RunPodSandbox
  REQUEST_JSON  the request (METHOD + "Request") in protobuf's JSON mapping
                (field names as in the .proto); default {}

Prints the response in protobuf's JSON mapping (proto field names, defaults
included), one line; a gRPC error goes to stderr with exit status 1.
"""
import json
import os
import sys


def stubs(d, proto):
    if not os.path.exists(os.path.join(d, "api_pb2_grpc.py")):
        from grpc_tools import protoc
        import importlib.resources

        os.makedirs(d, exist_ok=True)
        inc = str(importlib.resources.files("grpc_tools") / "_proto")
        src = os.path.dirname(os.path.abspath(proto))
        rc = protoc.main(["protoc", "-I" + src, "-I" + inc, "--python_out=" + d,
                          "--grpc_python_out=" + d, os.path.basename(proto)])
        if rc != 0:
            sys.exit("protoc failed on %s" % proto)
    sys.path.insert(0, d)


def main():
    sock, stub_dir, method = sys.argv[1:4]
    req_json = sys.argv[4] if len(sys.argv) > 4 else "{}"
    stubs(stub_dir, os.environ["VHU_CRI_PROTO"])
    import grpc
    from google.protobuf import json_format
    import api_pb2
    import api_pb2_grpc

    req = json_format.Parse(req_json, getattr(api_pb2, method + "Request")())
    with grpc.insecure_channel("unix://" + sock) as ch:
        rt = api_pb2_grpc.RuntimeServiceStub(ch)
        try:
            resp = getattr(rt, method)(req, timeout=120)
        except grpc.RpcError as e:
            sys.stderr.write("%s: %s: %s\n" % (method, e.code(), e.details()))
            sys.exit(1)
    out = json_format.MessageToDict(resp, preserving_proto_field_name=True,
                                    always_print_fields_with_no_presence=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
