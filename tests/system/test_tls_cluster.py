"""Cluster links over TLS: nodes whose connectors are ssl:// open their bridges with TLS (the
broker's ssl_ca trusted, its own certificate presented), through acceptors that require client
certificates; a node with a certificate from another CA gets no bridge."""

from __future__ import annotations

import json

import pytest
from cluster_harness import cluster_view, make_cluster, start_all, wait_bindings, wait_connected

from petrel.client import Connection
from petrel.testing.certs import make_pki
from petrel.testing.process import wait_for

pytestmark = pytest.mark.system


def tls_cluster(tmp_path, n: int, pki, certs=None):
    """``n`` nodes with mutual TLS on their acceptors and ssl:// connectors."""
    nodes = make_cluster(tmp_path, n)
    for i, node in enumerate(nodes):
        cert = (certs or {}).get(i, pki.server)
        ca = pki.ca.cert if cert is pki.server or certs is None or i not in certs else cert.cert.parent / "other-ca.pem"
        top = "\n".join(f"{k} = {v}" for k, v in {
            "ssl_enabled": "true", "ssl_need_client_auth": "true", "ssl_cert": json.dumps(str(cert.cert)),
            "ssl_key": json.dumps(str(cert.key)), "ssl_ca": json.dumps(str(ca))}.items())
        text = node.config_path.read_text().replace('"tcp://127.0.0.1:', '"ssl://127.0.0.1:')
        # the TLS settings are top-level keys: before the first table
        head, sep, tables = text.partition("[")
        node.config_path.write_text(head + top + "\n" + sep + tables)
    return nodes


def url(node, pki) -> str:
    return (f"ssl://127.0.0.1:{node.port}?trustStorePath={pki.ca.cert}"
            f"&keyStorePath={pki.client.cert}&sslKey={pki.client.key}")


def test_two_nodes_form_a_cluster_and_move_messages_over_tls(tmp_path, stop_nodes):
    pki = make_pki(tmp_path / "pki")
    a, b = tls_cluster(tmp_path, 2, pki)
    stop_nodes([a, b])
    start_all([a, b])
    wait_connected([a, b])
    assert all(br["connector"].startswith("ssl://") for br in cluster_view(a)["bridges"])
    with Connection(url(b, pki)) as cb, Connection(url(a, pki)) as ca:
        consumer = cb.session().consumer("queue://tls.orders")
        wait_bindings(a, "tls.orders", consumers=1)
        session = ca.session()
        producer = session.producer("queue://tls.orders")
        for i in range(100):
            producer.send(b"%d" % i, durable=True)
        session.flush()
        got = []
        while (m := consumer.receive(2.0)) is not None:
            got.append(m.body)
    assert sorted(got) == sorted(b"%d" % i for i in range(100))
    assert cluster_view(a)["messages_forwarded"] >= 100
    assert "certificate refused" not in a.log() + b.log()


def test_a_node_whose_certificate_another_ca_signed_gets_no_bridge(tmp_path, stop_nodes):
    pki = make_pki(tmp_path / "pki")
    a, b = tls_cluster(tmp_path, 2, pki, certs={1: pki.other_ca.issue("intruder", "intruder")})
    stop_nodes([a, b])
    start_all([a, b])
    # each side refuses the other's certificate at the handshake: no bridge comes up
    wait_for(lambda: "TLS handshake failed" in b.log(), 30, message="no refused handshake on the intruder")

    def refused() -> bool:
        return any("certificate verify failed" in (br.get("last_error") or "") for br in cluster_view(a)["bridges"])

    wait_for(refused, 30, message=str(cluster_view(a)["bridges"]))
    assert not any(br["connected"] for br in cluster_view(a)["bridges"] + cluster_view(b)["bridges"])
    assert a.proc.poll() is None and b.proc.poll() is None


def test_replication_over_tls_copies_the_live_and_the_backup_takes_over(tmp_path):
    import asyncio

    from petrel.testing.ha import drain, exactly, make_pair, send_range, stop_all, wait_in_sync

    pki = make_pki(tmp_path / "pki")
    top = "".join(f"{k} = {v}\n" for k, v in {
        "ssl_enabled": "true", "ssl_need_client_auth": "true", "ssl_cert": json.dumps(str(pki.server.cert)),
        "ssl_key": json.dumps(str(pki.server.key)), "ssl_ca": json.dumps(str(pki.ca.cert))}.items())
    p, b = make_pair(tmp_path, primary="failover_on_shutdown = true\n", top=top)
    for node in (p, b):
        node.config_path.write_text(node.config_path.read_text().replace('"tcp://127.0.0.1:', '"ssl://127.0.0.1:'))
    try:
        p.start()
        asyncio.run(send_range(url(p, pki), "queue://tls.replicated", range(0, 200)))
        b.start(wait=False)
        wait_in_sync(b)
        asyncio.run(send_range(url(p, pki), "queue://tls.replicated", range(200, 300)))  # streamed
        assert p.stop() == 0
        wait_for(lambda: b.health().get("status") == "ok", 60, message=b.log())
        exactly(asyncio.run(drain(url(b, pki), "queue://tls.replicated")), range(300))
        assert "certificate refused" not in p.log() + b.log()
    finally:
        stop_all(p, b)


def test_spark_recovery_reaches_an_ssl_target_with_its_url_options(tmp_path):
    """petrel.spark.migrate's link (the recovery job's) to ssl://host:port?trustStorePath=..."""
    from petrel.spark.migrate import MigrateFailed, probe
    from petrel.testing.process import BrokerProcess

    pki = make_pki(tmp_path / "pki")
    settings = (f"ssl_enabled = true\nssl_cert = {json.dumps(str(pki.server.cert))}\n"
                f"ssl_key = {json.dumps(str(pki.server.key))}\n"
                'cluster_user = "petrel-test"\ncluster_password = "tls-secret"\n')
    with BrokerProcess(tmp_path / "b", settings=settings) as b:
        begun = probe(f"ssl://127.0.0.1:{b.port}?trustStorePath={pki.ca.cert}", "origin-1", "petrel-test", "tls-secret",
                      timeout=10)
        assert begun.get("node_id")
        with pytest.raises(MigrateFailed, match="certificate verify failed"):
            probe(f"ssl://127.0.0.1:{b.port}", "origin-1", "petrel-test", "tls-secret", timeout=10)
