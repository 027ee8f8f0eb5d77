"""AMQP 1.0 in the protocol registry: both protocol headers detected, its own acceptor at 5672."""

from petrel.config import BrokerConfig
from petrel.server import protocols


def test_amqp_and_sasl_headers_are_detected_not_before_their_bytes_say_so():
    for opening in (b"AMQP\x00\x01\x00\x00", b"AMQP\x03\x01\x00\x00"):
        assert protocols.detect(opening) == "amqp"
        for n in range(1, 8):
            assert protocols.detect(opening[:n]) is None
    assert protocols.detect(b"AMQP\x02\x01\x00\x00") == "unknown"  # TLS-in-AMQP is not spoken
    assert protocols.detect(b"AMQP\x00\x00\x09\x01") == "unknown"  # AMQP 0-9-1
    assert protocols.detect(b"AMQP\x00\x01\x00\x00", ("stomp",)) == "unknown"


def test_amqp_port_standard_on_a_standard_broker_else_off_unless_set():
    default = {name: port for name, port, _ in protocols.acceptors(BrokerConfig())}
    assert default["amqp"] == 5672
    assert "amqp" in protocols.names()
    assert all(name != "amqp" for name, _, _ in protocols.acceptors(BrokerConfig(port=0)))
    set_ = {name: port for name, port, _ in protocols.acceptors(BrokerConfig(port=0, amqp_port=5999))}
    assert set_["amqp"] == 5999
