-- The aggregating tier: one consumer group over the keyed topic. Kafka gives each partition to
-- one member, so each member sees every record of its services and its windows are complete.
CREATE SOURCE keyed_spans FROM KAFKA WITH (
  brokers = 'kafka-0.kafka:9092,kafka-1.kafka:9092,kafka-2.kafka:9092',
  topic = 'otlp_spans',
  group = 'penstock-aggregate',
  signal = 'spans',
  initial_offset = 'earliest'
);

CREATE SINK backend TO OTLP WITH (endpoint = 'http://metrics-backend:4317', compression = 'zstd');

CREATE PIPELINE red FROM keyed_spans AS BEGIN
  INSERT INTO backend
  SELECT date_bin(INTERVAL '1 minute', start_time_unix_nano) AS time,
         resource.attributes['service.name'] AS service,
         count(*) AS requests,
         max(duration_nanos) AS slowest_ns
  FROM spans
  GROUP BY 1, 2;
END;
