"""Queries a gateway's Flight SQL service with ADBC and with pyarrow.flight, and prints what
each returned as one JSON object per line. Argument: the service's address, host:port."""

import json
import sys

import adbc_driver_flightsql.dbapi as flightsql
import pyarrow.flight as flight


def varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number, payload):
    """A length-delimited protobuf field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def statement_query(sql):
    """A CommandStatementQuery packed in a google.protobuf.Any, as Flight SQL sends it."""
    command = field(1, sql.encode())
    type_url = b"type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery"
    return field(1, type_url) + field(2, command)


def report(client, **fields):
    print(json.dumps({"client": client, **fields}), flush=True)


address = sys.argv[1]

# ADBC, as an analyst's notebook would: a live query reading for two seconds.
with flightsql.connect(
    f"grpc://{address}",
    db_kwargs={"adbc.flight.sql.rpc.call_header.x-penstock-for": "2s"},
) as connection:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT resource.attributes['service.name'] AS svc, count(*) AS n "
            "FROM logs GROUP BY svc ORDER BY n DESC"
        )
        table = cursor.fetch_arrow_table()
        report("adbc", columns=table.column_names, rows=table.to_pylist())
    with connection.cursor() as cursor:
        # A prepared statement with a parameter, over what the gateway just saw.
        cursor.execute(
            "SELECT count(*) AS n FROM recent.logs WHERE severity_number >= $1",
            parameters=(17,),
        )
        high = cursor.fetch_arrow_table().to_pylist()
        cursor.execute("SELECT count(*) AS n FROM recent.logs")
        every = cursor.fetch_arrow_table().to_pylist()
        report("adbc-prepared", high=high[0]["n"], every=every[0]["n"])
    objects = connection.adbc_get_objects(depth="tables").read_all().to_pylist()
    report(
        "adbc-objects",
        catalogs=sorted(c["catalog_name"] for c in objects),
        tables=sorted(
            {
                f'{c["catalog_name"]}.{s["db_schema_name"]}.{t["table_name"]}'
                for c in objects
                for s in c["catalog_db_schemas"] or []
                for t in s["db_schema_tables"] or []
            }
        ),
    )
    with connection.cursor() as cursor:
        try:
            cursor.execute("DELETE FROM logs")
            report("adbc-refused", error=None)
        except Exception as e:  # the driver's error carries the server's message
            report("adbc-refused", error=str(e))

# pyarrow.flight, speaking Flight SQL by hand: GetFlightInfo, then DoGet of its ticket.
client = flight.connect(f"grpc://{address}")
info = client.get_flight_info(
    flight.FlightDescriptor.for_command(
        statement_query("SELECT severity_text, body FROM recent.logs LIMIT 5")
    )
)
rows = client.do_get(info.endpoints[0].ticket).read_all()
report("pyarrow", schema=info.schema.names, rows=rows.to_pylist())
