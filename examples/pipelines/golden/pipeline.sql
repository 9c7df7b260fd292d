-- A golden test: the sinks of this file, replayed over input.jsonl, must get exactly the
-- records in pipeline.test/expected/ (`penstock test examples`, run by the tests).
CREATE SOURCE sample FROM FILE WITH (path = 'input.jsonl');
CREATE SINK errors  TO FILE WITH (path = 'errors.jsonl');
CREATE SINK routine TO FILE WITH (path = 'routine.jsonl');
CREATE SINK per_service TO FILE WITH (path = 'per_service.jsonl');

CREATE PIPELINE golden FROM sample AS BEGIN
  ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'exception.kind';
  ALTER TABLE logs RENAME RESOURCE ATTRIBUTE 'deployment.environment' TO 'deployment.environment.name';
  ALTER TABLE logs DROP ATTRIBUTE 'user.email';
  DELETE FROM logs WHERE severity_number < 5 OR attributes['http.route'] = '/healthcheck';
  UPDATE logs SET body = regexp_replace(body, '\d{12,19}', '****'), attributes['redacted'] = true
    WHERE body ~ '\d{12,19}';
  UPDATE logs SET resource.attributes['oncall'] = 'payments'
    WHERE resource.attributes['service.name'] = 'checkout' AND severity_number >= 17;
  INSERT INTO errors SELECT * FROM logs WHERE attributes['http.response.status_code'] >= 500;
  INSERT INTO routine SELECT * FROM logs WHERE attributes['http.response.status_code'] < 500;
  -- Derived metrics: records and worst severity per service and minute, for busy services.
  INSERT INTO per_service
  SELECT date_bin(INTERVAL '1 minute', time_unix_nano) AS time,
         resource.attributes['service.name'] AS service,
         count(*) AS records, max(severity_number) AS worst
  FROM logs GROUP BY 1, 2 HAVING count(*) >= 2;
END;
