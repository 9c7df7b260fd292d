//! `Pipeline::explain`: the plan of every statement form, one operator each (insta snapshot).

#![allow(clippy::unwrap_used)]

use penstock_pipeline::{Pipeline, check_source};

#[test]
fn every_statement_form_explains_its_operator() {
    let sql = "CREATE SOURCE src FROM FILE WITH (path = 'x');
CREATE SINK out TO CONSOLE;
CREATE SINK metrics TO CONSOLE;
CREATE PIPELINE p FROM src AS BEGIN
  ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'exception.kind';
  ALTER TABLE logs DROP RESOURCE ATTRIBUTE 'host.ip', 'host.mac';
  UPDATE logs SET attributes['env'] = 'prod', severity_text = upper(severity_text)
    WHERE severity_number >= 17;
  UPDATE metrics SET resource.attributes['team'] = 'payments' WHERE name = 'http.requests';
  DELETE FROM logs WHERE body LIKE '%healthcheck%';
  INSERT INTO out SELECT time_unix_nano, body, attributes['user.id'] FROM logs
    WHERE attributes['http.status_code'] >= 500;
  INSERT INTO metrics
    SELECT date_bin(INTERVAL '1 minute', time_unix_nano) AS time,
           resource.attributes['service.name'] AS service,
           count(*) AS n, count(DISTINCT attributes['user.id']) AS users,
           sum(CAST(attributes['bytes'] AS BIGINT)) AS bytes, max(severity_text) AS worst
    FROM logs GROUP BY 1, 2 HAVING n > 10;
  INSERT INTO out SELECT * FROM spans
    WHERE kind = 2 AND trace_id IN (SELECT trace_id FROM spans WHERE name <> 'noise'
      GROUP BY trace_id HAVING bool_or(status.code = 2) OR sample(trace_id, 0.05));
  INSERT INTO metrics SELECT * FROM metrics WHERE name LIKE 'http.%'
    GROUP BY name, resource.attributes['service.name'], attributes['http.route'];
  ALTER TABLE metrics DROP RESOURCE ATTRIBUTE 'k8s.pod.name';
END;";
    let program = check_source("explain.sql", sql).unwrap_or_else(|e| panic!("{e}"));
    let pipeline = Pipeline::compile(&program, "p").unwrap_or_else(|e| panic!("{e}"));
    insta::assert_snapshot!(pipeline.explain());
}
