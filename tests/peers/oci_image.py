"""Packs a root filesystem directory into a one-layer OCI image archive that
`ctr images import` reads (no registry, no pulls).

Usage: oci_image.py ROOTFS OUT.tar NAME CMD_JSON

  NAME      the image reference, e.g. localhost/vhu-pod:1
  CMD_JSON  the image's Cmd, a JSON list (the sandbox's pause process)
"""
import hashlib
import io
import json
import sys
import tarfile
import time


def blob(tar, data, media):
    d = "sha256:" + hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo("blobs/sha256/" + d[7:])
    info.size = len(data)
    info.mtime = int(time.time())
    tar.addfile(info, io.BytesIO(data))
    return {"mediaType": media, "digest": d, "size": len(data)}


def main():
    rootfs, out, name, cmd = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    layer_buf = io.BytesIO()
    with tarfile.open(fileobj=layer_buf, mode="w") as lt:
        lt.add(rootfs, arcname=".")
    layer = layer_buf.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Cmd": cmd, "Env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }).encode()
    with tarfile.open(out, "w") as t:
        info = tarfile.TarInfo("oci-layout")
        lay = b'{"imageLayoutVersion":"1.0.0"}'
        info.size = len(lay)
        t.addfile(info, io.BytesIO(lay))
        cfg = blob(t, config, "application/vnd.oci.image.config.v1+json")
        lyr = blob(t, layer, "application/vnd.oci.image.layer.v1.tar")
        manifest = json.dumps({"schemaVersion": 2,
                               "mediaType": "application/vnd.oci.image.manifest.v1+json",
                               "config": cfg, "layers": [lyr]}).encode()
        m = blob(t, manifest, "application/vnd.oci.image.manifest.v1+json")
        m["annotations"] = {"io.containerd.image.name": name,
                            "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1]}
        index = json.dumps({"schemaVersion": 2, "manifests": [m]}).encode()
        info = tarfile.TarInfo("index.json")
        info.size = len(index)
        t.addfile(info, io.BytesIO(index))


if __name__ == "__main__":
    main()
