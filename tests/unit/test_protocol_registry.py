"""The protocol registry: detection from the first bytes, and the acceptors a config asks for."""

from petrel.config import BrokerConfig
from petrel.server import protocols

OPENINGS = {
    "core": b"PETREL\x01\x00",
    "stomp": b"\r\nCONNECT\naccept-version:1.2\n\n\x00",
    "mqtt": b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00",
}


def test_each_protocol_is_recognised_whole_and_not_before_its_bytes_say_so():
    for name, opening in OPENINGS.items():
        assert protocols.detect(opening) == name
        decided_at = None
        for n in range(len(opening) + 1):
            verdict = protocols.detect(opening[:n])
            if verdict is not None:
                assert verdict == name, (name, n, verdict)
                decided_at = decided_at if decided_at is not None else n
        assert decided_at is not None


def test_bytes_of_no_protocol_are_unknown_and_a_port_hears_only_its_own():
    assert protocols.detect(b"GET / HTTP/1.1\r\n") == "unknown"
    assert protocols.detect(b"\x00\x01\x02") == "unknown"
    assert protocols.detect(OPENINGS["core"], ("stomp",)) == "unknown"
    assert protocols.detect(OPENINGS["stomp"], ("stomp",)) == "stomp"
    assert protocols.detect(b"\r\n" * 600) == "unknown"  # blank lines forever: closed, not held


def test_acceptors_follow_the_settings_and_the_offset():
    names = protocols.names()
    default = {name: port for name, port, _ in protocols.acceptors(BrokerConfig())}
    assert default["all"] == 61616 and default["stomp"] == 61613
    shifted = {name: port for name, port, _ in protocols.acceptors(BrokerConfig(port_offset=10))}
    assert shifted == {name: port + 10 for name, port in default.items()}
    test_like = protocols.acceptors(BrokerConfig(port=0, stomp_port=-1))
    assert test_like == [("all", 0, names)]  # protocol ports unset and port not standard: 0 speaks them all
    drainer = protocols.acceptors(BrokerConfig(port=-1, stomp_port=-1))
    assert drainer == []
