"""The OpenAPI document describes every route the app registers, and is a valid OpenAPI 3 document."""

from __future__ import annotations

import re

import pytest
from openapi_spec_validator import validate

from petrel.config import BrokerConfig
from petrel.management.openapi import document
from petrel.management.server import ManagementServer
from petrel.server.broker import Broker

METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}


def registered_routes() -> set[tuple[str, str]]:
    server = ManagementServer(Broker(BrokerConfig(http_port=-1)))
    routes = set()
    for route in server.app.router.routes():
        routes.add((route.resource.canonical, route.method.lower()))
    return routes


def documented_routes(doc: dict) -> set[tuple[str, str]]:
    return {(path, method) for path, item in doc["paths"].items() for method in item if method in METHODS}


def test_every_registered_route_is_described_and_nothing_else():
    doc = document("test")
    registered = registered_routes()
    assert len(registered) >= 20
    assert registered - documented_routes(doc) == set(), "routes missing from the OpenAPI document"
    assert documented_routes(doc) - registered == set(), "documented routes that do not exist"


def test_the_document_is_valid_openapi_3():
    doc = document("1.2.3")
    validate(doc)
    assert doc["openapi"].startswith("3.") and doc["info"]["version"] == "1.2.3"


def test_path_parameters_are_declared_and_refs_resolve():
    doc = document("x")
    schemas = doc["components"]["schemas"]
    for path, item in doc["paths"].items():
        names = set(re.findall(r"{(\w+)}", path))
        declared = {p["name"] for p in item.get("parameters", []) if p["in"] == "path"}
        assert names == declared, path
        for method, op in item.items():
            if method not in METHODS:
                continue
            assert op["summary"] and op["responses"], (path, method)
    refs = re.findall(r"'\$ref': '#/components/schemas/(\w+)'", repr(doc))
    assert refs and set(refs) <= set(schemas)


def test_the_error_statuses_are_documented_with_the_error_schema():
    doc = document("x")
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method not in METHODS:
                continue
            for status, response in op["responses"].items():
                if status.startswith(("4", "5")):
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/Error"}, (path, method, status)


@pytest.mark.parametrize("path,method,status", [
    ("/api/v1/queues", "post", "409"),
    ("/api/v1/queues/{name}", "get", "404"),
    ("/api/v1/broker/scale-down", "post", "409"),
    ("/health", "get", "503"),
])
def test_key_error_cases_are_in_the_document(path, method, status):
    assert status in document("x")["paths"][path][method]["responses"]
