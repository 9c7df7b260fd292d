-- Cutting metric cost without corrupting the numbers, on the sample metrics.
-- Offline: penstock replay examples/pipelines/cost_guards.sql --out out/cost_guards
CREATE SOURCE sample FROM FILE WITH (path = '../data/metrics.jsonl');

CREATE SINK by_pod   TO FILE WITH (path = 'out/by_pod.jsonl');
CREATE SINK by_route TO FILE WITH (path = 'out/by_route.jsonl');

-- Drop the pod and the host from every series: the pods' series merge, never collide.
CREATE PIPELINE no_pods FROM sample WITH (metric_interval = '1m') AS BEGIN
  ALTER TABLE metrics DROP RESOURCE ATTRIBUTE 'k8s.pod.name', 'host.name';
  ALTER TABLE metrics LIMIT SERIES 500 PER name;
  INSERT INTO by_pod SELECT * FROM metrics;
END;

-- Keep only the service and the route of each series.
CREATE PIPELINE per_route FROM sample WITH (metric_interval = '1m') AS BEGIN
  INSERT INTO by_route SELECT * FROM metrics
    GROUP BY name, resource.attributes['service.name'], attributes['http.route'];
END;
