-- Parsing log bodies into typed attributes and enriching them from a file, on the sample logs.
-- Offline: penstock replay examples/pipelines/parse_enrich.sql --out out/parse_enrich
CREATE SOURCE sample FROM FILE WITH (path = '../data/logs.jsonl');

CREATE SINK enriched TO FILE WITH (path = 'out/enriched.jsonl');

-- Which team owns each service (relative paths: beside this file).
CREATE TABLE owners FROM FILE WITH (path = '../data/owners.csv');

CREATE PIPELINE parse FROM sample AS BEGIN
  -- Request lines ("GET /api/cart/26970 204 0ms") into http.* attributes; other bodies add
  -- nothing.
  UPDATE logs SET attributes = attributes || regexp_captures(body,
    '^(?P<http.request.method>[A-Z]+) (?P<url.path>/\S*) (?P<http.response.status_code>\d{3}) (?P<duration_ms>\d+)ms$');
  -- Captures are strings: the numbers become ints.
  UPDATE logs SET
    attributes['http.response.status_code'] = CAST(attributes['http.response.status_code'] AS BIGINT),
    attributes['duration_ms'] = CAST(attributes['duration_ms'] AS BIGINT)
    WHERE attributes['duration_ms'] IS NOT NULL;
  -- JSON bodies into attributes, each field of its own type.
  UPDATE logs SET attributes = attributes || parse_json(body) WHERE body LIKE '{%';
  -- The owner of the service, where the file names one.
  UPDATE logs SET attributes['team'] = o.team, attributes['tier'] = o.tier
    FROM owners o WHERE resource.attributes['service.name'] = o.service;
  INSERT INTO enriched SELECT * FROM logs;
END;
