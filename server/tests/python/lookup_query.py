"""Reads a gateway's lookup tables through its Flight SQL service with ADBC: the catalog as a
client browses it, a table whole, and lookup() in a query. Prints one JSON object per line.
Argument: the service's address, host:port."""

import json
import sys

import adbc_driver_flightsql.dbapi as flightsql


def report(what, **fields):
    print(json.dumps({"what": what, **fields}), flush=True)


connection = flightsql.connect(f"grpc://{sys.argv[1]}", autocommit=True)
objects = connection.adbc_get_objects(depth="tables").read_all().to_pylist()
tables = [
    [catalog["catalog_name"], schema["db_schema_name"], table["table_name"], table["table_type"]]
    for catalog in objects
    for schema in catalog["catalog_db_schemas"] or []
    for table in schema["db_schema_tables"] or []
    if catalog["catalog_name"] == "lookup"
]
report("catalog", tables=tables)
cursor = connection.cursor()
cursor.execute("SELECT service, team, tier FROM owners ORDER BY service")
report("table", rows=[list(row) for row in cursor.fetchall()])
cursor.execute("SELECT lookup('owners', 'checkout', 'team') AS team, lookup('owners', 'nobody', 'team') AS none")
report("lookup", rows=[list(row) for row in cursor.fetchall()])
connection.close()
