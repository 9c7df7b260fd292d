-- Semantic-convention migration, redaction and routing of the sample logs.
-- Offline: penstock replay examples/pipelines/normalize.sql --out out/normalize
CREATE SOURCE sample FROM FILE WITH (path = '../data/logs.jsonl');

CREATE SINK errors TO FILE WITH (path = 'out/errors.jsonl');
CREATE SINK rest   TO FILE WITH (path = 'out/rest.jsonl');

CREATE PIPELINE normalize FROM sample AS BEGIN
  ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'exception.kind';
  ALTER TABLE logs RENAME RESOURCE ATTRIBUTE 'deployment.environment' TO 'deployment.environment.name';
  ALTER TABLE logs DROP ATTRIBUTE 'user.email', 'http.request.header.authorization';
  UPDATE logs SET attributes['env'] = 'prod', severity_text = upper(severity_text)
    WHERE resource.attributes['service.name'] = 'checkout';
  DELETE FROM logs WHERE severity_number < 5;
  INSERT INTO errors SELECT * FROM logs WHERE attributes['http.response.status_code'] >= 500;
  INSERT INTO rest SELECT * FROM logs WHERE attributes['http.response.status_code'] < 500;
END;
