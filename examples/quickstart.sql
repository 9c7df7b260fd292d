-- Quickstart: synthetic logs through a SQL pipeline to the console and a file.
--
--   cargo run -p penstock-server -- run examples/quickstart.sql
--
-- To receive real telemetry instead, comment out the GENERATOR source and uncomment the GRPC
-- one: it serves OTLP/gRPC and OTAP on port 4317 (point an SDK or a Collector at it; stop
-- with Ctrl-C). Add `--admin-listen 127.0.0.1:9090` for /metrics, /healthz and /pipelines.

CREATE SOURCE demo FROM GENERATOR WITH (signal = 'logs', rate = 20000, batch = 1000, records = 20000);
-- CREATE SOURCE demo FROM GRPC WITH (listen = '127.0.0.1:4317');

CREATE SINK screen TO CONSOLE WITH (limit = 3);
CREATE SINK archive TO FILE WITH (path = 'out/quickstart/logs.jsonl');

CREATE PIPELINE quickstart FROM demo AS BEGIN
  -- Newer semantic-convention names.
  ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'error.type';
  ALTER TABLE logs RENAME RESOURCE ATTRIBUTE 'deployment.environment' TO 'deployment.environment.name';
  -- No personal data or credentials leave the gateway.
  ALTER TABLE logs DROP ATTRIBUTE 'user.email', 'http.request.header.authorization';
  -- Debug and trace noise goes nowhere.
  DELETE FROM logs WHERE severity_number < 9;
  -- Server errors are shown on the console; everything left is archived.
  INSERT INTO screen SELECT * FROM logs WHERE attributes['http.response.status_code'] >= 500;
  INSERT INTO archive SELECT * FROM logs;
END;
