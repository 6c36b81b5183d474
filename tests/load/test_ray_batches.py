"""What a Ray actor hands the driver: each converted batch as Arrow IPC bytes that decode to the same tables."""

from __future__ import annotations

from latscope.load.onray import decode_table, encode_table
from latscope.runs.records import RequestContext, build_tables
from tests.support.load_timelines import MS, make_timeline


def test_a_batch_crosses_as_bytes_and_decodes_to_the_same_tables_dictionary_included() -> None:
    batch = [
        (make_timeline(start_ns=10_000 * MS + i * MS), RequestContext(0, i, 0, "chat", False, 10_000 * MS))
        for i in range(5)
    ]
    requests, events = build_tables(batch)
    for table in (requests, events):
        data = encode_table(table)
        assert type(data) is bytes  # one plain buffer: nothing for Ray's serializer to walk
        decoded = decode_table(data)
        assert decoded.schema == table.schema
        assert decoded.equals(table)
    kinds = decode_table(encode_table(events)).column("kind").chunk(0).dictionary
    assert kinds.equals(events.column("kind").chunk(0).dictionary)  # the writer's full dictionary of kinds
