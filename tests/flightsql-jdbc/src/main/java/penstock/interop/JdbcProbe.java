package penstock.interop;

import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

/**
 * Queries a gateway's Flight SQL service through the Arrow Flight SQL JDBC driver, making the
 * calls DBeaver makes: the database's description and capabilities, the navigator's catalogs,
 * schemas, tables and columns, a table's keys and indexes, a statement, a timestamp read as the
 * data viewer reads it, prepared statements with a parameter, and a refused statement. Prints
 * one JSON object per step on standard output (its "step" names it; "error" says why it
 * failed) and exits with 1 when a step failed unexpectedly. Calls that fail for known limits
 * of the driver or the gateway report their errors in fields of their own, without failing.
 *
 * <p>Argument: the service's address, HOST:PORT. Arrow's memory needs
 * {@code --add-opens=java.base/java.nio=ALL-UNNAMED} on Java 17 and later.
 */
public final class JdbcProbe {
  /** The call header that sets how long a live query reads. */
  static final String FOR_HEADER = "x-penstock-for";

  static final String LIVE_QUERY =
      "SELECT resource.attributes['service.name'] AS svc, count(*) AS n"
          + " FROM live.all.logs GROUP BY svc";
  static final String PREPARED_QUERY =
      "SELECT count(*) AS n FROM recent.all.logs WHERE severity_number >= $1";
  static final String QUESTION_MARK_QUERY =
      "SELECT count(*) AS n FROM recent.all.logs WHERE severity_number >= ?";
  static final String EVERY_QUERY = "SELECT count(*) AS n FROM recent.all.logs";
  static final String REFUSED_QUERY = "DROP TABLE x";
  static final String TIMESTAMP_QUERY = "SELECT time_unix_nano FROM recent.all.logs LIMIT 1";

  private static boolean failed = false;

  private JdbcProbe() {}

  /** A step's report, printed as one JSON object. */
  interface Step {
    void run(Map<String, Object> report) throws Exception;
  }

  public static void main(String[] args) {
    if (args.length != 1) {
      System.err.println("usage: JdbcProbe HOST:PORT");
      System.exit(2);
    }
    String url = "jdbc:arrow-flight-sql://" + args[0] + "?useEncryption=false";
    // Properties the driver does not know are sent as headers of every call.
    Properties properties = new Properties();
    properties.setProperty(FOR_HEADER, "2s");
    try (Connection connection = DriverManager.getConnection(url, properties)) {
      probe(connection);
    } catch (Throwable e) {
      Map<String, Object> report = new LinkedHashMap<>();
      report.put("step", "connect");
      report.put("error", describe(e));
      print(report);
      failed = true;
    }
    System.out.flush();
    System.exit(failed ? 1 : 0);
  }

  static void probe(Connection connection) {
    DatabaseMetaData meta;
    try {
      meta = connection.getMetaData();
    } catch (SQLException e) {
      step("metadata", r -> {
        throw e;
      });
      return;
    }
    step(
        "database",
        r -> {
          r.put("product", meta.getDatabaseProductName());
          r.put("version", meta.getDatabaseProductVersion());
          r.put("read_only", meta.isReadOnly());
          r.put("quote", meta.getIdentifierQuoteString());
          r.put("table_types", column(meta.getTableTypes(), "TABLE_TYPE"));
        });
    // Capabilities DBeaver reads when it connects: those the driver fails to read (it needs
    // a SqlInfo value the server does not give) are listed, not a failure of the probe.
    step(
        "capabilities",
        r -> {
          Map<String, Step> getters = new LinkedHashMap<>();
          getters.put("supportsTransactions", x -> x.put("v", meta.supportsTransactions()));
          getters.put("getDefaultTransactionIsolation",
              x -> x.put("v", meta.getDefaultTransactionIsolation()));
          getters.put("supportsBatchUpdates", x -> x.put("v", meta.supportsBatchUpdates()));
          getters.put("supportsStoredProcedures", x -> x.put("v", meta.supportsStoredProcedures()));
          getters.put("isCatalogAtStart", x -> x.put("v", meta.isCatalogAtStart()));
          getters.put("getCatalogSeparator", x -> x.put("v", meta.getCatalogSeparator()));
          getters.put("getCatalogTerm", x -> x.put("v", meta.getCatalogTerm()));
          getters.put("getSchemaTerm", x -> x.put("v", meta.getSchemaTerm()));
          getters.put("getSQLKeywords", x -> x.put("v", meta.getSQLKeywords()));
          getters.put("getMaxColumnNameLength", x -> x.put("v", meta.getMaxColumnNameLength()));
          getters.put("supportsMixedCaseIdentifiers",
              x -> x.put("v", meta.supportsMixedCaseIdentifiers()));
          getters.put("storesUpperCaseIdentifiers",
              x -> x.put("v", meta.storesUpperCaseIdentifiers()));
          Map<String, Object> values = new LinkedHashMap<>();
          Map<String, Object> failing = new LinkedHashMap<>();
          for (Map.Entry<String, Step> getter : getters.entrySet()) {
            Map<String, Object> value = new LinkedHashMap<>();
            try {
              getter.getValue().run(value);
              values.put(getter.getKey(), value.get("v"));
            } catch (Exception e) {
              failing.put(getter.getKey(), e.getClass().getSimpleName());
            }
          }
          r.put("values", values);
          r.put("failing", failing);
        });
    step("catalogs", r -> r.put("catalogs", column(meta.getCatalogs(), "TABLE_CAT")));
    step(
        "schemas",
        r -> {
          List<Object> schemas = new ArrayList<>();
          try (ResultSet rows = meta.getSchemas()) {
            while (rows.next()) {
              schemas.add(rows.getString("TABLE_CATALOG") + "." + rows.getString("TABLE_SCHEM"));
            }
          }
          r.put("schemas", schemas);
          // As the navigator asks when a catalog is opened.
          List<Object> live = new ArrayList<>();
          try (ResultSet rows = meta.getSchemas("live", "%")) {
            while (rows.next()) {
              live.add(rows.getString("TABLE_SCHEM"));
            }
          }
          r.put("live", live);
        });
    step(
        "tables",
        r -> {
          List<Object> tables = new ArrayList<>();
          try (ResultSet rows = meta.getTables(null, null, "%", null)) {
            while (rows.next()) {
              tables.add(
                  rows.getString("TABLE_CAT")
                      + "."
                      + rows.getString("TABLE_SCHEM")
                      + "."
                      + rows.getString("TABLE_NAME"));
            }
          }
          r.put("tables", tables);
          // One schema's tables of type TABLE, as the navigator lists them.
          r.put(
              "live_all",
              column(meta.getTables("live", "all", "%", new String[] {"TABLE"}), "TABLE_NAME"));
        });
    step(
        "columns",
        r -> {
          r.put("table", "live.all.logs");
          List<Object> columns = new ArrayList<>();
          try (ResultSet rows = meta.getColumns("live", "all", "logs", "%")) {
            while (rows.next()) {
              Map<String, Object> c = new LinkedHashMap<>();
              c.put("name", rows.getString("COLUMN_NAME"));
              c.put("type", rows.getInt("DATA_TYPE"));
              c.put("type_name", rows.getString("TYPE_NAME"));
              c.put("nullable", rows.getInt("NULLABLE"));
              c.put("position", rows.getInt("ORDINAL_POSITION"));
              columns.add(c);
            }
          }
          r.put("columns", columns);
        });
    // What DBeaver asks when it opens a table: its keys and indexes. Answers and errors are
    // both reported.
    step(
        "table-details",
        r -> {
          r.put("table", "live.all.logs");
          r.put("primary_keys", rowsOrError(() -> meta.getPrimaryKeys("live", "all", "logs")));
          r.put("imported_keys", rowsOrError(() -> meta.getImportedKeys("live", "all", "logs")));
          r.put(
              "index_info",
              rowsOrError(() -> meta.getIndexInfo("live", "all", "logs", false, true)));
        });
    step(
        "query",
        r -> {
          r.put("sql", LIVE_QUERY);
          long started = System.nanoTime();
          try (Statement statement = connection.createStatement();
              ResultSet rows = statement.executeQuery(LIVE_QUERY)) {
            ResultSetMetaData shape = rows.getMetaData();
            List<Object> names = new ArrayList<>();
            List<Object> types = new ArrayList<>();
            for (int i = 1; i <= shape.getColumnCount(); i++) {
              names.add(shape.getColumnName(i));
              types.add(shape.getColumnTypeName(i));
            }
            r.put("columns", names);
            r.put("column_types", types);
            List<Object> out = new ArrayList<>();
            while (rows.next()) {
              Map<String, Object> row = new LinkedHashMap<>();
              row.put("svc", rows.getString("svc"));
              row.put("n", rows.getLong("n"));
              out.add(row);
            }
            r.put("rows", out);
          }
          r.put("seconds", (System.nanoTime() - started) / 1e9);
        });
    // Timestamps as DBeaver's data viewer reads them: getObject(index) first.
    step(
        "timestamp",
        r -> {
          try (Statement statement = connection.createStatement();
              ResultSet rows = statement.executeQuery(TIMESTAMP_QUERY)) {
            r.put("type", rows.getMetaData().getColumnTypeName(1));
            if (!rows.next()) {
              throw new SQLException("no row");
            }
            r.put("get_timestamp", String.valueOf(rows.getTimestamp(1)));
            r.put("get_offset_date_time", String.valueOf(rows.getObject(1, OffsetDateTime.class)));
            try {
              r.put("get_object", String.valueOf(rows.getObject(1)));
            } catch (RuntimeException | SQLException e) {
              r.put("get_object_error", describe(e));
            }
          }
        });
    step(
        "prepared",
        r -> {
          r.put("sql", PREPARED_QUERY);
          try (PreparedStatement statement = connection.prepareStatement(PREPARED_QUERY)) {
            r.put("parameters", statement.getParameterMetaData().getParameterCount());
            statement.setInt(1, 17);
            r.put("high_int", count(statement.executeQuery()));
            statement.setLong(1, 17L);
            r.put("high_long", count(statement.executeQuery()));
          }
          try (PreparedStatement statement = connection.prepareStatement(EVERY_QUERY)) {
            r.put("every", count(statement.executeQuery()));
          }
        });
    // JDBC's own placeholder: reported as it goes, a refusal included (the gateway's
    // placeholders are $1, $2, ...).
    step(
        "prepared-question-mark",
        r -> {
          r.put("sql", QUESTION_MARK_QUERY);
          try (PreparedStatement statement = connection.prepareStatement(QUESTION_MARK_QUERY)) {
            r.put("parameters", statement.getParameterMetaData().getParameterCount());
            statement.setInt(1, 17);
            r.put("high", count(statement.executeQuery()));
          } catch (SQLException e) {
            r.put("refused", describe(e));
          }
        });
    step(
        "refused",
        r -> {
          r.put("sql", REFUSED_QUERY);
          try (Statement statement = connection.createStatement()) {
            statement.execute(REFUSED_QUERY);
            throw new IllegalStateException(REFUSED_QUERY + " was not refused");
          } catch (SQLException e) {
            r.put("message", describe(e));
          }
        });
  }

  /** Runs `step` and prints its report, with the error it failed with if it did. */
  static void step(String name, Step step) {
    Map<String, Object> report = new LinkedHashMap<>();
    report.put("step", name);
    try {
      step.run(report);
    } catch (Throwable e) {
      report.put("error", describe(e));
      failed = true;
    }
    print(report);
  }

  /** A metadata result to be read. */
  interface Rows {
    ResultSet get() throws SQLException;
  }

  /** How many rows `rows` gives, or the error it fails with. */
  static Object rowsOrError(Rows rows) {
    try (ResultSet result = rows.get()) {
      long n = 0;
      while (result.next()) {
        n++;
      }
      return n;
    } catch (SQLException | RuntimeException e) {
      return describe(e);
    }
  }

  /** The only value of a one-row, one-column result. */
  static long count(ResultSet rows) throws SQLException {
    try (rows) {
      if (!rows.next()) {
        throw new SQLException("no row");
      }
      return rows.getLong(1);
    }
  }

  /** The values of one column of `rows`, as text. */
  static List<Object> column(ResultSet rows, String name) throws SQLException {
    List<Object> values = new ArrayList<>();
    try (rows) {
      while (rows.next()) {
        values.add(rows.getString(name));
      }
    }
    return values;
  }

  /** An exception's class and message, with those of its causes. */
  static String describe(Throwable e) {
    StringBuilder text = new StringBuilder();
    for (Throwable t = e; t != null; t = t.getCause()) {
      if (text.length() > 0) {
        text.append(" <- ");
      }
      text.append(t.getClass().getName()).append(": ").append(t.getMessage());
      if (t.getCause() == t) {
        break;
      }
    }
    return text.toString();
  }

  static void print(Map<String, Object> report) {
    StringBuilder out = new StringBuilder();
    json(out, report);
    System.out.println(out);
    System.out.flush();
  }

  static void json(StringBuilder out, Object value) {
    if (value == null) {
      out.append("null");
    } else if (value instanceof Map<?, ?> map) {
      out.append('{');
      boolean first = true;
      for (Map.Entry<?, ?> entry : map.entrySet()) {
        if (!first) {
          out.append(',');
        }
        first = false;
        string(out, String.valueOf(entry.getKey()));
        out.append(':');
        json(out, entry.getValue());
      }
      out.append('}');
    } else if (value instanceof List<?> list) {
      out.append('[');
      for (int i = 0; i < list.size(); i++) {
        if (i > 0) {
          out.append(',');
        }
        json(out, list.get(i));
      }
      out.append(']');
    } else if (value instanceof Boolean) {
      out.append(value);
    } else if (value instanceof Double d && (d.isNaN() || d.isInfinite())) {
      out.append("null");
    } else if (value instanceof Number) {
      out.append(value);
    } else {
      string(out, value.toString());
    }
  }

  static void string(StringBuilder out, String text) {
    out.append('"');
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      switch (c) {
        case '"' -> out.append("\\\"");
        case '\\' -> out.append("\\\\");
        case '\n' -> out.append("\\n");
        case '\r' -> out.append("\\r");
        case '\t' -> out.append("\\t");
        default -> {
          if (c < 0x20) {
            out.append(String.format("\\u%04x", (int) c));
          } else {
            out.append(c);
          }
        }
      }
    }
    out.append('"');
  }
}
