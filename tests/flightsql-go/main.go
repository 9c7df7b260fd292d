// Command flightsql-probe queries Penstock's Flight SQL service with the Go Flight SQL client
// (github.com/apache/arrow-go/v18/arrow/flight/flightsql), the client Grafana's Flight SQL
// data source is built on, and calls the service the way that data source does: a client
// made with flightsql.NewClient and insecure transport credentials, and
// `authorization: Bearer TOKEN` sent as gRPC metadata on every call.
//
// Usage: flightsql-probe ADDRESS TOKEN
//
//	flightsql-probe scope ADDRESS TOKEN SQL...
//
// The second form checks what a principal may read: it prints a "scope-catalog" step (every
// catalog, catalog.schema and catalog.schema.table the catalog calls list for this token) and
// a "query" step per SQL (its rows, or its error code and message), live queries reading 1 s.
//
// It prints one JSON object per step on standard output, each with a "step" field, and exits
// with status 1 when a step fails that should not (the failing step is printed with its
// error). The steps:
//
//	sqlinfo           GetSqlInfo: the server's name and whether it is read-only
//	catalog           GetCatalogs, GetDBSchemas, and GetTables with their schemas: every
//	                  catalog.schema.table and the columns of live.all.logs
//	grafana-tables    GetTables filtered on the table type Grafana's table list asks for
//	grafana-health    the query Grafana's "Save & test" runs
//	live              a live GROUP BY query read for 2 s (x-penstock-for), every endpoint read
//	prepared          a prepared statement with one int64 parameter, then closed
//	refused           a statement that is not a query, and the error it gets
//	wrong-token       a call with another token, and the error code it gets
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/flight/flightsql"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// forHeader is the call header that sets how long a live query reads.
const forHeader = "x-penstock-for"

// liveSQL is the live query of the "live" step.
const liveSQL = "SELECT resource.attributes['service.name'] AS svc, count(*) AS n " +
	"FROM live.all.logs GROUP BY svc"

// preparedSQL is the statement of the "prepared" step, and everySQL what it is compared with.
const (
	preparedSQL = "SELECT count(*) AS n FROM recent.all.logs WHERE severity_number >= $1"
	everySQL    = "SELECT count(*) AS n FROM recent.all.logs"
	// threshold is the value bound to $1: ERROR (17) and above.
	threshold int64 = 17
)

// step is one line of output.
type step map[string]any

func report(s step) {
	line, err := json.Marshal(s)
	if err != nil {
		fmt.Fprintf(os.Stderr, "flightsql-probe: cannot encode %v: %v\n", s, err)
		os.Exit(1)
	}
	fmt.Println(string(line))
}

// fail reports that `name` failed with `err` and exits with status 1.
func fail(name string, err error) {
	report(step{"step": name, "error": err.Error(), "code": status.Code(err).String()})
	os.Exit(1)
}

// probe holds the client and the metadata every call carries.
type probe struct {
	client *flightsql.Client
	token  string
	md     metadata.MD
}

// ctx is a context whose calls carry the probe's metadata plus `extra` (key, value pairs).
func (p *probe) ctx(parent context.Context, extra ...string) context.Context {
	md := p.md.Copy()
	for i := 0; i+1 < len(extra); i += 2 {
		md.Set(extra[i], extra[i+1])
	}
	return metadata.NewOutgoingContext(parent, md)
}

// readAll reads every endpoint of `info` with DoGet and returns the rows as JSON-ready
// values, the column names, and the last app metadata each endpoint's stream carried.
func (p *probe) readAll(ctx context.Context, info *flight.FlightInfo) ([]map[string]any, []string, []string, error) {
	var (
		rows    []map[string]any
		columns []string
		last    []string
	)
	if len(info.Endpoint) == 0 {
		return nil, nil, nil, errors.New("the FlightInfo has no endpoint")
	}
	for _, endpoint := range info.Endpoint {
		reader, err := p.client.DoGet(ctx, endpoint.Ticket)
		if err != nil {
			return nil, nil, nil, err
		}
		columns = fieldNames(reader.Schema())
		// The app metadata of a message is there only until the next is read.
		var app []byte
		for reader.Next() {
			batch := reader.RecordBatch()
			rows = append(rows, batchRows(batch)...)
			if m := reader.LatestAppMetadata(); len(m) > 0 {
				app = append(app[:0], m...)
			}
		}
		err = reader.Err()
		if len(app) > 0 {
			last = append(last, string(app))
		}
		reader.Release()
		if err != nil {
			return nil, nil, nil, err
		}
	}
	return rows, columns, last, nil
}

func fieldNames(schema *arrow.Schema) []string {
	names := make([]string, 0, schema.NumFields())
	for _, f := range schema.Fields() {
		names = append(names, f.Name)
	}
	return names
}

// batchRows turns a record batch into one map per row, column name to value.
func batchRows(batch arrow.RecordBatch) []map[string]any {
	rows := make([]map[string]any, 0, batch.NumRows())
	for i := 0; i < int(batch.NumRows()); i++ {
		row := make(map[string]any, batch.NumCols())
		for c, col := range batch.Columns() {
			row[batch.ColumnName(c)] = col.GetOneForMarshal(i)
		}
		rows = append(rows, row)
	}
	return rows
}

// sqlInfo asks for every SqlInfo and returns the server's name and read-only flag.
func (p *probe) sqlInfo(ctx context.Context) step {
	info, err := p.client.GetSqlInfo(ctx, []flightsql.SqlInfo{})
	if err != nil {
		fail("sqlinfo", err)
	}
	out := step{"step": "sqlinfo"}
	ids := []uint32{}
	for _, endpoint := range info.Endpoint {
		reader, err := p.client.DoGet(ctx, endpoint.Ticket)
		if err != nil {
			fail("sqlinfo", err)
		}
		for reader.Next() {
			batch := reader.RecordBatch()
			names, okNames := batch.Column(0).(*array.Uint32)
			values, okValues := batch.Column(1).(*array.DenseUnion)
			if !okNames || !okValues {
				fail("sqlinfo", fmt.Errorf("unexpected SqlInfo schema %s", batch.Schema()))
			}
			for i := 0; i < names.Len(); i++ {
				id := names.Value(i)
				ids = append(ids, id)
				value := values.Field(values.ChildID(i))
				offset := int(values.ValueOffset(i))
				switch flightsql.SqlInfo(id) {
				case flightsql.SqlInfoFlightSqlServerName:
					out["server_name"] = value.GetOneForMarshal(offset)
				case flightsql.SqlInfoFlightSqlServerVersion:
					out["server_version"] = value.GetOneForMarshal(offset)
				case flightsql.SqlInfoFlightSqlServerReadOnly:
					out["read_only"] = value.GetOneForMarshal(offset)
				}
			}
		}
		err = reader.Err()
		reader.Release()
		if err != nil {
			fail("sqlinfo", err)
		}
	}
	out["info_ids"] = ids
	return out
}

// catalog browses the catalogs, schemas and tables, with the tables' schemas.
func (p *probe) catalog(ctx context.Context) step {
	info, err := p.client.GetCatalogs(ctx)
	if err != nil {
		fail("catalog", err)
	}
	catalogRows, _, _, err := p.readAll(ctx, info)
	if err != nil {
		fail("catalog", err)
	}
	catalogs := []string{}
	for _, r := range catalogRows {
		catalogs = append(catalogs, fmt.Sprint(r["catalog_name"]))
	}

	info, err = p.client.GetDBSchemas(ctx, &flightsql.GetDBSchemasOpts{})
	if err != nil {
		fail("catalog", err)
	}
	schemaRows, _, _, err := p.readAll(ctx, info)
	if err != nil {
		fail("catalog", err)
	}
	schemas := []string{}
	for _, r := range schemaRows {
		schemas = append(schemas, fmt.Sprintf("%v.%v", r["catalog_name"], r["db_schema_name"]))
	}

	tables, columns, err := p.tables(ctx, &flightsql.GetTablesOpts{IncludeSchema: true}, "live.all.logs")
	if err != nil {
		fail("catalog", err)
	}
	sort.Strings(tables)
	return step{
		"step":      "catalog",
		"catalogs":  catalogs,
		"schemas":   schemas,
		"tables":    tables,
		"logs_cols": columns,
	}
}

// tables runs GetTables with `opts` and returns every catalog.schema.table it lists, and the
// column names of table `wanted` (from its table_schema, when the options include schemas).
func (p *probe) tables(ctx context.Context, opts *flightsql.GetTablesOpts, wanted string) ([]string, []string, error) {
	info, err := p.client.GetTables(ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	names := []string{}
	columns := []string{}
	for _, endpoint := range info.Endpoint {
		reader, err := p.client.DoGet(ctx, endpoint.Ticket)
		if err != nil {
			return nil, nil, err
		}
		for reader.Next() {
			batch := reader.RecordBatch()
			col := func(name string) arrow.Array {
				if idx := batch.Schema().FieldIndices(name); len(idx) > 0 {
					return batch.Column(idx[0])
				}
				return nil
			}
			catalogs, schemas, tableNames := col("catalog_name"), col("db_schema_name"), col("table_name")
			if catalogs == nil || schemas == nil || tableNames == nil {
				reader.Release()
				return nil, nil, fmt.Errorf("unexpected GetTables schema %s", batch.Schema())
			}
			tableSchemas, _ := col("table_schema").(*array.Binary)
			for i := 0; i < int(batch.NumRows()); i++ {
				name := fmt.Sprintf("%s.%s.%s", catalogs.ValueStr(i), schemas.ValueStr(i), tableNames.ValueStr(i))
				names = append(names, name)
				if name != wanted || tableSchemas == nil {
					continue
				}
				schema, err := flight.DeserializeSchema(tableSchemas.Value(i), memory.DefaultAllocator)
				if err != nil {
					reader.Release()
					return nil, nil, fmt.Errorf("the table_schema of %s: %w", name, err)
				}
				columns = fieldNames(schema)
			}
		}
		err = reader.Err()
		reader.Release()
		if err != nil {
			return nil, nil, err
		}
	}
	return names, columns, nil
}

// grafanaTables lists tables as Grafana's table list does: filtered on the type "BASE TABLE".
func (p *probe) grafanaTables(ctx context.Context) step {
	out := step{"step": "grafana-tables", "table_types": []string{"BASE TABLE"}}
	tables, _, err := p.tables(ctx, &flightsql.GetTablesOpts{TableTypes: []string{"BASE TABLE"}}, "")
	if err != nil {
		out["error"] = err.Error()
		out["code"] = status.Code(err).String()
		return out
	}
	out["count"] = len(tables)
	return out
}

// grafanaHealth runs the query of Grafana's "Save & test".
func (p *probe) grafanaHealth(ctx context.Context) step {
	out := step{"step": "grafana-health", "sql": "select 1"}
	info, err := p.client.Execute(ctx, "select 1")
	if err == nil {
		var rows []map[string]any
		rows, _, _, err = p.readAll(ctx, info)
		out["rows"] = rows
	}
	if err != nil {
		out["error"] = err.Error()
		out["code"] = status.Code(err).String()
	}
	return out
}

// live runs the live GROUP BY query for 2 s.
func (p *probe) live(parent context.Context) step {
	ctx := p.ctx(parent, forHeader, "2s")
	started := time.Now()
	info, err := p.client.Execute(ctx, liveSQL)
	if err != nil {
		fail("live", err)
	}
	rows, columns, appMetadata, err := p.readAll(ctx, info)
	if err != nil {
		fail("live", err)
	}
	schema, err := flight.DeserializeSchema(info.Schema, memory.DefaultAllocator)
	if err != nil {
		fail("live", fmt.Errorf("the FlightInfo's schema: %w", err))
	}
	return step{
		"step":          "live",
		"info_columns":  fieldNames(schema),
		"endpoints":     len(info.Endpoint),
		"columns":       columns,
		"rows":          rows,
		"seconds":       time.Since(started).Seconds(),
		"last_metadata": appMetadata,
	}
}

// count runs a one-row `count(*) AS n` query and returns n.
func (p *probe) count(ctx context.Context, sql string) (int64, error) {
	info, err := p.client.Execute(ctx, sql)
	if err != nil {
		return 0, err
	}
	rows, _, _, err := p.readAll(ctx, info)
	if err != nil {
		return 0, err
	}
	if len(rows) != 1 {
		return 0, fmt.Errorf("%q returned %d rows", sql, len(rows))
	}
	return asInt64(rows[0]["n"])
}

func asInt64(v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case uint64:
		return int64(n), nil
	case int32:
		return int64(n), nil
	default:
		return 0, fmt.Errorf("n is %T %v, not an integer", v, v)
	}
}

// prepared prepares a statement with one parameter, binds an int64, runs it, and closes it.
func (p *probe) prepared(ctx context.Context) step {
	stmt, err := p.client.Prepare(ctx, preparedSQL)
	if err != nil {
		fail("prepared", err)
	}
	out := step{"step": "prepared", "sql": preparedSQL, "bound": threshold}
	name := "$1"
	if params := stmt.ParameterSchema(); params != nil {
		out["parameter_schema"] = params.String()
		if params.NumFields() > 0 {
			name = params.Field(0).Name
		}
	}
	if dataset := stmt.DatasetSchema(); dataset != nil {
		out["dataset_columns"] = fieldNames(dataset)
	}
	schema := arrow.NewSchema([]arrow.Field{{Name: name, Type: arrow.PrimitiveTypes.Int64, Nullable: true}}, nil)
	builder := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	builder.Field(0).(*array.Int64Builder).Append(threshold)
	binding := builder.NewRecordBatch()
	builder.Release()
	stmt.SetParameters(binding)
	binding.Release()

	info, err := stmt.Execute(ctx)
	if err != nil {
		fail("prepared", err)
	}
	rows, _, _, err := p.readAll(ctx, info)
	if err != nil {
		fail("prepared", err)
	}
	if len(rows) != 1 {
		fail("prepared", fmt.Errorf("%d rows, not 1: %v", len(rows), rows))
	}
	high, err := asInt64(rows[0]["n"])
	if err != nil {
		fail("prepared", err)
	}
	if err := stmt.Close(ctx); err != nil {
		fail("prepared", fmt.Errorf("closing: %w", err))
	}
	// Counted after the prepared statement: the ring only grows meanwhile.
	every, err := p.count(ctx, everySQL)
	if err != nil {
		fail("prepared", err)
	}
	out["high"] = high
	out["every"] = every
	out["closed"] = true
	return out
}

// refused sends a statement that is not a query; it must fail.
func (p *probe) refused(ctx context.Context) step {
	const sql = "DROP TABLE x"
	info, err := p.client.Execute(ctx, sql)
	if err == nil {
		_, _, _, err = p.readAll(ctx, info)
	}
	if err == nil {
		fail("refused", fmt.Errorf("%q was answered", sql))
	}
	st, _ := status.FromError(err)
	return step{"step": "refused", "sql": sql, "code": st.Code().String(), "message": st.Message()}
}

// wrongToken calls with another token; it must fail.
func (p *probe) wrongToken(parent context.Context) step {
	md := p.md.Copy()
	md.Set("authorization", "Bearer not-"+p.token)
	ctx := metadata.NewOutgoingContext(parent, md)
	_, err := p.client.GetSqlInfo(ctx, []flightsql.SqlInfo{flightsql.SqlInfoFlightSqlServerName})
	if err == nil {
		fail("wrong-token", errors.New("a call with a wrong token was answered"))
	}
	st, _ := status.FromError(err)
	return step{"step": "wrong-token", "code": st.Code().String(), "message": st.Message()}
}

// catalogOnly lists what the catalog calls show this token, as the "catalog" step does.
func (p *probe) catalogOnly(ctx context.Context) step {
	out := p.catalog(ctx)
	out["step"] = "scope-catalog"
	delete(out, "logs_cols")
	return out
}

// query runs `sql` (live queries read 1 s) and reports its rows or its error.
func (p *probe) query(parent context.Context, sql string) step {
	out := step{"step": "query", "sql": sql}
	ctx := p.ctx(parent, forHeader, "1s")
	info, err := p.client.Execute(ctx, sql)
	if err == nil {
		var rows []map[string]any
		rows, _, _, err = p.readAll(ctx, info)
		out["rows"] = rows
	}
	if err != nil {
		st, _ := status.FromError(err)
		out["code"] = st.Code().String()
		out["message"] = st.Message()
	} else {
		out["code"] = "OK"
	}
	return out
}

// connect makes the client, as Grafana's data source does: insecure transport credentials,
// the token in the metadata of every call.
func connect(address, token string) *probe {
	client, err := flightsql.NewClient(address, nil, nil,
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fail("connect", err)
	}
	return &probe{client: client, token: token, md: metadata.Pairs("authorization", "Bearer "+token)}
}

// scope runs the second form of the command.
func scope(address, token string, queries []string) {
	p := connect(address, token)
	defer p.client.Close()
	parent, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	report(p.catalogOnly(p.ctx(parent)))
	for _, sql := range queries {
		report(p.query(parent, sql))
	}
}

func main() {
	if len(os.Args) >= 4 && os.Args[1] == "scope" {
		scope(os.Args[2], os.Args[3], os.Args[4:])
		return
	}
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: flightsql-probe ADDRESS TOKEN")
		os.Exit(2)
	}
	p := connect(os.Args[1], os.Args[2])
	defer p.client.Close()

	parent, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ctx := p.ctx(parent)

	report(p.sqlInfo(ctx))
	report(p.catalog(ctx))
	report(p.grafanaTables(ctx))
	report(p.grafanaHealth(ctx))
	report(p.live(parent))
	report(p.prepared(ctx))
	report(p.refused(ctx))
	report(p.wrongToken(parent))
}
