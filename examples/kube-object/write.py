#!/usr/bin/env python3
"""Writes the ConfigMap NAME (data.plan = argv[1]) through the fence for Kubernetes objects.

The current fencing token comes from the sidecar (GET /token); the write is one server-side apply to the
API server with the token stamped as the annotation elector-sidecar.io/fencing-token. The fence policy
rejects it (403, "stale fencing token N: resource already accepted token M") if the ConfigMap already carries
a higher token. Standard library only.

Environment: ELECTOR_URL (default http://127.0.0.1:4040), NAME (default plan), and the API server: in a pod
the ServiceAccount's token, CA and namespace (the chart mounts them in the sidecar only: mount them in the app
too to use this), or KUBE_API_URL, KUBE_TOKEN_FILE, KUBE_CA_FILE and NAMESPACE.

Exit status: 0 written, 2 not the leader (no token), 3 rejected as stale, 1 any other error.
"""
import json
import os
import re
import ssl
import sys
import urllib.error
import urllib.request

SA = "/var/run/secrets/kubernetes.io/serviceaccount"


def fencing_token(elector_url):
    """The sidecar's current token, or None if this pod does not lead."""
    try:
        with urllib.request.urlopen(elector_url + "/token", timeout=5) as resp:
            return json.load(resp)["token"]
    except urllib.error.HTTPError:
        return None


def apply_fenced(api, token_file, ca_file, namespace, name, plan, fencing):
    """Server-side apply of the ConfigMap, stamped; returns (status, message)."""
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": {"elector-sidecar.io/fenced": "true"},
            "annotations": {"elector-sidecar.io/fencing-token": str(fencing)},
        },
        "data": {"plan": plan},
    }
    url = "%s/api/v1/namespaces/%s/configmaps/%s?fieldManager=kube-object-example&force=true" % (api, namespace, name)
    with open(token_file) as f:
        bearer = f.read().strip()
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="PATCH", headers={
        "Content-Type": "application/apply-patch+yaml",
        "Authorization": "Bearer " + bearer,
    })
    try:
        with urllib.request.urlopen(req, context=ssl.create_default_context(cafile=ca_file), timeout=10) as resp:
            return resp.status, ""
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.load(e).get("message", "")
        except ValueError:
            return e.code, str(e)


def main():
    if len(sys.argv) != 2:
        print("usage: write.py PLAN", file=sys.stderr)
        return 1
    elector_url = os.environ.get("ELECTOR_URL", "http://127.0.0.1:4040")
    api = (os.environ.get("KUBE_API_URL") or "https://%s:%s" % (
        os.environ.get("KUBERNETES_SERVICE_HOST", ""), os.environ.get("KUBERNETES_SERVICE_PORT", "443"))).rstrip("/")
    token_file = os.environ.get("KUBE_TOKEN_FILE", SA + "/token")
    ca_file = os.environ.get("KUBE_CA_FILE", SA + "/ca.crt")
    namespace = os.environ.get("NAMESPACE")
    if not namespace:
        with open(SA + "/namespace") as f:
            namespace = f.read().strip()
    name = os.environ.get("NAME", "plan")

    fencing = fencing_token(elector_url)
    if fencing is None:
        print("not the leader: no fencing token", file=sys.stderr)
        return 2
    status, message = apply_fenced(api, token_file, ca_file, namespace, name, sys.argv[1], fencing)
    if 200 <= status < 300:
        print("written with fencing token %d" % fencing)
        return 0
    stale = re.search(r"stale fencing token (\d+): resource already accepted token (\d+)", message)
    if status == 403 and stale:
        print("rejected: stale fencing token %s, the object already carries %s" % stale.groups(), file=sys.stderr)
        return 3
    print("write failed: HTTP %d: %s" % (status, message), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
