"""Alt-Svc (RFC 7838): the h3 announcement a client reads off a server's TCP responses."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from latscope.signals.altsvc import (
    DEFAULT_MAX_AGE_S,
    AltService,
    AltSvc,
    alt_svc,
    describe_h3,
    h3_advertised,
    parse_alt_svc,
)


def test_h3_on_the_same_host_with_a_max_age() -> None:
    parsed = parse_alt_svc('h3=":443"; ma=86400')
    assert parsed.services == (AltService("h3", None, 443, 86400, False),)
    assert parsed.h3 == AltService("h3", None, 443, 86400)


def test_several_alternatives_keep_the_servers_order() -> None:
    parsed = parse_alt_svc('h3-29=":8443"; ma=60, h3="alt.example:443"; ma=3600; persist=1, h2=":443"')
    assert [s.protocol for s in parsed.services] == ["h3-29", "h3", "h2"]
    assert parsed.h3 == AltService("h3", "alt.example", 443, 3600, True)


def test_a_draft_alone_is_not_http3() -> None:
    assert parse_alt_svc('h3-29=":443"').h3 is None


def test_max_age_defaults_to_a_day() -> None:
    assert parse_alt_svc('h3=":443"').services[0].max_age_s == DEFAULT_MAX_AGE_S == 86_400


def test_clear_withdraws_every_alternative() -> None:
    assert parse_alt_svc("clear") == AltSvc(clear=True)
    assert alt_svc([("Alt-Svc", 'h3=":443"'), ("alt-svc", "clear")]) == AltSvc(clear=True)


def test_quoted_parameters_and_commas_inside_quotes() -> None:
    parsed = parse_alt_svc('h3=":443"; ma="120"; note="a, b; c", h2=":8443"')
    assert [(s.protocol, s.port, s.max_age_s) for s in parsed.services] == [("h3", 443, 120), ("h2", 8443, 86_400)]


def test_percent_encoded_protocol_id_and_ipv6_host() -> None:
    parsed = parse_alt_svc('w%3Dx%3Ay=":80", h3="[::1]:4433"')
    assert parsed.services[0].protocol == "w=x:y"
    assert parsed.services[1] == AltService("h3", "::1", 4433)


def test_a_bad_alternative_is_skipped_with_a_warning() -> None:
    warnings: list[str] = []
    parsed = parse_alt_svc('h3=443, h3=":99999", h3=":4433"', warnings=warnings)
    assert parsed.services == (AltService("h3", None, 4433),)
    assert len(warnings) == 2


def test_repeated_fields_are_read_in_order_and_no_field_is_none() -> None:
    headers = {"alt-svc": 'h2=":443"'}
    assert alt_svc(headers) == AltSvc(services=(AltService("h2", None, 443),))
    both = alt_svc([("Alt-Svc", 'h2=":1"'), ("Alt-Svc", 'h3=":2"')])
    assert both is not None and both.h3 == AltService("h3", None, 2)
    assert alt_svc({"server": "x"}) is None


@given(st.text(max_size=200))
def test_never_raises_on_any_text(value: str) -> None:
    parsed = parse_alt_svc(value, warnings=[])
    for service in parsed.services:
        assert 0 < service.port < 65_536
        assert service.max_age_s >= 0


_PROTOCOLS = st.sampled_from(["h3", "h2", "h3-29", "http%2F1.1"])
_HOSTS = st.sampled_from(["", "example.com", "[::1]", "127.0.0.1"])


@given(st.lists(st.tuples(_PROTOCOLS, _HOSTS, st.integers(1, 65_535), st.integers(0, 10**9)), min_size=1, max_size=5))
def test_what_a_server_writes_reads_back(alternatives: list[tuple[str, str, int, int]]) -> None:
    value = ", ".join(f'{p}="{h}:{port}"; ma={ma}' for p, h, port, ma in alternatives)
    parsed = parse_alt_svc(value)
    assert [(s.port, s.max_age_s) for s in parsed.services] == [(port, ma) for _, _, port, ma in alternatives]
    assert [s.host for s in parsed.services] == [h.strip("[]") or None for _, h, _, _ in alternatives]


def test_the_target_fact_names_the_h3_alternative_or_none() -> None:
    assert h3_advertised({"alt-svc": 'h2=":443", h3="edge.example:8443"; ma=60'}) == {
        "port": 8443,
        "host": "edge.example",
        "max_age_s": 60,
    }
    assert h3_advertised({"alt-svc": "clear"}) is None
    assert h3_advertised({"alt-svc": 'h3-29=":443"'}) is None
    assert h3_advertised({}) is None
    assert describe_h3({"port": 8443, "host": "edge.example", "max_age_s": 60}) == (
        "h3 advertised (edge.example:8443, max-age 60 s)"
    )
