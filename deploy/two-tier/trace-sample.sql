-- The deciding tier: one consumer group over the topic keyed by trace id. Kafka gives each
-- partition to one member, so each member sees every span of its traces and decides them whole.
CREATE SOURCE keyed_spans FROM KAFKA WITH (
  brokers = 'kafka-0.kafka:9092,kafka-1.kafka:9092,kafka-2.kafka:9092',
  topic = 'otlp_spans_by_trace',
  group = 'penstock-sample',
  signal = 'spans',
  initial_offset = 'earliest'
);

CREATE SINK backend TO OTLP WITH (endpoint = 'http://traces-backend:4317', compression = 'zstd');

CREATE PIPELINE sample FROM keyed_spans WITH (decision_wait = '10s') AS BEGIN
  INSERT INTO backend SELECT * FROM spans
    WHERE trace_id IN (SELECT trace_id FROM spans GROUP BY trace_id
                       HAVING bool_or(status.code = 2)
                           OR max(duration_nanos) > 2000000000
                           OR sample(trace_id, 0.05));
END;
