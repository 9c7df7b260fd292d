"""Queries a gateway's Flight SQL service over TLS with ADBC, once per client of a spec, and
prints what each was shown and answered, one JSON object per line.

Arguments: the service's address (host:port), the CA certificate (PEM file) to trust, and a
JSON file: a list of clients, each {"name", "token"?, "cert"?, "key"?, "for"?, "queries": [SQL...]}
("cert"/"key": PEM files of a client certificate, for mutual TLS; "for": the x-penstock-for
header, default 1s). For each client it prints
{"client", "catalogs", "tables"} (what `get_objects` lists, or "error") and one
{"client", "sql", "rows"} or {"client", "sql", "error"} per query; live queries read 1 s."""

import json
import sys

import adbc_driver_flightsql.dbapi as flightsql


def report(**fields):
    print(json.dumps(fields, default=str), flush=True)


def read(path):
    with open(path) as f:
        return f.read()


address, ca, spec = sys.argv[1], sys.argv[2], sys.argv[3]
with open(spec) as f:
    clients = json.load(f)

for client in clients:
    name = client["name"]
    options = {
        "adbc.flight.sql.rpc.call_header.x-penstock-for": client.get("for", "1s"),
        "adbc.flight.sql.client_option.tls_root_certs": read(ca),
    }
    if "token" in client:
        options["adbc.flight.sql.authorization_header"] = f"Bearer {client['token']}"
    if "cert" in client:
        options["adbc.flight.sql.client_option.mtls_cert_chain"] = read(client["cert"])
        options["adbc.flight.sql.client_option.mtls_private_key"] = read(client["key"])
    with flightsql.connect(f"grpc+tls://{address}", db_kwargs=options) as connection:
        try:
            objects = connection.adbc_get_objects(depth="tables").read_all().to_pylist()
            report(
                client=name,
                catalogs=sorted(c["catalog_name"] for c in objects),
                tables=sorted(
                    f'{c["catalog_name"]}.{s["db_schema_name"]}.{t["table_name"]}'
                    for c in objects
                    for s in c["catalog_db_schemas"] or []
                    for t in s["db_schema_tables"] or []
                ),
            )
        except Exception as e:  # the driver's error carries the server's code and message
            report(client=name, error=str(e))
        for sql in client["queries"]:
            try:
                with connection.cursor() as cursor:
                    cursor.execute(sql)
                    report(client=name, sql=sql, rows=cursor.fetch_arrow_table().to_pylist())
            except Exception as e:
                report(client=name, sql=sql, error=str(e))
