-- The front tier for tail sampling: stateless gateways behind the load balancer write every span
-- to Kafka keyed by trace id, so all spans of a trace share a partition whichever gateway
-- received them.
CREATE SOURCE edge FROM GRPC WITH (listen = '0.0.0.0:4317');

CREATE SINK by_trace TO KAFKA WITH (
  brokers = 'kafka-0.kafka:9092,kafka-1.kafka:9092,kafka-2.kafka:9092',
  topic = 'otlp_spans_by_trace',
  key = 'trace_id',
  compression = 'zstd',
  acks = 'all'
);

CREATE PIPELINE front FROM edge AS BEGIN
  INSERT INTO by_trace SELECT * FROM spans;
END;
