"""The operator's API calls through the real kubernetes client, against a fake API server on
localhost: the right endpoints, JSON merge patches (a dict sent as a JSON patch is refused by a
real API server), creates that tolerate 409, deletes that tolerate 404."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest

kubernetes = pytest.importorskip("kubernetes")

from petrel.operator.handlers import MERGE_PATCH, KubernetesApi, reconcile  # noqa: E402

NS = "mq"


def _merge(target: dict, patch: dict) -> dict:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value
    return target


class FakeApiServer:
    """Objects by path (``/api/v1/namespaces/mq/services/b-hdls``); every request recorded."""

    def __init__(self) -> None:
        self.objects: dict[str, dict] = {}
        self.requests: list[tuple[str, str, str | None, dict | None]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> dict | None:
                length = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(length)) if length else None

            def _handle(self) -> None:
                path = urlsplit(self.path).path
                body = self._body()
                fake.requests.append((self.command, path, self.headers.get("Content-Type"), body))
                status, reply = fake.answer(self.command, path, self.headers.get("Content-Type"), body)
                self._reply(status, reply)

            do_GET = do_POST = do_PATCH = do_DELETE = _handle  # noqa: N815 (http.server's names)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, method: str, path: str, content_type: str | None, body: dict | None) -> tuple[int, dict]:
        missing = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}
        if method == "GET":
            if path in self.objects:
                return 200, self.objects[path]
            items = [o for p, o in sorted(self.objects.items()) if p.rsplit("/", 1)[0] == path]
            if path.endswith(("/pods", "/persistentvolumeclaims", "/jobs")):
                return 200, {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": items}
            return 404, missing
        if method == "POST":
            name = f"{path}/{body['metadata']['name']}"
            if name in self.objects:
                return 409, {**missing, "reason": "AlreadyExists", "code": 409}
            self.objects[name] = body
            return 201, body
        if method == "PATCH":
            if content_type != MERGE_PATCH:
                return 415, {**missing, "reason": "UnsupportedMediaType", "code": 415}
            if path not in self.objects:
                return 404, missing
            return 200, _merge(self.objects[path], body)
        if method == "DELETE":  # a real API server answers with the object being deleted
            gone = self.objects.pop(path, None)
            return (404, missing) if gone is None else (200, gone)
        return 405, missing

    def client(self):
        config = kubernetes.client.Configuration()
        config.host = f"http://127.0.0.1:{self.server.server_address[1]}"
        return kubernetes.client.ApiClient(config)

    def mutations(self) -> list[tuple[str, str]]:
        done = [(m, p) for m, p, _, _ in self.requests if m != "GET"]
        self.requests.clear()
        return done


class RecordingApi(KubernetesApi):
    def __init__(self, client) -> None:
        super().__init__(client)
        self.events: list[tuple[str, str]] = []

    def event(self, body, kind, reason, message) -> None:  # kopf posts events only inside a handler
        self.events.append((kind, reason))


@pytest.fixture
def fake():
    server = FakeApiServer()
    yield server
    server.server.shutdown()


def body(size: int) -> dict:
    return {"apiVersion": "petrel.io/v1alpha1", "kind": "PetrelBroker",
            "metadata": {"name": "b", "namespace": NS, "uid": "u-1"}, "spec": {"deploymentPlan": {"size": size}}}


def test_reconcile_through_the_kubernetes_client(fake):
    api = RecordingApi(fake.client())
    core, apps, batch = f"/api/v1/namespaces/{NS}", f"/apis/apps/v1/namespaces/{NS}", f"/apis/batch/v1/namespaces/{NS}"

    # a new resource: its Secret, Service, ConfigMap and StatefulSet
    reconcile(body(3), api, now=1000.0)
    assert sorted(fake.mutations()) == sorted([("POST", f"{core}/secrets"), ("POST", f"{core}/services"),
                                               ("POST", f"{core}/configmaps"), ("POST", f"{apps}/statefulsets")])
    assert fake.objects[f"{apps}/statefulsets/b"]["spec"]["replicas"] == 3

    # the StatefulSet made 3 ready pods and their PVCs; scale to 1
    for o in range(3):
        fake.objects[f"{core}/pods/b-{o}"] = {"metadata": {"name": f"b-{o}"}, "status": {
            "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
        fake.objects[f"{core}/persistentvolumeclaims/data-b-{o}"] = {"metadata": {"name": f"data-b-{o}"}}
    reconcile(body(1), api, now=1010.0)
    patches = [(p, b) for m, p, t, b in fake.requests if m == "PATCH" and "persistentvolumeclaims" in p]
    assert [p for p, _ in patches] == [f"{core}/persistentvolumeclaims/data-b-2", f"{core}/persistentvolumeclaims/data-b-1"]
    assert all("petrel.io/retired" in b["metadata"]["annotations"] for _, b in patches)
    assert ("PATCH", f"{apps}/statefulsets/b") in fake.mutations()
    assert fake.objects[f"{apps}/statefulsets/b"]["spec"]["replicas"] == 1
    assert ("Normal", "VolumeRetired") in api.events

    # pods 1 and 2 gone: a drainer Job for the highest
    del fake.objects[f"{core}/pods/b-1"], fake.objects[f"{core}/pods/b-2"]
    reconcile(body(1), api, now=1020.0)
    assert ("POST", f"{batch}/jobs") in fake.mutations()
    job = fake.objects[f"{batch}/jobs/b-drain-2-1"]
    assert job["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "data-b-2"

    # it succeeded: the PVC and the Job deleted, then the next drain
    job["status"] = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    status = reconcile(body(1), api, now=1030.0)
    done = fake.mutations()
    assert ("DELETE", f"{core}/persistentvolumeclaims/data-b-2") in done
    assert ("DELETE", f"{batch}/jobs/b-drain-2-1") in done
    assert ("POST", f"{batch}/jobs") in done and f"{batch}/jobs/b-drain-1-1" in fake.objects
    assert f"{core}/persistentvolumeclaims/data-b-1" in fake.objects, "not before its own drain succeeded"
    assert {d["volume"]: d["phase"] for d in status["drains"]} == {"data-b-2": "succeeded"}  # as observed


def test_a_create_that_exists_and_a_delete_that_is_gone_are_not_errors(fake):
    from petrel.operator.backend import Operation
    from petrel.operator.crd import parse

    api = RecordingApi(fake.client())
    cr = parse(body(1))
    op = Operation("create", "Job", "j", {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}})
    api.send(cr, op)
    api.send(cr, op)  # the previous round made it
    api.send(cr, Operation("delete", "PersistentVolumeClaim", "data-b-9"))
    with pytest.raises(kubernetes.client.ApiException):
        api.send(cr, Operation("patch", "PersistentVolumeClaim", "data-b-9", {"metadata": {}}))
